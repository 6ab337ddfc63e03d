"""The user's words in the jitted mode: what the reasoner reads, tabulated.

The jitted driver's user decides in JAX (``simulated_user.decide``: action,
named attributes, Rewrite prefix); the words it would say are the host
user's (``SimulatedUser.words``: its own phrase bank or the lexicon's, then
surface noise, all drawn from NumPy seeded by (seed, session, turn)), which
only the host can write and parse. A ``WordTable`` holds, per decision, what
the rules reasoner reads out of those words (the attribute values it parses
and whether a rejection marker is present) and the words themselves. It
fills itself like the phrase table: a pass reports the decisions it lacks,
the host writes and parses them, and the batch runs again.

A decision is keyed by two int32s, its session (``query``: the index of
the session's query in the environment's arrays, which is its own under
``--query_repeats``) and ``(turn * CODES + code)`` with ``code = (action *
2^9 + named mask) * 8 + prefix`` (room for eight attributes: the layout of a
world whose layout is describable); the table finds the pair in an
open-addressing hash table, so it takes any number of sessions. Its rows
are append-only and live on the device (``device_rows``): an add sends only
its new rows and slots.

Methods that read the words themselves get their embeddings: each word
table entry's (``encode_text``, for MERLIN's answers) and, in a
``DialogueTable``, each dialogue's (the modification text and every
utterance so far joined with " [SEP] ", as IVR and UMIVR encode it). A
dialogue is a node: the root of query ``q`` is ``q``, and each utterance
leads from a node to a child, looked up by ``(parent, word key)`` in an
open-addressing hash table.
"""

import hashlib
import pathlib

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import checksums
from recovr_jax.envs.world.benchmark import device_rows
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.reasoning import rules

_PREFIXES = 8            # room for the Rewrite prefixes (5)
_MASKS = 2 ** (generator.NUM_ATTRIBUTES + 1)  # and for the layout's bit
CODES = 4 * _MASKS * _PREFIXES


def key(turn, action, named, prefix):
  """The int32 key of one decision within its session (traced)."""
  mask = jnp.sum(named.astype(jnp.int32) << jnp.arange(named.shape[0],
                                                       dtype=jnp.int32))
  code = (action * _MASKS + mask) * _PREFIXES + prefix
  return (turn * CODES + code).astype(jnp.int32)


def decode(k: int, num_attributes: int = generator.NUM_ATTRIBUTES):
  """``(turn, action, named [A] bool, prefix)`` of a key."""
  turn, code = divmod(int(k), CODES)
  rest, prefix = divmod(code, _PREFIXES)
  action, mask = divmod(rest, _MASKS)
  named = ((mask >> np.arange(num_attributes)) & 1).astype(bool)
  return turn, action, named, prefix


def lookup(tables, query, k):
  """``(found, mentions [A], negative, embedding [D], label)`` of decision
  ``k`` of session ``query`` (traced; ``tables`` from
  ``WordTable.arrays()``); a decision not held reads as no mentions, not
  negative, a zero embedding and label -1."""
  slot_query, slot_key, slot_row, mentions, negative, embedding, label = (
      tables)
  mask = slot_key.shape[0] - 1
  start = (_hash(query, k, jnp) & mask).astype(jnp.int32)

  def probing(i):
    return (slot_key[i] != -1) & ~((slot_key[i] == k) &
                                   (slot_query[i] == query))

  i = jax.lax.while_loop(probing, lambda i: (i + 1) & mask, start)
  found = (slot_key[i] == k) & (slot_query[i] == query) & (slot_key[i] >= 0)
  row = jnp.where(found, slot_row[i], 0)
  return (found, jnp.where(found, mentions[row], -1),
          found & negative[row], jnp.where(found, embedding[row], 0.0),
          jnp.where(found, label[row], -1))


