"""The jitted driver: whole sessions as one ``lax.scan`` over turns inside
``vmap`` over sessions, compiled once per shape.

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
  texts as codes (``Face.code``). The tables fill themselves: a pass
  reports what it lacked (``SimTrace.needed`` and the face's own outputs),
  the host adds it (``Environment.filler``) and the batch runs again.

The world's face (``envs.world.face.traced_face``) is the one the runs use; the tests also
run a toy environment written in the test.

Why one module of about 470 lines: the driver is one scan body and what it
needs on both sides of ``jit`` (the ``Face`` and ``Environment`` protocols,
``SimConfig``, the chunked runner); split, the scan's carried state and its
step would live apart.
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
from recovr_jax.core import demotion
from recovr_jax.core import sharding
from recovr_jax.core import vectors
from recovr_jax.protocol import plan as plan_lib
from recovr_jax.protocol import ranking
from recovr_jax.protocol import session as session_lib

DEFAULT_CHUNK_SIZE = 64  # sessions per vmapped chunk of a compacted turn


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
  functions of ``JaxData`` and the pass's tables, traced per session.
  ``start``: turn 0 (what the method reads, and the face's per-session
  state); ``code``: a ``[A]`` partial assignment's text code (0: the empty
  text); ``key``: a channel text's table key; ``text``: its encoding
  (anything while absent: the host adds what ``SimTrace.needed`` reports
  and the batch reruns); ``respond``: the user at a feedback turn
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


class Environment(Protocol):
  """A data source's jitted face on the host: ``data``, ``composer`` (a
  flax Module applied to ``composer_params``, or 'sum') and the tables.
  ``filler``: the tables of one run, an object with ``arrays()`` (the
  pass's tables, a pytree) and ``add(trace) -> str`` (what it added for
  the next pass; '' when nothing was missing)."""
  data: plan_lib.JaxData
  composer: object
  composer_params: object

  def filler(self, config, seed: int, num_sessions: int): ...


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


def _session_start(config: SimConfig, shared: _Shared, query):
  """Turn 0 of one session: ``(carry, search key used)``."""
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
  state = ranking.start_step(config.loop, data.gallery,
                             ranking.init_state(config.loop), inputs,
                             split=shared.split)
  return SessionCarry(state=state, method=method_state,
                      question=jnp.asarray(-1, jnp.int32),
                      asked=jnp.asarray(0, jnp.int32),
                      face=face_state), jnp.where(search_code > 0,
                                                  search_key, 0)


def _channels(face, plan) -> dict:
  """The plan's texts: their codes, the table keys the ranking reads, and
  which channels use a text (code 0, the empty text, marks an unused one)."""
  search, edit = face.code(plan.search), face.code(plan.edit)
  use_search, use_edit = search * plan.use_search, edit * plan.use_edit
  return dict(search=search, edit=edit, use_search=use_search > 0,
              use_edit=use_edit > 0,
              search_key=face.key(use_search, plan_lib.T2V),
              edit_key=face.key(use_edit, plan_lib.COVR))


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

  def __init__(self, config: SimConfig, shared: _Shared, query):
    self.config, self.shared, self.query = config, shared, query
    self.reference = shared.data.reference[query]
    self.target = shared.data.target[query]

  def still_searching(self, carry):
    return session_lib.searching(carry.state, self.target)

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
    texts = _channels(face, plan)
    if plan.edit_embedding is None:  # the edit is a text of the table
      edit = face.text(shared.tables, texts['edit_key'])
      edit_valid = texts['use_edit']
    else:  # the method's own text embedding (the dialogue, MERLIN's text)
      edit, edit_valid = plan.edit_embedding, jnp.asarray(plan.use_edit)
    covr_query = compose(self.config.composer, shared.composer_params,
                         ranking.gallery_row(shared.data.gallery, plan.anchor,
                                             shared.split), edit)
    inputs = ranking.TurnInputs(
        queries=jnp.stack([face.text(shared.tables, texts['search_key']),
                           covr_query]),
        valid=jnp.stack([texts['use_search'], edit_valid]),
        exclude=self.reference, sigma=plan.sigma, stop=~active,
        penalty=self.config.form.penalty(plan.avoid,
                                         shared.data.memory.caption_attrs))
    state = ranking.turn_step(self.config.loop, shared.data.gallery,
                              carry.state, inputs, split=shared.split)
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

  def record(self, carry, observation, plan, active):
    obs, _, own = observation
    zero = jnp.zeros((), jnp.int32)
    texts = _channels(self.config.face, plan)
    # The table keys the ranking read (0: none), for the host to fill.
    needed = (jnp.where(texts['use_search'], texts['search_key'], 0),
              jnp.where(texts['use_edit'], texts['edit_key'], 0))
    return _turn_outputs(
        carry, active, jnp.where(active, obs.action, plan_lib.STOP),
        jnp.where(active, plan.sigma, demotion.SIGMA_NEU),
        *(jnp.where(active, c, zero)
          for c in (texts['search'], texts['edit']) + needed),
        jnp.where(active, obs.asked, -1),
        self.config.face.record(own, active))


def _session_turn(config: SimConfig, shared: _Shared, query,
                  carry: SessionCarry, turn):
  """Feedback turn ``turn`` of one session: ``(carry, outputs)``."""
  return session_lib.feedback_turn(_JitDriver(config, shared, query), carry,
                                   turn)


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
  ``tables``: the pass's tables (``Environment.filler(...).arrays()``).
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
    carry, outs = session_lib.plain_turns(turn, queries, carry, turns)
  else:
    carry, outs = session_lib.compact_turns(
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


# Compiled once per shape and per non-numeric settings: the traced ones
# (``config_tree.setting(traced=True)``: rrf_k, gamma, kappa, the user's
# rates, ...) are arguments.
simulate = config_tree.jit(simulate_batch, static_argnames=('chunk_size',))


@functools.lru_cache(maxsize=16)
def _over_sessions(skeleton, chunk_size, mesh, data_structure=None,
                   num_rows=None):
  """``simulate_batch`` with the sessions split over the mesh's session
  axis, for every config of ``skeleton`` (``config_tree.split``; its
  numbers are the first argument). ``data_structure`` (the data's treedef)
  and ``num_rows``: the gallery's rows are split over the mesh's gallery
  axis (``num_rows`` real rows); otherwise everything but the sessions is
  replicated."""
  shared, split = P(), P(sharding.SESSION_AXIS)
  data_spec, rows = shared, None
  if data_structure is not None:
    data_spec = dataclasses.replace(
        jax.tree.unflatten(data_structure, [P()] * data_structure.num_leaves),
        gallery=P(sharding.GALLERY_AXIS, None))
    rows = ranking.GallerySplit.of(sharding.GALLERY_AXIS, num_rows,
                                   mesh.shape[sharding.GALLERY_AXIS])

  def body(numbers, *args):
    return simulate_batch(config_tree.join(skeleton, numbers), *args,
                          chunk_size=chunk_size, split=rows)
  return jax.jit(jax.shard_map(
      body, mesh=mesh,
      in_specs=(shared, data_spec, shared, shared, split, shared),
      out_specs=split, check_vma=False))


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


def run(env: Environment, config: SimConfig, sessions, seed: int, log=None,
        chunk_size: int | None = DEFAULT_CHUNK_SIZE, mesh=None,
        pad_to: int | None = None) -> SimTrace:
  """Runs ``sessions`` (query indices), filling the tables as needed.

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
  if pad_to is not None and 0 < num < pad_to:
    sessions = np.concatenate([np.asarray(sessions, np.int32), np.full(
        pad_to - num, np.asarray(sessions)[-1], np.int32)])
  filler = env.filler(config, seed, len(sessions))
  queries = jnp.asarray(sessions, jnp.int32)
  seed_key = jax.random.key(seed)
  split_rows = mesh is not None and mesh.shape[sharding.GALLERY_AXIS] > 1
  if mesh is not None:  # pad to a multiple of the session shards
    shards = mesh.shape[sharding.SESSION_AXIS]
    padded = np.concatenate([np.asarray(sessions, np.int32), np.broadcast_to(
        np.asarray(sessions, np.int32)[-1:], (-len(sessions) % shards,))])
  # Each pass settles at least one more turn of every session (its words,
  # its dialogue, then the texts its plan needs, on the world).
  for attempt in range(3 * config.loop.num_turns + 4):
    tables = filler.arrays()
    if mesh is None:
      trace = simulate(config, env.data, tables, env.composer_params,
                       queries, seed_key, chunk_size=chunk_size)
    else:
      # Replicated on every device of the mesh (a copy per device); the
      # mesh may span several processes, each passing the same values.
      # The config's numbers travel as Python scalars (the same on every
      # process, replicated by jit).
      skeleton, numbers = config_tree.split(config)
      tables, params, key = sharding.place(
          (tables, env.composer_params, seed_key), mesh)
      if split_rows:
        data = _place_split_gallery(env.data, mesh)
        fn = _over_sessions(skeleton, chunk_size, mesh,
                            jax.tree.structure(env.data),
                            int(env.data.gallery.shape[0]))
      else:
        data = sharding.place(env.data, mesh)
        fn = _over_sessions(skeleton, chunk_size, mesh)
      trace = fn(numbers, data, tables, params,
                 sharding.place(padded, mesh, P(sharding.SESSION_AXIS)), key)
    trace = jax.tree.map(lambda x: x[:num], sharding.gather(trace))
    added = filler.add(trace)
    if not added:
      return trace
    if log is not None:
      log(f'pass {attempt + 1}: {added}')
  raise RuntimeError('the tables did not settle')  # cannot happen
