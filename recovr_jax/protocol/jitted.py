"""The jitted driver: a batch's sessions ``vmap``-ped, each turn one program
compiled once per shape and run turn by turn from the carried state
(``run``), or all turns as one ``lax.scan`` (``simulate``: the same trace).

It runs the protocol's skeleton (``session.feedback_turn``) on one session
in JAX, for a method that gives a pure-JAX form of its step (``jax_form``)
and a data source that gives a pure-JAX face (an ``Environment`` on the
host, a ``Face`` under ``jit``):

* the face's user answers each turn (``Face.respond``) with what the method
  observes (``plan.JaxObservation``) from the shown top-1 and the question
  shown with it; the method plans (``jax_form.step``), the ranking core
  ranks (``ranking.turn_step``) and the method asks (``jax_form.
  jax_question``: the attribute the user will read in its question);
* text encoding is a table lookup (``Face.text``) of the method's channel
  texts as codes (``Face.code``). The tables fill themselves turn by turn
  (``run``): a probe of the turn (the user and the plan, not the ranking)
  reports what it read (``SimTrace.needed`` and the face's own outputs),
  the host adds what the tables lacked (``Filler``), and the turn is
  ranked once it has all it reads (in the probe's own call when a face
  that ``TELLS_HELD`` finds every entry held).

The world's face (``envs.world.face.traced_face``) is the one the runs use;
the tests also run a toy environment written in the test.
"""

import dataclasses
import functools
from typing import ClassVar, Protocol

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from recovr_jax import config_tree
from recovr_jax import profiling
from recovr_jax.core import demotion
from recovr_jax.core import sharding
from recovr_jax.core import vectors
from recovr_jax.protocol import plan as plan_lib
from recovr_jax.protocol import ranking
from recovr_jax.protocol import session

DEFAULT_CHUNK_SIZE = 64  # sessions per vmapped chunk of a compacted turn


def chunk_size(flag: int | None, backend: str | None = None) -> int | None:
  """``run``'s ``chunk_size`` for ``--jit_chunk_size`` ``flag`` on
  ``backend`` (default JAX's): None picks by backend, ``DEFAULT_CHUNK_SIZE``
  on a CPU and no chunks on an accelerator (each chunk's ``lax.cond`` there
  has the host read its predicate: thousands of reads a turn at 100,000
  sessions); 0 is no chunks."""
  if flag is None:
    backend = backend or jax.default_backend()
    return DEFAULT_CHUNK_SIZE if backend == 'cpu' else None
  return flag or None


class Unsupported(ValueError):
  """A setting the jitted driver cannot run; ``flag`` names what to change."""

  def __init__(self, flag: str, message: str):
    super().__init__(message)
    self.flag = flag


def check_supported(method):
  """Raises ``Unsupported`` naming what the jitted mode cannot run."""
  if method.jax_form is None:
    raise Unsupported('--methods', (
        f'method {method.name!r} runs only in the host loop (it has no '
        'jax_form)'))


JaxData = plan_lib.JaxData


class Face(Protocol):
  """A data source's pure-JAX face: static (hashable) settings and pure
  functions of ``JaxData`` and the run's tables, traced per session.
  ``start``: turn 0 (what the method reads, and the face's per-session
  state); ``code``: a ``[A]`` partial assignment's text code (0: the empty
  text); ``key``: a channel text's table key; ``text``: its encoding
  (anything while absent: the host adds what ``SimTrace.needed`` reports
  before the turn is ranked); ``respond``: the user at a feedback turn
  (``question``: the attribute it reads in the question shown, -1 none);
  ``record``: a turn's record outputs, ``stopped()`` a stopped turn's.
  ``OBSERVATION``: the type of the observation ``respond`` gives a method
  (``JaxObservation.info``)."""
  OBSERVATION: ClassVar[type]

  def start(self, data, tables, query) -> tuple[plan_lib.JaxStart,
                                                 object]: ...
  def code(self, assignment) -> jax.Array: ...
  def key(self, code, channel: int) -> jax.Array: ...
  def text(self, tables, key) -> jax.Array: ...
  def respond(self, data, tables, seed_key, query, turn, state, top1,
              question) -> tuple[plan_lib.JaxObservation, object, dict]: ...
  def record(self, outputs: dict, active) -> dict: ...
  def stopped(self) -> dict: ...

  # Whether ``held`` tells; without it each turn ranks in a call of its
  # own after its probes, and its filler sees every probe.
  TELLS_HELD: ClassVar[bool] = False

  def held(self, tables, record: dict, keys) -> jax.Array:
    """Whether a searching session's turn read only what ``tables`` hold
    (its ``record`` outputs and the table keys ``keys`` ``[2]`` its
    ranking reads, 0 none): exactly when the run's filler would add
    nothing for it (read when ``TELLS_HELD``)."""