def _slots_of(pairs, slots, values):
  """Puts ``pairs`` (with ``values``: their rows or nodes) into the host
  mirror ``slots`` = ``(first, second, value)`` [H] (linear probing,
  second -1 empty); returns the slots they went to."""
  queries, keys, at = slots
  mask = keys.shape[0] - 1
  placed = np.empty(len(pairs), np.int64)
  if not pairs:
    return placed
  q = np.asarray([p[0] for p in pairs], np.int64)
  k = np.asarray([p[1] for p in pairs], np.int64)
  firsts = (_hash(q, k, np) & np.uint32(mask)).astype(np.int64)
  for n, i in enumerate(firsts.tolist()):
    while keys[i] != -1:
      i = (i + 1) & mask
    queries[i], keys[i], at[i] = q[n], k[n], values[n]
    placed[n] = i
  return placed


class _Slots:
  """An open-addressing hash table of ``(first, second) -> value`` int32
  slots (second -1: empty), placed on the host's mirror and held on the
  device (``device_rows``: only the slots filled since are sent)."""

  def __init__(self, name: str, size: int):
    self._mirror = (np.zeros(size, np.int32), np.full(size, -1, np.int32),
                    np.zeros(size, np.int32))
    self._device = device_rows.DeviceRows(
        name, [((), np.int32, 0), ((), np.int32, -1), ((), np.int32, 0)],
        size)

  def put(self, pairs, values):
    placed = _slots_of(pairs, self._mirror, values)
    self._device.write(placed, [m[placed] for m in self._mirror])

  def arrays(self) -> tuple:
    return self._device.arrays()


