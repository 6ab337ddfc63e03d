"""JSON-schema-constrained greedy decoding with a key/value cache.

Each reasoning module's reply schema becomes a small grammar (``GRAMMARS``):
fixed literal text (keys, punctuation) is forced, string contents are free
but may not contain a quote, backslash, control character or a broken UTF-8
byte, categorical fields (``sigma``) are chosen among their allowed values,
lists close or continue. At every step a row's grammar says which tokens it
allows; the jitted step masks the logits and takes the argmax, so every
completed reply parses and follows its module's schema by construction.

Allowed tokens are given per row as a *content class* (0: none, 1: any
string-safe token, 2: a string-safe token with a non-space character, 3: any
token at all, for unconstrained decoding) plus
up to ``MAX_IDS`` explicit token ids (structural tokens: a prefix of the
literal text that may come next). Content masks live on the device, built
once from the vocabulary.

Generation runs the shared prompt prefix once (batch 1), copies its cache to
the batch, prefills the per-request suffixes (left-padded; positions stay
contiguous) and the reply's lead (a prompt the previous call prefilled is
not prefilled again), then decodes one token per step for every row; the
cache grows when full.
"""

import collections
import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.reasoning import schemas

MAX_IDS = 64
AVOID_KEY = ', "avoid":'  # what follows the keep list
CONTENT_NONE, CONTENT_ANY, CONTENT_NONSPACE, CONTENT_ALL = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class Step:
  """What one row allows next."""
  content: int = CONTENT_NONE
  ids: tuple[int, ...] = ()


def _unsafe(text: str) -> bool:
  """Whether ``text`` has a backslash, a broken UTF-8 byte or a control
  character (a quote is checked apart)."""
  return ('\\' in text or '\ufffd' in text or
          any(ord(c) < 32 or ord(c) == 127 for c in text))


class Vocabulary:
  """Token texts, the string-safe masks and a text -> ids index."""

  def __init__(self, tokenizer, vocab_size: int):
    self.tokenizer = tokenizer
    special = set(tokenizer.all_special_ids)
    texts = [tokenizer.decode([i], clean_up_tokenization_spaces=False)
             if i not in special else None for i in range(len(tokenizer))]
    texts += [None] * (vocab_size - len(texts))  # ids the tokenizer lacks
    self.texts = texts
    safe = np.zeros(vocab_size, bool)
    nonspace = np.zeros(vocab_size, bool)
    self.by_text = {}
    for i, t in enumerate(texts):
      if not t:
        continue
      self.by_text.setdefault(t, []).append(i)
      if '"' in t or _unsafe(t):
        continue
      safe[i] = True
      nonspace[i] = bool(t.strip())
    anything = np.ones(vocab_size, bool)
    anything[len(tokenizer):] = False
    self.masks = np.stack([np.zeros(vocab_size, bool), safe, nonspace,
                           anything])
    # Tokens that end a string's content and open what follows it (``?"``,
    # ``."}``): (id, content part, the rest from its first quote).
    self.bridges = []
    for i, t in enumerate(texts):
      if t and '"' in t[1:]:
        head, rest = t[:t.index('"')], t[t.index('"'):]
        if head and not _unsafe(head):
          self.bridges.append((i, head, rest))
    self._encoded = {}
    self._bridging = {}

  def encode(self, text: str) -> tuple[int, ...]:
    if text not in self._encoded:
      self._encoded[text] = tuple(self.tokenizer.encode(
          text, add_special_tokens=False))
    return self._encoded[text]

  def prefix_ids(self, literals) -> tuple[int, ...]:
    """Tokens whose text is a nonempty prefix of one of ``literals``."""
    out = set()
    for lit in literals:
      for n in range(1, len(lit) + 1):
        out.update(self.by_text.get(lit[:n], ()))
    if len(out) > MAX_IDS:
      raise ValueError(f'{len(out)} structural tokens > MAX_IDS={MAX_IDS}')
    return tuple(sorted(out))

  def bridge_ids(self, literals, nonspace: bool = False) -> tuple[int, ...]:
    """Tokens made of string content (with a non-space character when
    ``nonspace``) and then a nonempty prefix of one of ``literals``."""
    key = (tuple(literals), nonspace)
    if key not in self._bridging:
      self._bridging[key] = tuple(
          i for i, head, rest in self.bridges
          if (head.strip() or not nonspace) and
          any(lit.startswith(rest) for lit in key[0]))
    return self._bridging[key]