@dataclasses.dataclass(frozen=True)
class Fill:
  """What a filler added for the turn a probe ran (``Filler.fill``):
  ``added`` says it ('' nothing); ``again``: it changed what the turn's
  user or plan read, so the turn is probed again before it is ranked."""
  added: str = ''
  again: bool = False


class Turn:
  """One turn's outputs for a filler (``Filler.fill``, ``settled``): turn
  ``index``'s (0: the start), a probe's or the ranked turn's, each field
  copied to the host when first read (the batch's trace stays where it
  was computed until the batch ends)."""

  def __init__(self, index: int, outs: dict):
    self.index, self._outs, self._host = index, outs, {}

  def _read(self, key):
    if key not in self._host:
      self._host[key] = np.asarray(self._outs[key])
    return self._host[key]

  @property
  def shown(self) -> np.ndarray:  # [S, K] int32
    return self._read('shown')

  @property
  def scores(self) -> np.ndarray:  # [S, K] float32
    return self._read('scores')

  @property
  def needed(self) -> np.ndarray:  # [S, 2] int32 table keys (0: none)
    if self.index == 0:
      return self._read('needed')
    return np.stack([self._read('needed_search'),
                     self._read('needed_edit')], axis=1)

  @property
  def active(self) -> np.ndarray:  # [S] bool; at turn 0, every session
    if self.index == 0:
      return np.ones(len(self.shown), bool)
    return self._read('active')

  @property
  def fired(self) -> np.ndarray:  # [S] bool; at turn 0, none
    if self.index == 0:
      return np.zeros(len(self.shown), bool)
    return self._read('fired')

  def own(self, key) -> np.ndarray:
    """The face's record output ``key`` (feedback turns only)."""
    if self.index == 0:
      raise KeyError(f'turn 0 records no {key!r}')
    if ('own', key) not in self._host:
      self._host['own', key] = np.asarray(self._outs['own'][key])
    return self._host['own', key]


class Filler(Protocol):
  """The tables of one run, filled turn by turn (``run``); each call gets
  the turn at hand only (``Turn``)."""

  def arrays(self):
    """The tables as they are now (a pytree; the faces read them)."""

  def fill(self, turn: Turn) -> Fill:
    """Turn ``turn.index`` was probed (its list not ranked): adds the
    entries its user and plan read and the tables lacked."""

  def settled(self, turn: Turn) -> None:
    """Turn ``turn.index`` was ranked with what it read: its lists are
    final."""


class Environment(Protocol):
  """A data source's jitted face on the host: ``data``, ``composer`` (a
  flax Module applied to ``composer_params``, or 'sum') and the tables of
  a run (``filler``)."""
  data: plan_lib.JaxData
  composer: object
  composer_params: object

  def filler(self, config, seed: int, num_sessions: int) -> Filler: ...


@dataclasses.dataclass(frozen=True)
class SimConfig:
  """Static settings of a jitted run (hashable)."""
  loop: ranking.LoopConfig
  face: Face                # the source's face with its settings
  form: plan_lib.JaxForm    # the method's ``jax_form`` (hashable)
  # A flax Module applied to composer_params, 'sum', or 'given' (the edit
  # embedding is the composed query itself: a source that tabulates the
  # host method's queries, ``protocol.stepped``).
  composer: object = 'sum'

  def __post_init__(self):
    gives, reads = self.face.OBSERVATION, self.form.READS
    if not issubclass(gives, reads):
      raise Unsupported('--methods', (
          f'the method\'s jitted form ({type(self.form).__name__}) reads '
          f'{reads.__name__} observations; this source\'s face gives '
          f'{gives.__name__}'))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimTrace:
  """A batch's run; per-turn fields are for turns 1..T, and stopped
  sessions' turns hold action stop, sigma neu and code 0."""
  displayed: jax.Array   # [S, T+1, K] int32 shown lists
  top_scores: jax.Array  # [S, T+1] float32
  active: jax.Array      # [S, T] bool, the user had not stopped
  action: jax.Array      # [S, T] int32 index into plan.ACTIONS
  sigma: jax.Array       # [S, T] int32
  search: jax.Array      # [S, T] int32 the T2V text's code
  edit: jax.Array        # [S, T] int32 the edit's code (0: empty)
  needed: jax.Array      # [S, T+1, 2] int32 table keys used (0: none)
  fired: jax.Array       # [S, T] bool rank-cap changed the list it capped
  asked: jax.Array       # [S, T] int32 attribute of the question answered
  questions: jax.Array   # [S, T] int32 questions asked so far, the one
                         # shown with turn t's list included
  own: dict              # the face's record outputs, each [S, T, ...]
  scores: jax.Array      # [S, T+1, K] float32 scores of the shown lists
             # the face's record outputs, each [S, T, ...]