class WordTable:
  """Per decision: the parse of the user's words, filled by the host.

  Args:
    user: the ``SimulatedUser`` (``draws='jax'``) whose words these are.
    attributes: ``[N, A]`` true gallery attributes (the user's view).
    target: ``[Q]`` target gallery id per query.
    num_turns: T.
  """

  def __init__(self, user, attributes, target, num_turns: int,
               encode_text=None, dim: int = 1, parse=None, label=None,
               store=None):
    self._user = user
    # What the reasoner reads the words with (default: the lexicon), and
    # its reading of the user's decision (a ``frames.LABELS`` index; None:
    # none, -1 in the table).
    self._parse = parse or lexicon.for_attributes(
        np.shape(attributes)[1]).parse
    self._label = label
    self._attributes = np.asarray(attributes)
    self._target = np.asarray(target)
    self._turns = num_turns
    self._encode = encode_text  # None: no embeddings held
    self._dim = dim if encode_text is not None else 1
    # (query, key) -> (mentions [A] int32, negative, words, label); an
    # entry's row in the device's columns is its place in this order.
    self._entries = {}
    self._embedding = {}  # (query, key) -> [D] float32 (with encode_text)
    # On the device (made at the first ``arrays()``): the slots (query,
    # key, row) with their host mirror, the rows, and how many entries
    # they hold.
    self._slots = None
    self._rows = None
    self._sent = 0
    self._order = []  # the entries' pairs in row order
    # The file the table is kept in between runs (``save``; None: none),
    # and how many entries it held when last read or written.
    self._store = None if store is None else pathlib.Path(store)
    self._stored = 0
    if self._store is not None:
      self._load()

  def __len__(self):
    return len(self._entries)

  @property
  def store(self) -> pathlib.Path | None:
    """The file the table is kept in between runs (None: none)."""
    return self._store

  def _load(self):
    """The entries an earlier run kept in ``store`` (checked against their
    digest; a file that cannot be read or fails it is derived data: a
    warning, and the table starts empty)."""
    path = self._store
    if not path.is_file():
      return
    try:
      with np.load(path, allow_pickle=False) as f:
        stored = {k: np.asarray(f[k]) for k in _STORED}
        digest = str(f['digest'])
      if _stored_digest(stored) != digest:
        raise ValueError('its entries do not match their digest')
      text = stored['text'].tobytes().decode('utf-8')
      ends = stored['ends'].tolist()
      if len(ends) != len(stored['queries']) or (ends and
                                                 ends[-1] != len(text)):
        raise ValueError('its words do not match its entries')
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('word table %s unreadable (%s: %s); ignoring it (the '
                      'user turns are written and parsed again)', path,
                      type(e).__name__, e)
      return
    starts = [0] + ends[:-1]
    for i, (q, k) in enumerate(zip(stored['queries'].tolist(),
                                   stored['keys'].tolist())):
      self._order.append((q, k))
      self._entries[q, k] = (stored['mentions'][i],
                             bool(stored['negative'][i]),
                             text[starts[i]:ends[i]],
                             int(stored['label'][i]))
    self._stored = len(self._entries)

  def save(self) -> int:
    """Keeps the table's entries in its ``store`` for later runs (written
    under a name of this writer's, then renamed: a reader sees a whole
    file); returns how many entries were written (0: nothing new)."""
    if self._store is None or len(self._entries) == self._stored:
      return 0
    pairs = sorted(self._entries)
    entries = [self._entries[e] for e in pairs]
    words = [e[2] for e in entries]
    text = ''.join(words)
    stored = dict(
        queries=np.asarray([q for q, _ in pairs], np.int32),
        keys=np.asarray([k for _, k in pairs], np.int32),
        mentions=np.asarray([e[0] for e in entries], np.int32).reshape(
            len(pairs), self._attributes.shape[1]),
        negative=np.asarray([e[1] for e in entries], bool),
        label=np.asarray([e[3] for e in entries], np.int32),
        text=np.frombuffer(text.encode('utf-8'), np.uint8),
        # Each entry's end, in characters of ``text``.
        ends=np.cumsum([len(w) for w in words], dtype=np.int64))
    self._store.parent.mkdir(parents=True, exist_ok=True)
    tmp = checksums.writer_temp(self._store)
    try:
      with open(tmp, 'wb') as f:
        np.savez(f, digest=np.asarray(_stored_digest(stored)), **stored)
      tmp.replace(self._store)
    finally:
      tmp.unlink(missing_ok=True)
    self._stored = len(pairs)
    return len(pairs)

  def add(self, pairs) -> int:
    """Writes and parses the decisions ``(query, key)`` of ``pairs`` not
    yet held; returns how many were new."""
    new = sorted(p for p in {(int(q), int(k)) for q, k in pairs}
                 if p not in self._entries)
    num = self._attributes.shape[1]
    for query, k in new:
      turn, action, named, prefix = decode(k, num)
      words = self._user.words(query, turn, action, named, prefix,
                               self._attributes[self._target[query]])
      row = np.full(num, -1, np.int32)
      for a, v in self._parse(words).items():
        row[a] = v
      self._order.append((query, k))
      self._entries[query, k] = (
          row, rules.has_negative_marker(words), words,
          -1 if self._label is None else self._label(words))
    if new and self._encode is not None:
      vectors = np.asarray(self._encode([self._entries[e][2] for e in new]),
                           np.float32)
      self._embedding.update(zip(new, vectors))
    return len(new)

  def _columns(self, pairs):
    """``(mentions, negative, embedding, label)`` of the held entries
    ``pairs`` (in that order)."""
    entries = [self._entries[e] for e in pairs]
    num, dim = self._attributes.shape[1], self._dim
    return (np.asarray([e[0] for e in entries], np.int32).reshape(-1, num),
            np.asarray([e[1] for e in entries], bool).reshape(len(pairs)),
            (np.asarray([self._embedding[e] for e in pairs], np.float32
                        ).reshape(-1, dim) if self._encode is not None
             else np.zeros((len(pairs), dim), np.float32)),
            np.asarray([e[3] for e in entries], np.int32).reshape(len(pairs)))

  def words(self, query: int, k: int) -> str:
    return self._entries[int(query), int(k)][2]

  def hold_embeddings(self, encode_text, dim: int):
    """From now on the table holds each entry's embedding too (those it
    holds already are encoded now)."""
    if self._encode is not None:
      return
    self._encode, self._dim = encode_text, dim
    keys = sorted(self._entries)
    if keys:
      vectors = np.asarray(encode_text([self._entries[k][2] for k in keys]),
                           np.float32)
      self._embedding.update(zip(keys, vectors))
    self._rows = None  # the rows again, with their embeddings

  def arrays(self, least: int = 0):
    """``(slot query [H], slot key [H], slot row [H] int32, mentions
    [C, A] int32, negative [C] bool, embedding [C, D] float32, label [C]
    int32)``: an open-addressing hash table of ``H = 2 C`` slots (empty
    slots have key -1) over the entries' rows (``D`` 1, zeros, without
    ``encode_text``; label -1 without a label reader). ``C`` is a power of
    two of at least ``least`` entries (a run asks for room for every turn
    it can add, so that its programs compile once) and doubles when the
    table fills. Only the entries added since the last call are sent."""
    capacity = _capacity(max(len(self._entries), least))
    if self._rows is None or capacity > self._rows.capacity:
      num, dim = self._attributes.shape[1], self._dim
      if self._rows is not None:
        logging.info('word table: %d rows full; grown to %d (the programs '
                     'that read it compile again)', self._rows.capacity,
                     capacity)
      self._rows = device_rows.DeviceRows(
          'word table', [((num,), np.int32, -1), ((), bool, False),
                         ((dim,), np.float32, 0.0), ((), np.int32, -1)],
          capacity)
      self._slots = _Slots('word slots', 2 * capacity)
      self._sent = 0
    if self._sent < len(self._entries):
      pairs = self._order[self._sent:]
      self._slots.put(pairs, range(self._sent, len(self._entries)))
      self._rows.write(np.arange(self._sent, len(self._entries)),
                       self._columns(pairs))
      self._sent = len(self._entries)
    return self._slots.arrays() + self._rows.arrays()


