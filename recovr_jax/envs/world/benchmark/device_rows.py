"""Columns that live on the device and receive only their new rows.

The jitted driver's tables (phrases, user words, dialogues) are inputs of
every stage's kept program. Rebuilding a table on the host and uploading it
whole after each add made the host's work grow with the table (an
``np.insert`` or ``np.concatenate`` of every column, then one upload of it
all, per add). ``DeviceRows`` holds the columns on the device at a fixed
capacity and writes rows in place: the host queues ``(row, values)``; the
next ``arrays()`` sends the queued rows in one jitted scatter whose table
argument is donated (XLA updates the buffer where it is, on the CPU too),
padded to a power-of-two count so that few scatter programs compile.

The capacity is chosen by the table's owner from the run's size; a table
that fills up anyway doubles (one copy on the device, logged: every stage
program compiles again for the new shape).

Arrays handed out by ``arrays()`` are the table's own buffers: a later
``arrays()`` that writes rows donates them, and they may not be read after.
"""

import functools

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

_LEAST_WRITE = 16  # the smallest scatter (rows are padded to a power of two)


@functools.partial(jax.jit, donate_argnums=0)
def _written(columns, at, values):
  """``columns`` with rows ``at`` set to ``values`` (rows out of range, the
  padding, dropped)."""
  return tuple(c.at[at].set(v, mode='drop') for c, v in zip(columns, values))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _grown(columns, capacity, fills):
  return tuple(jnp.concatenate([c, jnp.full((capacity - c.shape[0],)
                                            + c.shape[1:], f, c.dtype)])
               for c, f in zip(columns, fills))


class DeviceRows:
  """Columns of ``capacity`` rows on the device.

  Args:
    name: the table's name (in the log line of a growth).
    columns: per column, ``(trailing shape, dtype, fill)``: a row not yet
      written holds ``fill``.
    capacity: the rows held from the start.
  """

  def __init__(self, name: str, columns, capacity: int):
    self._name = name
    self._specs = tuple((tuple(shape), np.dtype(dtype), fill)
                        for shape, dtype, fill in columns)
    self._capacity = int(capacity)
    self._arrays = None       # made at the first ``arrays()``
    self._at, self._values = [], []   # queued writes

  @property
  def capacity(self) -> int:
    return self._capacity

  def write(self, at, values):
    """Queues rows ``at`` ([n] ints < capacity) of each column (``values``:
    one [n, ...] array per column); a later write to a row wins."""
    at = np.asarray(at, np.int64).reshape(-1)
    if not at.size:
      return
    if at.max() >= self._capacity or at.min() < 0:
      raise IndexError(f'{self._name}: rows {at.min()}..{at.max()} outside '
                       f'its {self._capacity}')
    self._at.append(at)
    self._values.append(tuple(
        np.asarray(v, dtype).reshape((at.size,) + shape)
        for v, (shape, dtype, _) in zip(values, self._specs)))

  def grow(self, capacity: int):
    """Room for ``capacity`` rows (queued writes kept)."""
    if capacity <= self._capacity:
      return
    logging.info('%s: %d rows full; grown to %d (the programs that read it '
                 'compile again for the new shape)', self._name,
                 self._capacity, capacity)
    if self._arrays is not None:
      self._arrays = _grown(self._arrays, int(capacity),
                            tuple(f for _, _, f in self._specs))
    self._capacity = int(capacity)

  def arrays(self) -> tuple:
    """The columns, with every queued write in them."""
    if self._arrays is None:
      self._arrays = tuple(
          jnp.full((self._capacity,) + shape, fill, dtype)
          for shape, dtype, fill in self._specs)
    if self._at:
      at = np.concatenate(self._at)
      values = [np.concatenate(v) for v in zip(*self._values)]
      self._at, self._values = [], []
      size = max(_LEAST_WRITE, 1 << (at.size - 1).bit_length())
      pad = size - at.size
      # Padding rows point past the end (dropped). A row written twice
      # keeps its last value: XLA's scatter order is unspecified, so only
      # the last write of each row is sent.
      _, last = np.unique(at[::-1], return_index=True)
      keep = np.sort(at.size - 1 - last)
      at = np.concatenate([at[keep], np.full(pad + at.size - keep.size,
                                             self._capacity, np.int64)])
      values = [np.concatenate([v[keep], np.zeros(
          (pad + v.shape[0] - keep.size,) + v.shape[1:], v.dtype)])
                for v in values]
      self._arrays = _written(self._arrays, jnp.asarray(at, jnp.int32),
                              tuple(jnp.asarray(v) for v in values))
    return self._arrays