def compose(composer, params, reference, edit):
  """``composer`` (a flax Module, or 'sum') as a pure function of
  ``[..., D]`` inputs ('given': ``edit`` is the composed query)."""
  if isinstance(composer, str) and composer == 'sum':
    return vectors.sum_composer(reference, edit)
  if isinstance(composer, str) and composer == 'given':
    del reference
    return edit
  return composer.apply(params, reference, edit)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SessionCarry:
  """One session's state between turns."""
  state: ranking.SessionState
  method: dict         # the method's jax_form state (e.g. search, keep [A])
  question: jax.Array  # [] int32 attribute the user reads in the question
                       # shown with the list (-1: none)
  asked: jax.Array     # [] int32 questions asked so far
  face: object         # the face's per-session state


@dataclasses.dataclass(frozen=True)
class _Shared:
  """What every session of a batch reads (unbatched under vmap)."""
  data: plan_lib.JaxData
  tables: object
  composer_params: object
  seed_key: jax.Array
  # The gallery's rows split over a mesh axis (None: every device holds it).
  split: ranking.GallerySplit | None = None


def _ranked(rank, step, state):
  """``step()``, the turn's new ranking state, when ``rank`` (a Python
  True: no branch at all); else ``state`` unchanged (a probe: the turn's
  user and plan without the ranking, ``run``)."""
  if rank is True:
    return step()
  return jax.lax.cond(rank, step, lambda: state)


def _session_start(config: SimConfig, shared: _Shared, query, rank=True):
  """Turn 0 of one session: ``(carry, search key used)``."""
  return _start_shown(config, shared, _start_decided(config, shared, query),
                      rank)


def _start_decided(config: SimConfig, shared: _Shared, query):
  """Turn 0 before its ranking: ``(ranking inputs, method state, face
  state, search key used)``."""
  face, data = config.face, shared.data
  ref = data.reference[query]
  start, face_state = face.start(data, shared.tables, query)
  method_state, search = config.form.init(start)
  search_code = face.code(search) * config.form.t2v
  search_key = face.key(search_code, plan_lib.T2V)
  covr = compose(config.composer, shared.composer_params,
                 ranking.gallery_row(data.gallery, ref, shared.split),
                 start.modification)
  inputs = ranking.TurnInputs(
      queries=jnp.stack([face.text(shared.tables, search_key), covr]),
      valid=jnp.stack([search_code > 0, jnp.asarray(
          config.form.covr if start.covr_valid is None else start.covr_valid)]),
      exclude=ref, sigma=jnp.asarray(demotion.SIGMA_NEU),
      stop=jnp.asarray(False))
  return inputs, method_state, face_state, jnp.where(search_code > 0,
                                                     search_key, 0)


def _start_shown(config: SimConfig, shared: _Shared, decided, rank):
  """Turn 0 ranked (when ``rank``) from ``_start_decided``'s results."""
  inputs, method_state, face_state, search_key = decided
  init = ranking.init_state(config.loop)
  state = _ranked(rank, lambda: ranking.start_step(
      config.loop, shared.data.gallery, init, inputs, split=shared.split),
                  init)
  return SessionCarry(state=state, method=method_state,
                      question=jnp.asarray(-1, jnp.int32),
                      asked=jnp.asarray(0, jnp.int32),
                      face=face_state), search_key


def _channels(face, plan) -> dict:
  """The plan's texts: their codes, the table keys the ranking reads, and
  which channels use a text (code 0, the empty text, marks an unused one)."""
  search, edit = face.code(plan.search), face.code(plan.edit)
  use_search, use_edit = search * plan.use_search, edit * plan.use_edit
  return dict(search=search, edit=edit, use_search=use_search > 0,
              use_edit=use_edit > 0,
              search_key=face.key(use_search, plan_lib.T2V),
              edit_key=face.key(use_edit, plan_lib.COVR))


def _needed(texts):
  """The table keys a plan's ranking reads (0: none; ``texts``:
  ``_channels``), for the host to fill: ``(search, edit)``."""
  return (jnp.where(texts['use_search'], texts['search_key'], 0),
          jnp.where(texts['use_edit'], texts['edit_key'], 0))


def _turn_outputs(carry, active, action, sigma, search, edit, needed_search,
                  needed_edit, asked, own):
  state = carry.state
  return dict(shown=state.shown_ids, scores=state.shown_scores,
              active=active, action=action, sigma=sigma, search=search,
              edit=edit, needed_search=needed_search,
              needed_edit=needed_edit,
              fired=state.fired[state.turn] & active, asked=asked,
              questions=jnp.asarray(carry.asked, jnp.int32), own=own)