_STORED = ('queries', 'keys', 'mentions', 'negative', 'label', 'text', 'ends')


def _stored_digest(stored: dict) -> str:
  h = hashlib.sha256()
  for name in _STORED:
    a = np.ascontiguousarray(stored[name])
    h.update(f'{name}{a.dtype}{a.shape}'.encode())
    h.update(a.tobytes())
  return h.hexdigest()


def store_path(cache_dir, *made_by) -> pathlib.Path:
  """Where a word table is kept in ``cache_dir``, by what made it
  (``made_by``: the user's config and seed, T, the reader and its
  identity, the world's arrays, the code; ``repr``s and arrays)."""
  h = hashlib.sha256(b'words-v1')
  for part in made_by:
    if isinstance(part, np.ndarray):
      part = np.ascontiguousarray(part)
      h.update(f'{part.dtype}{part.shape}'.encode() + part.tobytes())
    else:
      h.update(repr(part).encode())
    h.update(b'\0')
  return pathlib.Path(cache_dir).absolute() / f'words-{h.hexdigest()[:32]}.npz'


# The fewest entries a run's word and dialogue tables hold room for from
# the start (``traced_face``'s filler asks for three per user turn of the
# run, and at least this): `main` (500 sessions x 23 methods) writes about
# 6,000 user turns and 2,000 dialogues.
MIN_ENTRIES = 8192


def _capacity(n: int, least: int = 64) -> int:
  """The power of two >= ``n`` (at least ``least``), as the phrase table
  rounds its rows, so a growing table recompiles rarely."""
  return max(least, 1 << (max(n, 1) - 1).bit_length())


def empty_arrays(num_attributes: int = generator.NUM_ATTRIBUTES):
  """A table of nothing (runs whose words need no tabulating)."""
  return (jnp.zeros((2,), jnp.int32), jnp.full((2,), -1, jnp.int32),
          jnp.zeros((2,), jnp.int32),
          jnp.full((1, num_attributes), -1, jnp.int32),
          jnp.zeros((1,), bool), jnp.zeros((1, 1), jnp.float32),
          jnp.full((1,), -1, jnp.int32))


