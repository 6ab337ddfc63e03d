"""Fully jitted sessions: the embedded world, the ``rules`` reasoner and the
template user as tensor operations.

A whole session (user decision, Intent Decomposer, State Reflector, text
encoding, composition, retrieval, rank-cap and fusion) is one ``lax.scan``
over turns, and a batch is that scan under ``vmap`` over sessions, compiled
once per shape:

* the user is ``simulator.decide`` (``jax.random`` draws keyed by seed,
  session and turn), so it names attributes instead of writing words;
* the rules reasoner works on attribute vectors (``-1`` = not mentioned):
  what the host reasoner parses out of the user's text is exactly the named
  attributes' target values (tests check this on the lexicon), and its
  outputs are canonical texts of partial assignments;
* text encoding is a lookup: a canonical text is a function of its partial
  assignment, so each one has a code (mixed radix over ``value + 1``) and the
  ``PhraseTable`` holds the text encoder's embedding of every code seen.

The table fills itself: a run that needs a code the table lacks reports it,
the host encodes the missing texts and the batch runs again (at most
``T + 1`` passes; a pass fixes at least one more turn of every session).
With ``UserConfig(draws='jax')`` the host loop (``loop.run_batch``) shows the
same lists, turn by turn (tested); the README compares both with the default
NumPy-drawn user.

Supported: the ReCoVR family (``loop.METHODS`` with family ``recovr``),
noise-free users, no questions. Everything else runs in the host loop.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from recovr_jax import demotion
from recovr_jax import encoders
from recovr_jax import lexicon
from recovr_jax import loop
from recovr_jax import reasoning
from recovr_jax import session as session_lib
from recovr_jax import sharding
from recovr_jax import simulator
from recovr_jax import world as world_lib

_RADIX = tuple(n + 1 for n in world_lib.NUM_VALUES)
NUM_CODES = int(np.prod(_RADIX))        # partial assignments, incl. empty
_STRIDES = tuple(int(np.prod(_RADIX[a + 1:])) for a in range(len(_RADIX)))
COMPOSERS = ('mlp', 'sum')
DEFAULT_CHUNK_SIZE = 64  # sessions per vmapped chunk of a compacted turn


def code(attrs) -> jax.Array:
  """``[..., A]`` partial assignments (-1 = absent) -> ``[...]`` int32 codes;
  0 is the empty assignment."""
  attrs = jnp.asarray(attrs, jnp.int32)
  return jnp.sum((attrs + 1) * jnp.asarray(_STRIDES, jnp.int32), axis=-1)


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
  with ``encode_text``. Row 0 is the empty text (its channel is invalid)."""

  def __init__(self, encode_text, dim: int):
    self._encode = encode_text
    self._dim = dim
    self._row = {0: 0, NUM_CODES: 0}
    self._rows = [np.zeros((1, dim), np.float32)]
    self._cache = None

  def __len__(self):
    return sum(len(r) for r in self._rows)

  def missing(self, codes) -> list[int]:
    return sorted({int(c) for c in codes} - set(self._row))

  def add(self, codes) -> int:
    """Encodes the codes not in the table; returns how many were added."""
    new = self.missing(codes)
    if new:
      emb = np.asarray(self._encode([phrase_text(c) for c in new]),
                       np.float32)
      start = len(self)
      self._row.update({c: start + i for i, c in enumerate(new)})
      self._rows.append(emb)
      self._cache = None
    return len(new)

  def arrays(self):
    """``(index [2 * NUM_CODES] int32, rows [R, D] float32)``; ``index`` is
    -1 for codes not in the table. ``R`` is rounded up to a power of two so
    that a growing table recompiles rarely."""
    if self._cache is None:
      index = np.full(2 * NUM_CODES, -1, np.int32)
      index[list(self._row)] = list(self._row.values())
      rows = np.concatenate(self._rows)
      capacity = max(1024, 1 << (len(rows) - 1).bit_length())
      rows = np.pad(rows, ((0, capacity - len(rows)), (0, 0)))
      self._cache = (jnp.asarray(index), jnp.asarray(rows))
    return self._cache


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimArrays:
  """The world as tensors (Progress Memory, long-term part)."""
  gallery: jax.Array        # [N, D] float32 video embeddings
  attributes: jax.Array     # [N, A] int32 true attributes (the user's view)
  caption_attrs: jax.Array  # [N, A] int32 parsed captions (the reasoner's)
  reference: jax.Array      # [Q] int32 gallery ids
  target: jax.Array         # [Q] int32 gallery ids
  init_search: jax.Array    # [Q, A] int32 T2V initializer's assignment
  modification: jax.Array   # [Q, D] float32 encoded modification texts