class _JitDriver:
  """``session.Driver`` for one session in JAX (traced under vmap)."""

  def __init__(self, config: SimConfig, shared: _Shared, query, rank=True):
    self.config, self.shared, self.query = config, shared, query
    self.ranks = rank
    self.reference = shared.data.reference[query]
    self.target = shared.data.target[query]

  def still_searching(self, carry):
    return session.searching(carry.state, self.target)

  def respond(self, carry, turn, active):
    del active
    top1 = jnp.maximum(carry.state.shown_ids[0], 0)
    return self.config.face.respond(
        self.shared.data, self.shared.tables, self.shared.seed_key,
        self.query, turn, carry.face, top1, carry.question)

  def plan(self, carry, observation, active):
    obs, face_state, _ = observation
    method_state, plan = self.config.form.step(carry.method, obs)
    # A session that stopped keeps its method's and face's state.
    keep = lambda old, new: jax.tree.map(
        lambda o, n: jnp.where(active, n, o), old, new)
    return dataclasses.replace(
        carry, method=keep(carry.method, method_state),
        face=keep(carry.face, face_state)), plan

  def rank(self, carry, plan, active):
    shared, face = self.shared, self.config.face

    def ranked():  # the queries too: a probe that does not rank skips them
      texts = _channels(face, plan)
      if plan.edit_embedding is None:  # the edit is a text of the table
        edit = face.text(shared.tables, texts['edit_key'])
        edit_valid = texts['use_edit']
      else:  # the method's own text embedding (the dialogue, MERLIN's text)
        edit, edit_valid = plan.edit_embedding, jnp.asarray(plan.use_edit)
      covr_query = compose(self.config.composer, shared.composer_params,
                           ranking.gallery_row(shared.data.gallery,
                                               plan.anchor, shared.split),
                           edit)
      inputs = ranking.TurnInputs(
          queries=jnp.stack([face.text(shared.tables, texts['search_key']),
                             covr_query]),
          valid=jnp.stack([texts['use_search'], edit_valid]),
          exclude=self.reference, sigma=plan.sigma, stop=~active,
          penalty=self.config.form.penalty(
              plan.avoid, shared.data.memory.caption_attrs))
      return ranking.turn_step(self.config.loop, shared.data.gallery,
                               carry.state, inputs, split=shared.split)
    state = _ranked(self.ranks, ranked, carry.state)
    return dataclasses.replace(carry, state=state)

  def ask(self, carry, active):
    """The method's question shown with the list just ranked, as the
    attribute the user reads in it."""
    form = self.config.form
    if not plan_lib.asks(form):
      return carry
    question, counted = form.jax_question(
        carry.method, carry.state.shown_ids, carry.state.shown_scores,
        carry.asked, self.reference, self.shared.data.memory, active)
    return dataclasses.replace(carry, question=question,
                               asked=carry.asked + counted)

  def held(self, observation, plan, active):
    """Whether the turn ``decide`` planned reads only held entries."""
    _, _, own = observation
    face = self.config.face
    keys = jnp.stack([jnp.where(active, k, 0)
                      for k in _needed(_channels(face, plan))])
    return ~active | face.held(self.shared.tables, face.record(own, active),
                               keys)

  def record(self, carry, observation, plan, active):
    obs, _, own = observation
    zero = jnp.zeros((), jnp.int32)
    texts = _channels(self.config.face, plan)
    needed = _needed(texts)
    return _turn_outputs(
        carry, active, jnp.where(active, obs.action, plan_lib.STOP),
        jnp.where(active, plan.sigma, demotion.SIGMA_NEU),
        *(jnp.where(active, c, zero)
          for c in (texts['search'], texts['edit']) + needed),
        jnp.where(active, obs.asked, -1),
        self.config.face.record(own, active))


def _session_turn(config: SimConfig, shared: _Shared, query,
                  carry: SessionCarry, turn, rank=True):
  """Feedback turn ``turn`` of one session: ``(carry, outputs)``."""
  return session.feedback_turn(_JitDriver(config, shared, query, rank),
                                   carry, turn)


def _stopped_turn(config: SimConfig, carry: SessionCarry):
  """``_session_turn`` of a session that has stopped, without the work."""
  carry = dataclasses.replace(carry,
                              state=ranking.carry_forward(carry.state))
  zero = jnp.zeros((), jnp.int32)
  return carry, _turn_outputs(
      carry, jnp.asarray(False), zero + plan_lib.STOP,
      zero + demotion.SIGMA_NEU, zero, zero, zero, zero, zero - 1,
      config.face.stopped())