SEPARATOR = ' [SEP] '  # protocol.dialogue.SEPARATOR (tested to agree)
_GOLDEN = np.uint32(0x9E3779B1)
_MIX = np.uint32(0x85EBCA77)


def _hash(parent, word, xp):
  """The slot hash of a ``(parent, word)`` pair (NumPy or jnp, uint32)."""
  h = xp.asarray(parent).astype(xp.uint32) * _GOLDEN
  h = h ^ (xp.asarray(word).astype(xp.uint32) * _MIX)
  return h ^ (h >> 15)


class DialogueTable:
  """Embeddings of the dialogue so far, per node (host-filled).

  Args:
    modification: ``[Q]`` modification texts (the roots' dialogue).
    words: the ``WordTable`` whose entries the utterances are.
    encode_text: the text encoder.
    dim: its embedding size.
    store: the file the table's nodes are kept in between runs (None:
      none): a later table starts from them (their embeddings encoded
      again in one call, found in the text cache) and gives each its id.
  """

  def __init__(self, modification, words: WordTable, encode_text, dim: int,
               store=None):
    self._roots = tuple(modification)
    self._words = words
    self._encode = encode_text
    self._dim = dim
    self._children = {}   # (parent, word) -> node id
    self._texts = {}      # node id (>= Q) -> tuple of utterances
    self._session = {}    # node id (>= Q) -> its root (the session)
    self._size = 0
    # Embeddings (node id - Q, [n, D]) not yet on the device; there, the
    # rows, the slots (parent, word, node) with their host mirror, and how
    # many nodes the slots hold.
    self._pending = []
    self._rows = None
    self._slots = None
    self._sent = 0
    self._order = []  # ((parent, word), node) in node order
    self._store = None if store is None else pathlib.Path(store)
    self._stored = 0
    if self._store is not None:
      self._load()

  def __len__(self):
    return self._size

  def _load(self):
    """The nodes an earlier run kept (parent, word key; in id order), each
    rebuilt from its parent's dialogue and the word table's words; a file
    that cannot be read, fails its digest or names words the word table
    lacks is a warning, and the table starts empty."""
    path = self._store
    if not path.is_file():
      return
    try:
      with np.load(path, allow_pickle=False) as f:
        parents, keys = np.asarray(f['parents']), np.asarray(f['words'])
        digest = str(f['digest'])
      if _node_digest(parents, keys) != digest:
        raise ValueError('its nodes do not match their digest')
      roots, children, texts, session = len(self._roots), {}, {}, {}
      for i, (parent, word) in enumerate(zip(parents.tolist(),
                                             keys.tolist())):
        node = roots + i
        if not 0 <= parent < node:
          raise ValueError(f'node {node} has parent {parent}')
        root = parent if parent < roots else session[parent]
        children[parent, word] = node
        session[node] = root
        texts[node] = ((self._roots[parent],) if parent < roots
                       else texts[parent]) + (self._words.words(root, word),)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('dialogue table %s unreadable (%s: %s); ignoring it '
                      '(the dialogues are joined and encoded again)', path,
                      type(e).__name__, e)
      return
    self._children, self._texts, self._session = children, texts, session
    self._order = list(children.items())
    if texts:
      vectors = np.asarray(self._encode([SEPARATOR.join(texts[n])
                                         for n in sorted(texts)]),
                           np.float32)
      self._pending.append((0, vectors))
      self._size = len(vectors)
    self._stored = self._size

  def save(self) -> int:
    """Keeps the table's nodes in its ``store`` for later runs (as
    ``WordTable.save``); returns how many were written (0: nothing new)."""
    if self._store is None or self._size == self._stored:
      return 0
    by_node = sorted(self._children.items(), key=lambda kv: kv[1])
    parents = np.asarray([p for (p, _), _ in by_node], np.int32)
    keys = np.asarray([w for (_, w), _ in by_node], np.int32)
    self._store.parent.mkdir(parents=True, exist_ok=True)
    tmp = checksums.writer_temp(self._store)
    try:
      with open(tmp, 'wb') as f:
        np.savez(f, parents=parents, words=keys,
                 digest=np.asarray(_node_digest(parents, keys)))
      tmp.replace(self._store)
    finally:
      tmp.unlink(missing_ok=True)
    self._stored = self._size
    return len(by_node)

  def texts(self, node: int) -> tuple[str, ...]:
    node = int(node)
    if node < len(self._roots):
      return (self._roots[node],)
    return self._texts[node]

  def add(self, pairs) -> int:
    """Encodes the dialogues ``(parent, word key)`` not yet held (each
    word key, with the parent's session, must be in the word table);
    returns how many were new."""
    new = sorted(e for e in {(int(p), int(w)) for p, w in pairs}
                 if e not in self._children)
    texts = []
    for parent, word in new:
      node = len(self._roots) + self._size + len(texts)
      session = (parent if parent < len(self._roots) else
                 self._session[parent])
      self._children[(parent, word)] = node
      self._order.append(((parent, word), node))
      self._session[node] = session
      self._texts[node] = self.texts(parent) + (
          self._words.words(session, word),)
      texts.append(SEPARATOR.join(self._texts[node]))
    if texts:
      vectors = np.asarray(self._encode(texts), np.float32)
      self._pending.append((self._size, vectors))
      self._size += len(vectors)
    return len(new)

  def arrays(self, least: int = 0):
    """``(parent [H], word [H], node [H] int32, rows [R, D] float32)``:
    an open-addressing hash table of ``H = 2 R`` slots (empty slots have
    word ``-1``) and the nodes' embeddings (node ``n``'s is row ``n - Q``),
    with room for at least ``least`` nodes (as ``WordTable.arrays``). A
    lookup finds the same node whatever order the pairs went in, so only
    the pairs and rows added since the last call are sent (the slots all
    again, and the rows copied on the device, when ``R`` doubles)."""
    capacity = _capacity(max(self._size, least))
    if self._rows is None:
      self._rows = device_rows.DeviceRows(
          'dialogue table', [((self._dim,), np.float32, 0.0)], capacity)
    if self._slots is None or capacity > self._rows.capacity:
      self._rows.grow(capacity)
      self._slots = _Slots('dialogue slots', 2 * capacity)
      self._sent = 0
    if self._sent < len(self._children):
      pairs = self._order[self._sent:]
      self._slots.put([p for p, _ in pairs], [n for _, n in pairs])
      self._sent = len(self._children)
    for start, vectors in self._pending:
      self._rows.write(np.arange(start, start + len(vectors)), [vectors])
    self._pending = []
    return self._slots.arrays() + self._rows.arrays()