@dataclasses.dataclass(frozen=True)
class SimConfig:
  """Static settings of a jitted run (hashable)."""
  loop: session_lib.LoopConfig
  user: simulator.UserConfig
  t2v: bool = True
  covr: bool = True
  reflection: bool = True
  dynamic_anchor: bool = True
  composer: str = 'mlp'     # one of COMPOSERS


@dataclasses.dataclass(frozen=True)
class SimEnvironment:
  """What a jitted run reads: arrays, the composer and the phrase table."""
  arrays: SimArrays
  composer: str
  composer_params: object
  table: PhraseTable
  captions: tuple[str, ...]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimTrace:
  """A batch's run; per-turn fields are for turns 1..T, and stopped
  sessions' turns hold action stop, no mentions, sigma neu and code 0."""
  displayed: jax.Array   # [S, T+1, K] int32 shown lists
  top_scores: jax.Array  # [S, T+1] float32
  active: jax.Array      # [S, T] bool, the user had not stopped
  action: jax.Array      # [S, T] int32 index into simulator.ACTIONS
  mentioned: jax.Array   # [S, T, A] int32 named values, -1 not named
  sigma: jax.Array       # [S, T] int32
  search: jax.Array      # [S, T] int32 the Intent Decomposer's search code
  edit: jax.Array        # [S, T] int32 its edit code (0: empty)
  needed: jax.Array      # [S, T+1, 2] int32 table codes used (0: none)


def check_supported(method: loop.Method, user: simulator.UserConfig,
                    ask_mode: str = 'never'):
  """Raises ``ValueError`` naming what the jitted mode cannot run."""
  if method.family != 'recovr' or method.asks:
    raise ValueError(
        f'method {method.name!r} runs only in the host loop (the jitted mode '
        'covers the ReCoVR family)')
  if user.noise_rate:
    raise ValueError('noise_rate must be 0 in the jitted mode (noisy text '
                     f'needs the host parser), got {user.noise_rate}')
  if ask_mode != 'never':
    raise ValueError(f'ask_mode must be never in the jitted mode, got '
                     f'{ask_mode!r}')


def prepare(env: loop.Environment) -> SimEnvironment:
  """The tensors of a world environment (checked, before any run)."""
  if env.attributes is None:
    raise ValueError('the jitted mode needs attribute labels (the embedded '
                     'world); this environment has none')
  if env.composer not in COMPOSERS:
    raise ValueError(f'the jitted mode needs a pure composer ({COMPOSERS}); '
                     f'the environment has {env.composer!r}')
  num_attrs = world_lib.NUM_ATTRIBUTES

  def assignment(parsed):
    row = np.full(num_attrs, -1, np.int32)
    for a, v in parsed.items():
      row[a] = v
    return row

  caption_attrs = np.stack([assignment(lexicon.parse(c))
                            for c in env.captions])
  init = reasoning.RulesReasoner().t2v_init([
      reasoning.T2VInitRequest(env.captions[r], m)
      for r, m in zip(env.reference, env.modification)])
  init_search = []
  for q, out in enumerate(init):
    parsed = lexicon.parse(out['search'])
    if out['search'] != lexicon.canonical_description(parsed):
      raise ValueError(f'query {q}: the T2V initializer wrote '
                       f'{out["search"]!r}, which is not a canonical '
                       'description; the jitted mode cannot represent it')
    init_search.append(assignment(parsed))
  modification = np.asarray(env.encode_text(list(env.modification)),
                            np.float32)
  arrays = SimArrays(
      gallery=jnp.asarray(env.gallery, jnp.float32),
      attributes=jnp.asarray(env.attributes, jnp.int32),
      caption_attrs=jnp.asarray(caption_attrs),
      reference=jnp.asarray(env.reference, jnp.int32),
      target=jnp.asarray(env.target, jnp.int32),
      init_search=jnp.asarray(np.stack(init_search)),
      modification=jnp.asarray(modification))
  return SimEnvironment(arrays=arrays, composer=env.composer,
                        composer_params=env.composer_params,
                        table=PhraseTable(env.encode_text,
                                          env.gallery.shape[1]),
                        captions=tuple(env.captions))