def simulate_batch(config: SimConfig, data: plan_lib.JaxData, tables, composer_params,
                   queries, seed_key, chunk_size: int | None = None,
                   split: ranking.GallerySplit | None = None) -> SimTrace:
  """A batch of sessions, one per entry of ``queries`` ``[S]``.

  ``chunk_size=None``: ``session.plain_turns`` (every session computes
  every turn); an int: ``session.compact_turns`` (same results; work only
  for sessions still searching).
  ``tables``: tables that hold all the batch reads (``Filler.arrays()``).
  ``split``: ``data.gallery`` is this device's rows of a split gallery
  (inside ``shard_map``; see ``run``).
  """
  shared = _Shared(data, tables, composer_params, seed_key, split)
  # Data, tables and composer shared; one query per session.
  carry, search0 = jax.vmap(functools.partial(_session_start, config,
                                              shared))(queries)
  shown0, scores0 = carry.state.shown_ids, carry.state.shown_scores
  turn = functools.partial(_session_turn, config, shared)
  turns = jnp.arange(1, config.loop.num_turns + 1)
  if chunk_size is None:
    carry, outs = session.plain_turns(turn, queries, carry, turns)
  else:
    carry, outs = session.compact_turns(
        turn, functools.partial(_stopped_turn, config),
        shared.data.target[queries], queries, carry, turns, chunk_size)
  needed = jnp.concatenate([
      jnp.stack([search0, jnp.zeros_like(search0)], axis=1)[:, None],
      jnp.stack([outs['needed_search'], outs['needed_edit']], axis=2)], axis=1)
  scores = jnp.concatenate([scores0[:, None], outs['scores']], axis=1)
  return SimTrace(
      displayed=jnp.concatenate([shown0[:, None], outs['shown']], axis=1),
      top_scores=scores[:, :, 0], scores=scores,
      active=outs['active'], action=outs['action'], sigma=outs['sigma'],
      search=outs['search'], edit=outs['edit'], needed=needed,
      fired=outs['fired'], asked=outs['asked'],
      questions=outs['questions'], own=outs['own'])


def start_batch(config: SimConfig, data: plan_lib.JaxData, tables,
                composer_params, queries, rank,
                split: ranking.GallerySplit | None = None,
                session_axis: str | None = None):
  """Turn 0 of a batch (``simulate_batch``'s first step): ``(carry,
  outputs)``, ``outputs`` the shown lists (``shown``, ``scores`` ``[S,
  K]``), the table keys read (``needed`` ``[S, 2]``) and whether it
  ranked (``ranked`` ``[S]``). ``rank`` false: a probe (the keys, not the
  lists), which ranks too when every key is held (``turn_batch``)."""
  shared = _Shared(data, tables, composer_params, None, split)
  if getattr(config.face, 'TELLS_HELD', False):  # as turn_batch
    decided = jax.vmap(lambda q: _start_decided(config, shared, q))(queries)
    keys = jnp.stack([decided[-1], jnp.zeros_like(decided[-1])], axis=1)
    # Turn 0 reads no words: a stopped session's record.
    held = jax.vmap(lambda k: config.face.held(
        tables, config.face.stopped(), k))(keys)
    rank = rank | _none_missing(held, session_axis)
    carry, search0 = jax.vmap(lambda d: _start_shown(config, shared, d,
                                                     rank))(decided)
  else:
    carry, search0 = jax.vmap(lambda q: _session_start(config, shared, q,
                                                       rank))(queries)
  return carry, dict(shown=carry.state.shown_ids,
                     scores=carry.state.shown_scores,
                     needed=jnp.stack([search0, jnp.zeros_like(search0)],
                                      axis=1),
                     ranked=jnp.broadcast_to(rank, queries.shape[:1]))


def _none_missing(held, session_axis):
  """Whether every session of the batch (over ``session_axis`` too, under
  a mesh) read only held entries."""
  missing = jnp.sum(~held)
  if session_axis is not None:
    missing = jax.lax.psum(missing, session_axis)
  return missing == 0