def _node_digest(parents, keys) -> str:
  h = hashlib.sha256(b'dialogues-v1')
  for a in (parents, keys):
    a = np.ascontiguousarray(a, np.int32)
    h.update(f'{a.shape}'.encode() + a.tobytes())
  return h.hexdigest()


def empty_dialogues():
  return (jnp.zeros((2,), jnp.int32), jnp.full((2,), -1, jnp.int32),
          jnp.zeros((2,), jnp.int32), jnp.zeros((1, 1), jnp.float32))


def lookup_dialogue(tables, num_queries: int, parent, word):
  """``(found, node, embedding [D])`` of the child of ``parent`` by
  ``word`` (traced; ``tables`` from ``DialogueTable.arrays()``)."""
  parents, words, nodes, rows = tables
  mask = parents.shape[0] - 1
  start = (_hash(parent, word, jnp) & mask).astype(jnp.int32)

  def probing(i):
    return (words[i] != -1) & ~((words[i] == word) & (parents[i] == parent))

  i = jax.lax.while_loop(probing, lambda i: (i + 1) & mask, start)
  found = (words[i] == word) & (parents[i] == parent)
  node = jnp.where(found, nodes[i], parent)
  row = jnp.clip(node - num_queries, 0, rows.shape[0] - 1)
  return found, node, jnp.where(found, rows[row], 0.0)

