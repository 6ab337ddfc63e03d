"""The phrase table: text encoding as a lookup for the jitted driver.

The rules reasoner's outputs on the world are canonical texts of partial
attribute assignments (``lexicon.canonical_description`` for searches,
``lexicon.canonical_edit`` for edits), so each has a code (mixed radix over
``value + 1``) and ``PhraseTable`` holds the text encoder's embedding of every
code seen, filled lazily on the host. The codes span eight attributes (the
layout last, of a world whose layout is describable); a seven-attribute
assignment is coded with no layout, which keeps the codes' order.
"""

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.envs.world.benchmark import device_rows
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon

_RADIX = tuple(n + 1 for n in generator.num_values(
    generator.NUM_ATTRIBUTES + 1))
NUM_CODES = int(np.prod(_RADIX))        # partial assignments, incl. empty
# The rows a table holds room for from the start: a table's shape is an
# input of every method's compiled program, so each time it outgrows its
# room every program used after it compiles again. 4,096 holds the phrases
# of `main` (500 sessions x 23 methods: about 3,600) in 6 MiB.
MIN_ROWS = 4096
_STRIDES = tuple(int(np.prod(_RADIX[a + 1:])) for a in range(len(_RADIX)))


def code(attrs) -> jax.Array:
  """``[..., A]`` partial assignments (-1 = absent; ``A`` 7, or 8 with the
  layout) -> ``[...]`` int32 codes; 0 is the empty assignment."""
  attrs = jnp.asarray(attrs, jnp.int32)
  strides = jnp.asarray(_STRIDES[:attrs.shape[-1]], jnp.int32)
  return jnp.sum((attrs + 1) * strides, axis=-1)


def decode(c: int) -> dict[int, int]:
  """A code -> ``{attribute: value}``."""
  out = {}
  for a, (radix, stride) in enumerate(zip(_RADIX, _STRIDES)):
    v = (int(c) // stride) % radix - 1
    if v >= 0:
      out[a] = v
  return out


def phrase_text(c: int) -> str:
  """The rules reasoner's text of a table code: codes below ``NUM_CODES``
  are searches (``canonical_description``), the rest edits
  (``canonical_edit`` of ``c - NUM_CODES``); the empty code is ''."""
  if c in (0, NUM_CODES):
    return ''
  if c < NUM_CODES:
    return lexicon.canonical_description(decode(c))
  return lexicon.canonical_edit(decode(c - NUM_CODES))


class PhraseTable:
  """Embeddings of the reasoner's canonical texts, by code, filled lazily
  with ``encode_text``. Row 0 is the empty text (its channel is invalid).
  The index and the rows live on the device (``device_rows``): an add
  sends only its new rows and index entries."""

  def __init__(self, encode_text, dim: int):
    self._encode = encode_text
    self._dim = dim
    self._index = np.full(2 * NUM_CODES, -1, np.int32)  # the host's mirror
    self._index[[0, NUM_CODES]] = 0
    self._size = 1
    self._device_index = device_rows.DeviceRows(
        'phrase index', [((), np.int32, -1)], 2 * NUM_CODES)
    self._device_index.write([0, NUM_CODES], [np.zeros(2, np.int32)])
    self._rows = device_rows.DeviceRows(
        'phrase table', [((dim,), np.float32, 0.0)], MIN_ROWS)

  def __len__(self):
    return self._size

  def missing(self, codes) -> list[int]:
    codes = np.unique(np.asarray(codes, np.int64))
    return codes[self._index[codes] < 0].tolist()

  def add(self, codes) -> int:
    """Encodes the codes not in the table; returns how many were added."""
    new = self.missing(codes)
    if new:
      emb = np.asarray(self._encode([phrase_text(c) for c in new]),
                       np.float32)
      at = np.arange(self._size, self._size + len(new), dtype=np.int32)
      self._index[new] = at
      self._size += len(new)
      self._rows.grow(max(MIN_ROWS, 1 << (self._size - 1).bit_length()))
      self._device_index.write(new, [at])
      self._rows.write(at, [emb])
    return len(new)

  def arrays(self):
    """``(index [2 * NUM_CODES] int32, rows [R, D] float32)``; ``index`` is
    -1 for codes not in the table. ``R`` is at least ``MIN_ROWS``, a power
    of two that doubles when the table fills, so that a growing table
    recompiles rarely."""
    return self._device_index.arrays() + self._rows.arrays()


def lookup(index, rows, c):
  """The table row of code ``c`` (row 0, the empty text, for a code not yet
  in the table: the jitted driver then adds it and runs the batch again, so no
  such lookup survives into a returned trace)."""
  return rows[jnp.maximum(index[c], 0)]