def turn_batch(config: SimConfig, data: plan_lib.JaxData, tables,
               composer_params, queries, seed_key, carry: SessionCarry,
               turn, rank, chunk_size: int | None = None,
               split: ranking.GallerySplit | None = None,
               session_axis: str | None = None):
  """Feedback turn ``turn`` of a batch from its ``carry`` (one step of
  ``simulate_batch``'s scan): ``(carry, outputs [S, ...])``. ``rank``
  false: a probe (the user's answer and the plan, hence the table entries
  the turn reads), which ranks too when every session's turn reads only
  entries the tables hold (a face that ``TELLS_HELD``: the turn in two
  halves, ``session.decide`` and ``session.show``, with the test between;
  the host then has nothing to add). ``outputs['ranked']`` ``[S]`` (all
  equal) says whether the turn ranked. ``session_axis``: the mesh axis
  the sessions are split over (inside ``shard_map``), over which the test
  is taken."""
  shared = _Shared(data, tables, composer_params, seed_key, split)
  if not getattr(config.face, 'TELLS_HELD', False):  # one pass, as ranked
    turn_fn = lambda q, c, t: _session_turn(config, shared, q, c, t, rank)
    if chunk_size is None:
      carry, outs = session.plain_turn(turn_fn, queries, carry, turn)
    else:
      carry, outs = session.compact_turn(
          turn_fn, functools.partial(_stopped_turn, config),
          shared.data.target[queries], queries, carry, turn, chunk_size)
    return carry, dict(outs, ranked=jnp.broadcast_to(rank,
                                                     queries.shape[:1]))

  def first(q, c, t):
    driver = _JitDriver(config, shared, q)
    mid = session.decide(driver, c, t)
    return mid, driver.held(*mid[1:])

  def second(q, mid, ranks):
    return session.show(_JitDriver(config, shared, q, ranks), *mid)

  def between(held):
    return rank | _none_missing(held, session_axis)

  if chunk_size is None:
    carry, outs, ranked = session.halves_turn(first, second, between,
                                                  queries, carry, turn)
  else:
    carry, outs, ranked = session.compact_halves_turn(
        first, second, between, functools.partial(_stopped_turn, config),
        shared.data.target[queries], queries, carry, turn, chunk_size)
  return carry, dict(outs, ranked=jnp.broadcast_to(ranked,
                                                   queries.shape[:1]))


# Compiled once per shape and per non-numeric settings: the traced ones
# (``config_tree.setting(traced=True)``: rrf_k, gamma, kappa, the user's
# rates, ...) are arguments; ``turn`` and ``rank`` are arguments too, so
# every turn and every probe of a run shares one program.
simulate = config_tree.jit(simulate_batch, static_argnames=('chunk_size',))
start = config_tree.jit(start_batch)
step = config_tree.jit(turn_batch, static_argnames=('chunk_size',))


@functools.lru_cache(maxsize=16)
def _over_sessions(skeleton, chunk_size, mesh, data_structure=None,
                   num_rows=None):
  """``(start_batch, turn_batch)`` with the sessions (and the carry) split
  over the mesh's session axis, for every config of ``skeleton``
  (``config_tree.split``; its numbers are the first argument).
  ``data_structure`` (the data's treedef) and ``num_rows``: the gallery's
  rows are split over the mesh's gallery axis (``num_rows`` real rows);
  otherwise everything but the sessions is replicated."""
  shared, split = P(), P(sharding.SESSION_AXIS)
  data_spec, rows = shared, None
  if data_structure is not None:
    data_spec = dataclasses.replace(
        jax.tree.unflatten(data_structure, [P()] * data_structure.num_leaves),
        gallery=P(sharding.GALLERY_AXIS, None))
    rows = ranking.GallerySplit.of(sharding.GALLERY_AXIS, num_rows,
                                   mesh.shape[sharding.GALLERY_AXIS])

  def first(numbers, *args):
    return start_batch(config_tree.join(skeleton, numbers), *args,
                       split=rows, session_axis=sharding.SESSION_AXIS)

  def later(numbers, *args):
    return turn_batch(config_tree.join(skeleton, numbers), *args,
                      chunk_size=chunk_size, split=rows,
                      session_axis=sharding.SESSION_AXIS)

  def mapped(fn, in_specs):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs,
                                 out_specs=split, check_vma=False))
  return (mapped(first, (shared, data_spec, shared, shared, split, shared)),
          mapped(later, (shared, data_spec, shared, shared, split, shared,
                         split, shared, shared)))


def _place_split_gallery(data, mesh):
  """``data`` replicated on ``mesh`` but its gallery, whose rows are split
  over the gallery axis as ``ranking.GallerySplit`` lays them out (each
  process places only the rows of its own devices)."""
  gallery = np.asarray(data.gallery, np.float32)
  split = ranking.GallerySplit.of(sharding.GALLERY_AXIS, gallery.shape[0],
                                  mesh.shape[sharding.GALLERY_AXIS])

  def rows(index):
    shard = (index[0].start or 0) // split.rows
    ids, real = split.global_ids(shard, xp=np)
    return np.where(real[:, None], gallery[np.where(real, ids, 0)], 0.0
                    ).astype(np.float32)
  split_gallery = jax.make_array_from_callback(
      (split.shards * split.rows, gallery.shape[1]),
      NamedSharding(mesh, P(sharding.GALLERY_AXIS, None)), rows)
  rest = sharding.place(dataclasses.replace(data, gallery=None), mesh)
  return dataclasses.replace(rest, gallery=split_gallery)