def compose(kind: str, params, reference, edit):
  """The composer ``kind`` as a pure function (``[..., D]`` inputs)."""
  if kind == 'sum':
    return encoders.sum_composer(reference, edit)
  hidden = params['params']['Dense_0']['kernel'].shape[1]
  return encoders.Composer(hidden=hidden).apply(params, reference, edit)


def _lookup(index, rows, c):
  # A code not yet in the table reads row 0; ``run`` then adds it and runs
  # the batch again, so no such lookup survives into a returned trace.
  return rows[jnp.maximum(index[c], 0)]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SessionCarry:
  """One session's state between turns."""
  state: session_lib.SessionState
  search: jax.Array  # [A] int32 running query (Progress Memory, short-term)
  keep: jax.Array    # [A] int32 accumulated keep constraints


@dataclasses.dataclass(frozen=True)
class _Shared:
  """What every session of a batch reads (unbatched under vmap)."""
  arrays: SimArrays
  index: jax.Array
  rows: jax.Array
  composer_params: object
  seed_key: jax.Array


def _session_start(config: SimConfig, shared: _Shared, query):
  """Turn 0 of one session: ``(carry, search code used)``."""
  lc, arrays = config.loop, shared.arrays
  ref = arrays.reference[query]
  none = jnp.full((world_lib.NUM_ATTRIBUTES,), -1, jnp.int32)
  search = arrays.init_search[query] if config.t2v else none
  search_code = code(search) * config.t2v
  covr = compose(config.composer, shared.composer_params,
                 arrays.gallery[ref], arrays.modification[query])
  inputs = session_lib.TurnInputs(
      queries=jnp.stack([_lookup(shared.index, shared.rows, search_code),
                         covr]),
      valid=jnp.stack([search_code > 0, jnp.asarray(config.covr)]),
      exclude=ref, sigma=jnp.asarray(demotion.SIGMA_NEU),
      stop=jnp.asarray(False))
  state = session_lib.start_step(lc, arrays.gallery,
                                 session_lib.init_state(lc), inputs)
  return SessionCarry(state=state, search=search, keep=none), search_code


def _turn_outputs(carry, active, action, mentions, sigma, search, edit,
                  use_search, use_edit):
  state = carry.state
  return dict(shown=state.shown_ids, top=state.shown_scores[0],
              active=active, action=action, mentioned=mentions, sigma=sigma,
              search=search, edit=edit, use_search=use_search,
              use_edit=use_edit)