def _choose(vocab: Vocabulary, alts, content=CONTENT_NONE, max_content=0,
            first_content=None):
  """Generator: free content tokens until one of ``alts`` (literal, tag) is
  chosen; returns ``(content_text, tag)``.

  Literal text is never forced token by token: every token whose text is a
  prefix of what may come next is allowed, so the model keeps the
  tokenization it was trained on (its tokenizer merges ``' ["'``, ``'"],'``
  and the like across the grammar's pieces)."""
  parts = []
  literals = [lit for lit, _ in alts]
  while True:
    n = len(parts)
    c = (first_content if (n == 0 and first_content is not None) else
         content) if n < max_content else CONTENT_NONE
    ids = vocab.prefix_ids(literals)
    if c == CONTENT_NONSPACE and n == 0:
      ids = ()  # a string that must not be empty cannot close yet
    if c != CONTENT_NONE:  # content and the closing in one token
      ids += vocab.bridge_ids(literals, nonspace=c == CONTENT_NONSPACE)
      if len(ids) > MAX_IDS:
        raise ValueError(f'{len(ids)} structural tokens > MAX_IDS={MAX_IDS}')
    token = yield Step(c, ids)
    text = vocab.texts[token] or ''
    matching = [(lit[len(text):], tag) for lit, tag in alts
                if text and lit.startswith(text)]
    if not matching and c != CONTENT_NONE and '"' in text:
      head, closing = text[:text.index('"')], text[text.index('"'):]
      matching = [(lit[len(closing):], tag) for lit, tag in alts
                  if lit.startswith(closing)]
      if matching:
        parts.append(head)
    if not matching:
      parts.append(text)
      continue
    while True:
      done = [tag for rest, tag in matching if not rest]
      if done:
        return ''.join(parts), done[0]
      token = yield Step(CONTENT_NONE,
                         vocab.prefix_ids(rest for rest, _ in matching))
      text = vocab.texts[token] or ''
      matching = [(rest[len(text):], tag) for rest, tag in matching
                  if text and rest.startswith(text)]


def _string(vocab, closers, max_tokens, nonempty=False):
  return (yield from _choose(vocab, closers, CONTENT_ANY, max_tokens,
                             CONTENT_NONSPACE if nonempty else None))


# The pieces of a reply end where the tokenizer splits (after a key's colon,
# before a value's space), and a list's opening bracket belongs to its first
# item or to its closing: ``"keep":`` then `` ["shape:`` `` square``
# ``", "size:`` `` small`` ``"], "avoid":`` or `` [], "avoid":``.
def _list(vocab, after: str, max_items: int, max_tokens: int):
  """Generator for a JSON string list after its key's colon, then
  ``after``."""
  _, tag = yield from _choose(vocab, [(' ["', 'item'), (' []' + after, 'end')])
  count = 0
  while tag == 'item':
    count += 1
    closers = [('"]' + after, 'end')]
    if count < max_items:
      closers.insert(0, ('", "', 'item'))
    _, tag = yield from _string(vocab, closers, max_tokens, nonempty=True)


def _literal_list(vocab, after: str, literals: dict, max_items: int,
                  taken=frozenset(), one_per_attribute: bool = False):
  """Generator for a JSON list after its key's colon, then ``after``, whose
  items are ``'attribute: value'`` literals of ``literals`` (attribute ->
  values): each chosen as an attribute, then one of its values, never a
  pair in ``taken``, never twice, and with ``one_per_attribute`` at most one
  value per attribute. Returns the chosen ``(attribute, value)`` pairs."""
  chosen = []

  def open_attributes():
    used = {a for a, _ in chosen}
    return [a for a, values in literals.items()
            if not (one_per_attribute and a in used) and any(
                (a, v) not in taken and (a, v) not in chosen for v in values)]

  opener, closer = ' ["', ' []' + after
  while True:
    attrs = open_attributes() if len(chosen) < max_items else []
    _, attribute = yield from _choose(
        vocab, [(f'{opener}{a}:', a) for a in attrs] + [(closer, None)])
    if attribute is None:
      return chosen
    values = [v for v in literals[attribute]
              if (attribute, v) not in taken and (attribute, v) not in chosen]
    _, value = yield from _choose(vocab, [(f' {v}', v) for v in values])
    chosen.append((attribute, value))
    opener, closer = '", "', '"]' + after


@dataclasses.dataclass(frozen=True)
class Limits:
  string_tokens: int = 40      # per free string field
  item_tokens: int = 12        # per list item
  list_items: int = 8          # per list