class _Programs:
  """``start_batch`` and ``turn_batch`` of one run, on the default device
  or over ``mesh`` (the batch's data, parameters, key and queries placed
  once; the tables at every call)."""

  def __init__(self, env, config, queries, seed_key, chunk_size, mesh):
    self.env, self.config, self.chunk_size = env, config, chunk_size
    self.mesh, self.seed_key = mesh, seed_key
    self.num, self.padding = len(queries), 0
    if mesh is None:
      self.queries = jnp.asarray(queries)
      return
    skeleton, self.numbers = config_tree.split(config)
    if mesh.shape[sharding.GALLERY_AXIS] > 1:
      self.data = _place_split_gallery(env.data, mesh)
      self.fns = _over_sessions(skeleton, chunk_size, mesh,
                                jax.tree.structure(env.data),
                                int(env.data.gallery.shape[0]))
    else:
      self.data = sharding.place(env.data, mesh)
      self.fns = _over_sessions(skeleton, chunk_size, mesh)
    self.params, self.key = sharding.place((env.composer_params, seed_key),
                                           mesh)
    # Padded to a multiple of the session shards.
    shards = mesh.shape[sharding.SESSION_AXIS]
    self.padding = -len(queries) % shards
    self.queries = sharding.place(np.concatenate([queries, np.broadcast_to(
        queries[-1:], (self.padding,))]), mesh, P(sharding.SESSION_AXIS))

  def scored(self, active) -> int:
    """The session-turns a ranked turn scores when ``active`` ``[S]`` (its
    probe's) are still searching: every session at turn 0 and without
    chunks, else the chunks of searching sessions on each device."""
    if active is None or self.chunk_size is None:
      return self.num + self.padding
    shards = 1 if self.mesh is None else self.mesh.shape[
        sharding.SESSION_AXIS]
    active = np.concatenate([active, np.repeat(active[-1:], self.padding)])
    per_shard = active.reshape(shards, -1).sum(axis=1)
    _, chunk = session.chunks(len(active) // shards, self.chunk_size)
    return int(sum(-(-n // chunk) for n in per_shard) * chunk)

  def __call__(self, tables, carry, turn: int, rank: bool):
    """Turn ``turn`` (0: the start) from ``carry``: ``(carry, outputs)``,
    the outputs where they were computed on one device, NumPy arrays
    whole on every process over a mesh (sessions past the batch's, the
    mesh's padding, dropped)."""
    rank = np.bool_(rank)
    if self.mesh is None:
      if turn == 0:
        carry, outs = start(self.config, self.env.data, tables,
                            self.env.composer_params, self.queries, rank)
      else:
        carry, outs = step(self.config, self.env.data, tables,
                           self.env.composer_params, self.queries,
                           self.seed_key, carry, np.int32(turn), rank,
                           chunk_size=self.chunk_size)
    else:
      # Replicated on every device of the mesh (a copy per device); the
      # mesh may span several processes, each passing the same values. The
      # config's numbers travel as Python scalars (the same on every
      # process, replicated by jit).
      tables = sharding.place(tables, self.mesh)
      first, later = self.fns
      if turn == 0:
        carry, outs = first(self.numbers, self.data, tables, self.params,
                            self.queries, rank)
      else:
        carry, outs = later(self.numbers, self.data, tables, self.params,
                            self.queries, self.key, carry, np.int32(turn),
                            rank)
      outs = sharding.gather(outs)
    return carry, jax.tree.map(lambda x: x[:self.num], outs)


# The per-turn fields of ``_turn_outputs`` that ``SimTrace`` keeps as they
# are, with their types.
_PER_TURN = dict(shown=np.int32, scores=np.float32, active=bool,
                 action=np.int32, sigma=np.int32, search=np.int32,
                 edit=np.int32, fired=bool, asked=np.int32,
                 questions=np.int32)


class _Turns:
  """The trace of a batch, turn by turn: turn ``t``'s outputs once ranked
  (``set``), where they were computed; ``trace`` copies them to the host
  once and stacks them."""

  def __init__(self):
    self.turns = []

  def set(self, turn: int, outs: dict):
    assert turn == len(self.turns)
    self.turns.append(outs)

  def trace(self) -> SimTrace:
    turns = jax.device_get(self.turns)
    first, later = turns[0], turns[1:]

    def stacked(key, of=None):
      return np.stack([(o[key] if of is None else o[of][key])
                       for o in later], axis=1)
    if later:
      rest = {k: stacked(k) for k in _PER_TURN}
      needed = np.stack([stacked('needed_search'), stacked('needed_edit')],
                        axis=2)
      own = {k: stacked(k, 'own') for k in later[0]['own']}
    else:  # turn 0 only: the per-turn fields hold no turn (nor ``own``)
      s = first['shown'].shape[0]
      rest = {k: np.zeros((s, 0) + (first[k].shape[1:] if k in first
                                    else ()), dtype)
              for k, dtype in _PER_TURN.items()}
      needed, own = np.zeros((s, 0, 2), np.int32), {}
    scores = np.concatenate([first['scores'][:, None], rest['scores']],
                            axis=1)
    return SimTrace(
        displayed=np.concatenate([first['shown'][:, None], rest['shown']],
                                 axis=1),
        top_scores=scores[:, :, 0], scores=scores, active=rest['active'],
        action=rest['action'], sigma=rest['sigma'], search=rest['search'],
        edit=rest['edit'],
        needed=np.concatenate([first['needed'][:, None], needed], axis=1),
        fired=rest['fired'], asked=rest['asked'],
        questions=rest['questions'], own=own)


# Probes of one turn before it settles (each fill adds what the turn's
# user, then its plan, read; the world's face needs at most 2: its words
# and dialogues, then the texts of the plan).
MAX_PROBES = 3


def run(env: Environment, config: SimConfig, sessions, seed: int, log=None,
        chunk_size: int | None = DEFAULT_CHUNK_SIZE, mesh=None,
        pad_to: int | None = None) -> SimTrace:
  """Runs ``sessions`` (query indices) turn by turn, filling the tables as
  needed, and returns ``simulate_batch``'s trace on the filled tables.

  Each turn (the start, then the feedback turns) is first probed: its
  user's answer and its method's plan are computed from the last turn's
  carry without ranking, and the filler adds the table entries they read
  (``Filler.fill``: the words, dialogues or texts the turn lacked; on
  files, the host's plan of the turn), until the turn has all it reads;
  then the turn runs once with its ranking (``turn_batch``) and the filler
  sees the lists final (``Filler.settled``). A probe on a face that
  ``TELLS_HELD`` ranks at once when no session read anything the tables
  lack (the filler then has nothing to add, and sees the lists final). So
  each session's turn is ranked once; no settled turn runs again.

  ``pad_to``: fewer sessions than this (a run's partial last batch) are
  run padded to it with copies of the last session, whose results are
  dropped, so the batch has the full batches' shapes and reuses their
  compiled program (each session's results do not depend on the others).
  ``chunk_size``: see ``simulate_batch``. ``mesh``: a ``sharding.make_mesh``
  mesh (it may span several processes, each calling this with the same
  values) whose ``session`` axis splits the sessions over devices and whose
  ``gallery`` axis, when longer than 1, splits the gallery's rows (each
  device scores its rows; the lists merged exactly); tables, composer and
  the rest of the data are replicated. None runs on the default device.
  Returns the trace as NumPy arrays, whole on every process.
  """
  if chunk_size is not None and chunk_size < 1:
    raise ValueError(f'chunk_size must be >= 1 or None, got {chunk_size}')
  num = len(sessions)
  sessions = np.asarray(sessions, np.int32)
  if pad_to is not None and 0 < num < pad_to:
    sessions = np.concatenate([sessions, np.full(pad_to - num, sessions[-1],
                                                 np.int32)])
  filler = env.filler(config, seed, len(sessions))
  programs = _Programs(env, config, sessions, jax.random.key(seed),
                       chunk_size, mesh)
  turns, carry = _Turns(), None
  for turn in range(config.loop.num_turns + 1):
    for _ in range(MAX_PROBES):
      probed, probe = programs(filler.arrays(), carry, turn, rank=False)
      ranked = bool(np.asarray(probe.pop('ranked')).all())  # all equal
      if ranked:  # it read only held entries, and ranked
        break
      fill = filler.fill(Turn(turn, probe))
      if fill.added and log is not None:
        log(f'turn {turn}: {fill.added}')
      if not fill.again:
        break
    else:  # cannot happen
      raise RuntimeError(f'turn {turn}: the tables did not settle')
    profiling.count(ranking.SCORED, programs.scored(
        np.asarray(probe['active']) if turn else None))
    if ranked:
      carry, outs = probed, probe
    else:
      carry, outs = programs(filler.arrays(), carry, turn, rank=True)
      outs.pop('ranked')
    turns.set(turn, outs)
    filler.settled(Turn(turn, outs))
  trace = turns.trace()
  return jax.tree.map(lambda x: x[:num], trace)