def _session_turn(config: SimConfig, shared: _Shared, query,
                  carry: SessionCarry, turn):
  """Feedback turn ``turn`` of one session: ``(carry, outputs)``."""
  lc, arrays = config.loop, shared.arrays
  gallery = arrays.gallery
  ref, tgt = arrays.reference[query], arrays.target[query]
  target_attrs = arrays.attributes[tgt]
  state, search, keep = carry.state, carry.search, carry.keep
  top1 = jnp.maximum(state.shown_ids[0], 0)
  stop = state.stopped | (state.shown_ids[0] == tgt)
  action, named, prefix = simulator.decide(
      simulator.decision_key(shared.seed_key, query, turn), target_attrs,
      arrays.attributes[top1], config.user)
  mentions = jnp.where(named, target_attrs, -1)
  shown = arrays.caption_attrs[top1]
  # Intent Decomposer: running query < kept constraints < this feedback.
  wanted = jnp.where(mentions >= 0, mentions,
                     jnp.where(keep >= 0, keep, search))
  changes = jnp.where((mentions >= 0) & (mentions != shown), mentions, -1)
  search_code = code(wanted)
  edit_code = code(changes)
  use_search = search_code * config.t2v  # 0: the channel is unused
  use_edit = edit_code * config.covr
  # State Reflector.
  num_changes = jnp.sum(changes >= 0)
  negative = (jnp.sum(mentions >= 0) == 0) | (
      (action == simulator.REWRITE) &
      jnp.asarray(simulator.NEGATIVE_REWRITE_PREFIX)[prefix])
  sigma = jnp.where(negative | (num_changes >= 3), demotion.SIGMA_NEG,
                    jnp.where(num_changes <= 1, demotion.SIGMA_POS,
                              demotion.SIGMA_NEU)).astype(jnp.int32)
  if not config.reflection:
    sigma = jnp.asarray(demotion.SIGMA_NEU, jnp.int32)
  anchor = top1 if config.dynamic_anchor else ref
  covr_query = compose(config.composer, shared.composer_params,
                       gallery[anchor],
                       _lookup(shared.index, shared.rows,
                               use_edit + NUM_CODES))
  inputs = session_lib.TurnInputs(
      queries=jnp.stack([_lookup(shared.index, shared.rows, use_search),
                         covr_query]),
      valid=jnp.stack([use_search > 0, use_edit > 0]),
      exclude=ref, sigma=sigma, stop=stop)
  state = session_lib.turn_step(lc, gallery, state, inputs)
  # Progress Memory, short-term part, as reasoning.update_memory writes it.
  new_search = jnp.where(jnp.any(wanted >= 0), wanted, search)
  new_keep = jnp.where(mentions >= 0, mentions, keep) if (
      config.reflection) else jnp.full_like(keep, -1)
  carry = SessionCarry(state=state, search=jnp.where(stop, search, new_search),
                       keep=jnp.where(stop, keep, new_keep))
  active = ~stop
  zero = jnp.zeros((), jnp.int32)
  return carry, _turn_outputs(
      carry, active, jnp.where(active, action, simulator.STOP),
      jnp.where(active, mentions, -1),
      jnp.where(active, sigma, demotion.SIGMA_NEU),
      *(jnp.where(active, c, zero) for c in (search_code, edit_code,
                                             use_search, use_edit)))


def _stopped_turn(carry: SessionCarry):
  """``_session_turn`` of a session that has stopped, without the work."""
  carry = dataclasses.replace(carry,
                              state=session_lib.carry_forward(carry.state))
  zero = jnp.zeros((), jnp.int32)
  return carry, _turn_outputs(
      carry, jnp.asarray(False), zero + simulator.STOP,
      jnp.full_like(carry.keep, -1), zero + demotion.SIGMA_NEU,
      zero, zero, zero, zero)


def _plain_turns(config, shared, queries, carry):
  """Every session runs every turn: ``lax.scan`` inside ``vmap``."""
  def one(query, carry):
    step = lambda c, t: _session_turn(config, shared, query, c, t)
    return jax.lax.scan(step, carry, jnp.arange(1, config.loop.num_turns + 1))
  return jax.vmap(one)(queries, carry)