def grammar(module: str, vocab: Vocabulary, limits: Limits = Limits(),
            literals: dict | None = None):
  """``(lead, generator)``: the reply's forced opening text (appended to the
  prompt) and a generator that yields ``Step``s and receives tokens.

  ``literals`` (``reflect`` only; attribute -> its values): the keep and
  avoid items are ``'attribute: value'`` literals of that closed set, at
  most one kept value per attribute, no item twice, keep and avoid
  disjoint (the embedded world; on free text ``None``)."""
  if module in ('intent', 't2v_init'):
    def gen():
      if module == 'intent':
        _, tag = yield from _string(
            vocab, [('", "edit": "', 'edit'), ('", "edit": ""}', 'end')],
            limits.string_tokens)
        if tag == 'end':  # an empty edit (the tokenizer's `` ""``)
          return
      yield from _string(vocab, [('"}', 'end')], limits.string_tokens)
    return '{"search": "', gen()
  if module == 'question':
    def gen():
      yield from _string(vocab, [('"}', 'end')], limits.string_tokens,
                         nonempty=True)
    return '{"question": "', gen()
  if module == 'reflect':
    def gen():
      yield from _choose(vocab, [(f'{s}", "keep":', s)
                                 for s in schemas.SIGMAS])
      if literals is None:
        yield from _list(vocab, AVOID_KEY, limits.list_items,
                         limits.item_tokens)
        yield from _list(vocab, '}', limits.list_items, limits.item_tokens)
        return
      keep = yield from _literal_list(vocab, AVOID_KEY, literals,
                                      limits.list_items,
                                      one_per_attribute=True)
      yield from _literal_list(vocab, '}', literals, limits.list_items,
                               taken=frozenset(keep))
    return '{"sigma": "', gen()
  raise ValueError(f'unknown reasoning module {module!r}')


def free(vocab: Vocabulary, eos_id: int, max_tokens: int):
  """Unconstrained decoding: any token until ``eos_id`` or the budget."""
  for _ in range(max_tokens):
    token = yield Step(CONTENT_ALL, ())
    if token == eos_id:
      return


def max_steps(module: str, limits: Limits = Limits(),
              literals: dict | None = None) -> int:
  """An upper bound on the decoding steps of ``module``'s grammar (with
  ``literals`` as given to ``grammar``): free content at most its token
  budget, every literal character at most one token."""
  search = limits.string_tokens + len('"}')
  if module == 'intent':
    return limits.string_tokens + len('", "edit": "') + search
  if module in ('t2v_init', 'question'):
    return search
  if module != 'reflect':
    raise ValueError(f'unknown reasoning module {module!r}')
  sigma = max(len(f'{s}", "keep":') for s in schemas.SIGMAS)
  sep = len('", "')   # >= len(' ["'), the first item's opener

  def bound(after, items):  # one list after its key's colon
    close = max(len(' []'), len('"]')) + len(after)
    return close + sum(items)

  if literals is None:
    item = limits.item_tokens + sep
    return (sigma + bound(AVOID_KEY, [item] * limits.list_items) +
            bound('}', [item] * limits.list_items))
  cost = {(a, v): sep + len(f'{a}: {v}') for a, values in literals.items()
          for v in values}
  per_attribute = sorted((max(c for (a, _), c in cost.items() if a == name)
                          for name in literals), reverse=True)
  longest = sorted(cost.values(), reverse=True)
  return (sigma + bound(AVOID_KEY, per_attribute[:limits.list_items]) +
          bound('}', longest[:limits.list_items]))


CACHE_ROUND = 128  # cache lengths are multiples of this (one compile each)
PREFIX_ROUND = 16  # a shared prompt start is cut to a multiple of this
PREFIX_CACHES = 16  # prefix caches kept (least recently used dropped)