def _compact_turns(config, shared, queries, carry, chunk_size):
  """``lax.scan`` over turns; each turn sorts the sessions still searching
  to the front and runs ``vmap``-ed chunks of ``chunk_size`` of them, skipping
  (``lax.cond``) chunks with none. Stopped sessions only carry forward, so
  the work follows the sessions that are still searching."""
  s = queries.shape[0]
  num_chunks = -(-s // chunk_size)
  pad = num_chunks * chunk_size - s
  targets = shared.arrays.target[queries]
  batched_turn = jax.vmap(functools.partial(_session_turn, config, shared),
                          in_axes=(0, 0, None))
  batched_stop = jax.vmap(_stopped_turn)

  def turn_fn(carry, turn):
    active = ~(carry.state.stopped | (carry.state.shown_ids[:, 0] == targets))
    order = jnp.argsort(~active, stable=True)  # searching sessions first
    order = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)])
    chunked = lambda x: x[order].reshape((num_chunks, chunk_size) +
                                         x.shape[1:])
    xs = (jnp.arange(num_chunks) * chunk_size < jnp.sum(active),
          chunked(queries), jax.tree.map(chunked, carry))

    def chunk_fn(_, x):
      busy, q, c = x
      return None, jax.lax.cond(busy, lambda: batched_turn(q, c, turn),
                                lambda: batched_stop(c))

    _, out = jax.lax.scan(chunk_fn, None, xs)
    # Row r of the chunked result is session order[r]; back to session order.
    inverse = jnp.zeros((s,), order.dtype).at[order[:s]].set(
        jnp.arange(s, dtype=order.dtype))
    return jax.tree.map(lambda y: y.reshape((-1,) + y.shape[2:])[inverse],
                        out)

  carry, outs = jax.lax.scan(turn_fn, carry,
                             jnp.arange(1, config.loop.num_turns + 1))
  # [T, S, ...] -> [S, T, ...] as the plain path returns them.
  return carry, jax.tree.map(lambda y: jnp.swapaxes(y, 0, 1), outs)


def simulate_batch(config: SimConfig, arrays: SimArrays, index, rows,
                   composer_params, queries, seed_key,
                   chunk_size: int | None = None) -> SimTrace:
  """A batch of sessions, one per entry of ``queries`` ``[S]``.

  ``chunk_size=None``: ``lax.scan`` over turns inside ``vmap`` over sessions
  (every session computes every turn). An int: the compacted schedule of
  ``_compact_turns`` (same results; work only for sessions still searching).
  """
  shared = _Shared(arrays, index, rows, composer_params, seed_key)
  # World, table and composer shared; one query per session.
  carry, search0 = jax.vmap(functools.partial(_session_start, config,
                                              shared))(queries)
  shown0, top0 = carry.state.shown_ids, carry.state.shown_scores[:, 0]
  if chunk_size is None:
    carry, outs = _plain_turns(config, shared, queries, carry)
  else:
    carry, outs = _compact_turns(config, shared, queries, carry, chunk_size)
  edit_needed = outs['use_edit'] + jnp.where(outs['use_edit'] > 0,
                                             NUM_CODES, 0)
  needed = jnp.concatenate([
      jnp.stack([search0, jnp.zeros_like(search0)], axis=1)[:, None],
      jnp.stack([outs['use_search'], edit_needed], axis=2)], axis=1)
  return SimTrace(
      displayed=jnp.concatenate([shown0[:, None], outs['shown']], axis=1),
      top_scores=jnp.concatenate([top0[:, None], outs['top']], axis=1),
      active=outs['active'], action=outs['action'],
      mentioned=outs['mentioned'], sigma=outs['sigma'],
      search=outs['search'], edit=outs['edit'], needed=needed)


simulate = jax.jit(simulate_batch, static_argnames=('config', 'chunk_size'))


@functools.lru_cache(maxsize=16)
def _over_sessions(config, chunk_size, mesh):
  """``simulate_batch`` with the sessions split over the mesh's session
  axis and everything else replicated."""
  body = functools.partial(simulate_batch, config, chunk_size=chunk_size)
  shared, split = P(), P(sharding.SESSION_AXIS)
  return jax.jit(jax.shard_map(
      body, mesh=mesh, in_specs=(shared, shared, shared, shared, split,
                                 shared),
      out_specs=split, check_vma=False))


def sim_config(method: loop.Method, base: session_lib.LoopConfig,
               user: simulator.UserConfig, composer: str) -> SimConfig:
  return SimConfig(loop=loop.loop_config(method, base),
                   user=dataclasses.replace(user, draws='jax'),
                   t2v=method.t2v, covr=method.covr,
                   reflection=method.reflection,
                   dynamic_anchor=method.dynamic_anchor, composer=composer)


def run(env: SimEnvironment, config: SimConfig, sessions, seed: int,
        log=None, chunk_size: int | None = DEFAULT_CHUNK_SIZE,
        mesh=None) -> SimTrace:
  """Runs ``sessions`` (query indices), filling the phrase table as needed.

  ``chunk_size``: see ``simulate``. ``mesh``: a ``sharding.make_mesh`` mesh
  whose ``session`` axis splits the sessions over devices (world, table and
  composer replicated); None runs on the default device. Returns the trace
  as NumPy arrays.
  """
  if chunk_size is not None and chunk_size < 1:
    raise ValueError(f'chunk_size must be >= 1 or None, got {chunk_size}')
  queries = jnp.asarray(sessions, jnp.int32)
  seed_key = jax.random.key(seed)
  if mesh is not None:  # pad to a multiple of the session shards
    shards = mesh.shape[sharding.SESSION_AXIS]
    padded = jnp.concatenate([queries, jnp.broadcast_to(
        queries[-1:], (-len(queries) % shards,))])
  for attempt in range(config.loop.num_turns + 2):
    index, rows = env.table.arrays()
    if mesh is None:
      trace = simulate(config, env.arrays, index, rows, env.composer_params,
                       queries, seed_key, chunk_size=chunk_size)
    else:
      # Replicated on every device of the mesh (a copy per device).
      shared = jax.device_put((env.arrays, index, rows, env.composer_params,
                               seed_key), NamedSharding(mesh, P()))
      trace = _over_sessions(config, chunk_size, mesh)(
          *shared[:4], jax.device_put(padded, NamedSharding(
              mesh, P(sharding.SESSION_AXIS))), shared[4])
      trace = jax.tree.map(lambda x: x[:len(queries)], trace)
    needed = np.asarray(trace.needed)
    added = env.table.add(needed[needed > 0])
    if not added:
      return jax.tree.map(np.asarray, trace)
    if log is not None:
      log(f'pass {attempt + 1}: encoded {added} new phrases '
          f'(table {len(env.table)})')
  raise RuntimeError('the phrase table did not settle')  # cannot happen


def batch_result(env: SimEnvironment, trace: SimTrace) -> loop.BatchResult:
  """The host loop's ``BatchResult`` (records hold what the user named
  instead of the text it would have written)."""
  names = world_lib.ATTRIBUTES
  records = []
  for i in range(trace.displayed.shape[0]):
    rows = [{'turn': 0, 'action': None, 'feedback': None, 'sigma': None,
             'question': None, 'asked': None}]
    for t in range(trace.active.shape[1]):
      if not trace.active[i, t]:
        rows.append({'turn': t + 1, 'action': 'stopped', 'feedback': '',
                     'sigma': None, 'question': None, 'asked': None})
        continue
      rows.append({
          'turn': t + 1,
          'action': simulator.ACTIONS[int(trace.action[i, t])],
          'feedback': None,
          'mentioned': {names[a]: world_lib.VALUES[names[a]][int(v)]
                        for a, v in enumerate(trace.mentioned[i, t])
                        if v >= 0},
          'sigma': demotion.SIGMAS[int(trace.sigma[i, t])],
          'question': None, 'asked': None,
          'search': phrase_text(int(trace.search[i, t])),
          'edit': phrase_text(int(trace.edit[i, t]) + NUM_CODES)})
    records.append(rows)
  return loop.BatchResult(displayed=trace.displayed,
                          top_scores=trace.top_scores, records=records)