def cache_length(filled: int) -> int:
  """The cache length that holds ``filled`` positions."""
  return -(-filled // CACHE_ROUND) * CACHE_ROUND


class Decoder:
  """Batched constrained greedy decoding through a causal LM with a cache.

  ``apply_fn(params, ids, mask, positions, cache) -> (hidden, cache)``
  runs the model on new tokens; ``head_fn(params, hidden) -> logits``;
  ``init_cache_fn(batch, length)``; ``grow_fn(cache, length)``: the cache
  with room for ``length`` positions. A batch starts with a cache that
  holds its prompts and grows by ``CACHE_ROUND`` positions when full, so
  attention runs over little more than the filled part.
  """

  def __init__(self, apply_fn, head_fn, init_cache_fn, vocab: Vocabulary,
               grow_fn):
    self.vocab = vocab
    self.init_cache = init_cache_fn
    masks = jnp.asarray(vocab.masks)

    def last_logits(params, hidden):
      return head_fn(params, hidden[:, -1])

    @functools.partial(jax.jit, donate_argnums=4)
    def prefill(params, ids, mask, positions, cache):
      hidden, cache = apply_fn(params, ids, mask, positions, cache)
      return last_logits(params, hidden), cache

    @functools.partial(jax.jit, donate_argnums=6)
    def step(params, logits, content, ids, positions, mask, cache):
      vocab_size = logits.shape[-1]
      rows = jnp.arange(ids.shape[0])[:, None]
      allowed = masks[content].at[rows, jnp.where(ids < 0, vocab_size, ids)
                                  ].set(True, mode='drop')   # [B, V]
      token = jnp.argmax(jnp.where(allowed, logits, -jnp.inf), axis=-1)
      hidden, cache = apply_fn(params, token[:, None], mask, positions[:, None],
                               cache)
      return token, last_logits(params, hidden), cache

    @functools.partial(jax.jit, static_argnums=1)
    def tile(cache, batch):
      return jax.tree.map(
          lambda x: jnp.broadcast_to(x, (batch,) + x.shape[1:])
          if x.ndim > 1 else x, cache)

    @jax.jit
    def take(cache, logits, rows):
      """The cache and logits of batch rows ``rows`` (a smaller batch)."""
      return (jax.tree.map(lambda x: x[rows] if x.ndim > 1 else x, cache),
              logits[rows])

    self._prefill, self._step, self._tile = prefill, step, tile
    self._take = take
    self._grow = jax.jit(grow_fn, static_argnums=1)
    self._copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))
    self._prompts, self._prompts_next = {}, {}
    self._prefix = collections.OrderedDict()

  def _room(self, cache, mask, filled):
    """The cache and mask grown to hold ``filled`` positions (new mask
    columns 1: generated positions)."""
    longer = cache_length(filled)
    return (self._grow(cache, longer),
            np.pad(mask, ((0, 0), (0, longer - mask.shape[1])),
                   constant_values=1))

  def prefix_cache(self, params, key, prefix_ids, length):
    """The cache after the shared prefix (batch 1), computed once per key
    (the ``PREFIX_CACHES`` most recently used are kept)."""
    if key in self._prefix:
      self._prefix.move_to_end(key)
    else:
      cache = self.init_cache(1, length)
      if prefix_ids:
        ids = np.asarray([prefix_ids], np.int32)
        mask = np.zeros((1, length), np.int32)
        mask[0, :len(prefix_ids)] = 1
        pos = np.arange(len(prefix_ids), dtype=np.int32)[None]
        _, cache = self._prefill(params, ids, mask, pos, cache)
      self._prefix[key] = cache
      while len(self._prefix) > PREFIX_CACHES:
        self._prefix.popitem(last=False)
    return self._prefix[key]

  def generate(self, params, key, prefix_ids, suffixes, grammars,
               batch_size: int, steps: int, bucket: int = 16, lead=()):
    """Replies (texts after each grammar's lead) for token-id ``suffixes``.

    Every row runs ``grammars[i]`` (a started-fresh generator). Requests go
    in chunks of ``batch_size``; a chunk runs at the smallest of
    ``BATCH_BUCKETS`` (capped at ``batch_size``) that holds it, and once
    half of its rows have finished the live ones are gathered into the
    next smaller bucket (no work for finished rows; every row's tokens are
    what it would decode alone). Returns the generated texts and the number
    of tokens decoded (real rows only).

    The tokens every suffix starts with (cut to a multiple of
    ``PREFIX_ROUND``, each suffix keeping one) join the prefix: they run
    once at batch 1, and their cache is kept for the next call.

    ``lead``: token ids that follow every suffix (a reply's forced
    opening). The cache after the prompts is then kept until the next call,
    which skips their prefill when its prompts are the same (ReCoVR's
    Intent Decomposer and State Reflector read the same prompt and differ
    in the lead).
    """
    shared = _common_start(suffixes)
    shared -= shared % PREFIX_ROUND
    if shared:
      prefix_ids = list(prefix_ids) + list(suffixes[0][:shared])
      key = (key, tuple(suffixes[0][:shared]))
      suffixes = [s[shared:] for s in suffixes]
    texts, decoded = [], 0
    for start in range(0, len(suffixes), batch_size):
      chunk = suffixes[start:start + batch_size]
      gens = grammars[start:start + batch_size]
      out, n = self._generate_batch(params, key, prefix_ids, chunk, gens,
                                    batch_size, steps, bucket, tuple(lead))
      texts.extend(out)
      decoded += n
    self._prompts, self._prompts_next = self._prompts_next, {}
    return texts, decoded

  def _generate_batch(self, params, key, prefix_ids, suffixes, gens,
                      batch_size, steps, bucket, lead):
    n = len(suffixes)
    size = batch_bucket(n, batch_size)
    p = len(prefix_ids)
    width = -(-max(len(s) for s in suffixes) // bucket) * bucket
    length = cache_length(p + width + 1)  # grows while decoding
    lengths = np.ones(size, np.int32)
    lengths[:n] = [len(s) for s in suffixes]
    ident = (tuple(prefix_ids), length, size,
             tuple(tuple(s) for s in suffixes))
    if ident in self._prompts:  # the previous call's prompts: reuse
      cache, logits, mask = self._prompts[ident]
      self._prompts_next[ident] = (cache, logits, mask)
      cache, logits = self._copy((cache, logits))
      mask = mask.copy()
    else:
      cache = self._tile(self.prefix_cache(params, (key, length), prefix_ids,
                                           length), size)
      ids = np.zeros((size, width), np.int32)
      mask = np.zeros((size, length), np.int32)
      mask[:, :p] = 1
      for i, s in enumerate(suffixes):
        ids[i, width - len(s):] = s
        mask[i, p + width - len(s):p + width] = 1
      mask[n:, p + width - 1] = 1  # padding rows: one real token
      pos = np.maximum(np.cumsum(mask[:, p:p + width], axis=1) - 1, 0) + p
      logits, cache = self._prefill(params, ids, mask, pos.astype(np.int32),
                                    cache)
      if lead:  # kept for a next call with the same prompts
        self._prompts_next[ident] = (self._copy((cache, logits)) +
                                     (mask.copy(),))
    if lead:  # the reply's forced opening, the same for every row
      k = len(lead)
      if p + width + k > mask.shape[1]:
        cache, mask = self._room(cache, mask, p + width + k)
      mask[:, p + width:p + width + k] = 1
      positions = (p + lengths)[:, None] + np.arange(k)[None]
      logits, cache = self._prefill(
          params, np.tile(np.asarray(lead, np.int32), (size, 1)), mask,
          positions.astype(np.int32), cache)
      width += k
      lengths = lengths + k
    mask[:, p + width:] = 1  # generated positions (the cache index limits)
    current = [next(g) for g in gens]
    rows = list(range(n)) + [-1] * (size - n)   # batch row -> request
    out = [[] for _ in range(n)]
    decoded = 0
    for t in range(steps + 1):
      live = [j for j, i in enumerate(rows)
              if i >= 0 and current[i] is not None]
      if not live:
        break
      if t == steps:
        raise RuntimeError(f'constrained decoding did not finish in {steps} '
                           'steps; the grammar bound is wrong')
      smaller = batch_bucket(len(live), batch_size)
      if smaller < len(rows):  # gather the live rows into a smaller batch
        take = live + [live[-1]] * (smaller - len(live))
        cache, logits = self._take(cache, logits, np.asarray(take, np.int32))
        mask, lengths = mask[take], lengths[take]
        rows = [rows[j] for j in live] + [-1] * (smaller - len(live))
        live = list(range(len(live)))
      content = np.zeros(len(rows), np.int32)
      allowed = np.full((len(rows), MAX_IDS), -1, np.int32)
      for j in live:
        step = current[rows[j]]
        content[j] = step.content
        allowed[j, :len(step.ids)] = step.ids
      positions = (p + lengths + t).astype(np.int32)
      if p + width + t + 1 > mask.shape[1]:  # full: room for more steps
        cache, mask = self._room(cache, mask, p + width + t + 1)
      token, logits, cache = self._step(params, logits, content, allowed,
                                        positions, mask, cache)
      token = np.asarray(token)
      for j in live:
        i = rows[j]
        out[i].append(int(token[j]))
        decoded += 1
        try:
          current[i] = gens[i].send(int(token[j]))
        except StopIteration:
          current[i] = None
    texts = [''.join(self.vocab.texts[k] or '' for k in row) for row in out]
    return texts, decoded


def _common_start(rows) -> int:
  """How many leading tokens all ``rows`` share, leaving each at least
  one."""
  if not rows:
    return 0
  return max(min(len(os.path.commonprefix(rows)),
                 min(len(r) for r in rows) - 1), 0)


BATCH_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def batch_bucket(rows: int, batch_size: int) -> int:
  """The batch a chunk of ``rows`` live rows runs at: the smallest bucket
  that holds them, at most ``batch_size``."""
  return min([b for b in BATCH_BUCKETS if b >= rows] + [batch_size])
