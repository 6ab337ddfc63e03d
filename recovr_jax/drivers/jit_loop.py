"""The jitted loop: one session's turns in JAX (``vmap``-ped over a batch),
the protocol's skeleton (``session.feedback_turn``) run with a method's
pure-JAX form (``jax_form``) on a data source's face (``traced.Face``).

* the face's user answers each turn (``Face.respond``) with what the method
  observes (``plan.JaxObservation``) from the shown top-1 and the question
  shown with it; the method plans (``jax_form.step``), the ranking core
  ranks (``ranking.turn_step``) and the method asks (``jax_form.
  jax_question``: the attribute the user will read in its question);
* text encoding is a table lookup (``Face.text``) of the method's channel
  texts as codes (``Face.code``), the tables filled by the runner
  (``jit_runner``) between a turn's probe and its ranking.

``simulate_batch`` runs every turn as one ``lax.scan`` on tables that hold
all a batch reads; ``start_batch`` and ``turn_batch`` are its steps, each
either a probe (``rank`` false: the user and the plan, not the ranking) or
a ranked turn, as the runner's state table says.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

from recovr_jax import executables
from recovr_jax.core import demotion
from recovr_jax.core import vectors
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.protocol import session
from recovr_jax.protocol import traced


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
  data: plan.JaxData
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


def _session_start(config: traced.JitConfig, shared: _Shared, query, rank=True):
  """Turn 0 of one session: ``(carry, search key used)``."""
  return _start_shown(config, shared, _start_decided(config, shared, query),
                      rank)


def _start_decided(config: traced.JitConfig, shared: _Shared, query):
  """Turn 0 before its ranking: ``(ranking inputs, method state, face
  state, search key used)``."""
  face, data = config.face, shared.data
  ref = data.reference[query]
  start, face_state = face.start(data, shared.tables, query)
  method_state, search = config.form.init(start)
  search_code = face.code(search) * config.form.t2v
  search_key = face.key(search_code, plan.T2V)
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


def _start_shown(config: traced.JitConfig, shared: _Shared, decided, rank):
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


def _channels(face, turn_plan) -> dict:
  """The plan's texts: their codes, the table keys the ranking reads, and
  which channels use a text (code 0, the empty text, marks an unused one)."""
  search, edit = face.code(turn_plan.search), face.code(turn_plan.edit)
  use_search = search * turn_plan.use_search
  use_edit = edit * turn_plan.use_edit
  return dict(search=search, edit=edit, use_search=use_search > 0,
              use_edit=use_edit > 0,
              search_key=face.key(use_search, plan.T2V),
              edit_key=face.key(use_edit, plan.COVR))


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


class _JitLoop:
  """``session.TurnLoop`` for one session in JAX (traced under vmap)."""

  def __init__(self, config: traced.JitConfig, shared: _Shared, query,
               rank=True):
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
    method_state, turn_plan = self.config.form.step(carry.method, obs)
    # A session that stopped keeps its method's and face's state.
    keep = lambda old, new: jax.tree.map(
        lambda o, n: jnp.where(active, n, o), old, new)
    return dataclasses.replace(
        carry, method=keep(carry.method, method_state),
        face=keep(carry.face, face_state)), turn_plan

  def rank(self, carry, turn_plan, active):
    shared, face = self.shared, self.config.face

    def ranked():  # the queries too: a probe that does not rank skips them
      texts = _channels(face, turn_plan)
      if turn_plan.edit_embedding is None:  # the edit is a text of the table
        edit = face.text(shared.tables, texts['edit_key'])
        edit_valid = texts['use_edit']
      else:  # the method's own text embedding (the dialogue, MERLIN's text)
        edit = turn_plan.edit_embedding
        edit_valid = jnp.asarray(turn_plan.use_edit)
      covr_query = compose(self.config.composer, shared.composer_params,
                           ranking.gallery_row(shared.data.gallery,
                                               turn_plan.anchor, shared.split),
                           edit)
      inputs = ranking.TurnInputs(
          queries=jnp.stack([face.text(shared.tables, texts['search_key']),
                             covr_query]),
          valid=jnp.stack([texts['use_search'], edit_valid]),
          exclude=self.reference, sigma=turn_plan.sigma, stop=~active,
          penalty=self.config.form.penalty(
              turn_plan.avoid, shared.data.memory.caption_attrs))
      return ranking.turn_step(self.config.loop, shared.data.gallery,
                               carry.state, inputs, split=shared.split)
    state = _ranked(self.ranks, ranked, carry.state)
    return dataclasses.replace(carry, state=state)

  def ask(self, carry, active):
    """The method's question shown with the list just ranked, as the
    attribute the user reads in it."""
    form = self.config.form
    if not plan.asks(form):
      return carry
    question, counted = form.jax_question(
        carry.method, carry.state.shown_ids, carry.state.shown_scores,
        carry.asked, self.reference, self.shared.data.memory, active)
    return dataclasses.replace(carry, question=question,
                               asked=carry.asked + counted)

  def held(self, observation, turn_plan, active):
    """Whether the turn ``decide`` planned reads only held entries."""
    _, _, own = observation
    face = self.config.face
    keys = jnp.stack([jnp.where(active, k, 0)
                      for k in _needed(_channels(face, turn_plan))])
    return ~active | face.held(self.shared.tables, face.record(own, active),
                               keys)

  def record(self, carry, observation, turn_plan, active):
    obs, _, own = observation
    zero = jnp.zeros((), jnp.int32)
    texts = _channels(self.config.face, turn_plan)
    needed = _needed(texts)
    return _turn_outputs(
        carry, active, jnp.where(active, obs.action, plan.STOP),
        jnp.where(active, turn_plan.sigma, demotion.SIGMA_NEU),
        *(jnp.where(active, c, zero)
          for c in (texts['search'], texts['edit']) + needed),
        jnp.where(active, obs.asked, -1),
        self.config.face.record(own, active))


def _session_turn(config: traced.JitConfig, shared: _Shared, query,
                  carry: SessionCarry, turn, rank=True):
  """Feedback turn ``turn`` of one session: ``(carry, outputs)``."""
  return session.feedback_turn(_JitLoop(config, shared, query, rank),
                                   carry, turn)


def _stopped_turn(config: traced.JitConfig, carry: SessionCarry):
  """``_session_turn`` of a session that has stopped, without the work."""
  carry = dataclasses.replace(carry,
                              state=ranking.carry_forward(carry.state))
  zero = jnp.zeros((), jnp.int32)
  return carry, _turn_outputs(
      carry, jnp.asarray(False), zero + plan.STOP,
      zero + demotion.SIGMA_NEU, zero, zero, zero, zero, zero - 1,
      config.face.stopped())


def simulate_batch(config: traced.JitConfig, data: plan.JaxData, tables,
                   composer_params, queries, seed_key,
                   chunk_size: int | None = None,
                   split: ranking.GallerySplit | None = None
                   ) -> traced.JitTrace:
  """A batch of sessions, one per entry of ``queries`` ``[S]``.

  ``chunk_size=None``: ``session.plain_turns`` (every session computes
  every turn); an int: ``session.compact_turns`` (same results; work only
  for sessions still searching).
  ``tables``: tables that hold all the batch reads (``traced.Filler.arrays()``).
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
  return traced.JitTrace(
      displayed=jnp.concatenate([shown0[:, None], outs['shown']], axis=1),
      top_scores=scores[:, :, 0], scores=scores,
      active=outs['active'], action=outs['action'], sigma=outs['sigma'],
      search=outs['search'], edit=outs['edit'], needed=needed,
      fired=outs['fired'], asked=outs['asked'],
      questions=outs['questions'], own=outs['own'])


def start_batch(config: traced.JitConfig, data: plan.JaxData, tables,
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


def turn_batch(config: traced.JitConfig, data: plan.JaxData, tables,
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
    driver = _JitLoop(config, shared, q)
    mid = session.decide(driver, c, t)
    return mid, driver.held(*mid[1:])

  def second(q, mid, ranks):
    return session.show(_JitLoop(config, shared, q, ranks), *mid)

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
# (``config_pytree``: rrf_k, gamma, kappa, the user's
# rates, ...) are arguments; ``turn`` and ``rank`` are arguments too, so
# every turn and every probe of a run shares one program.
simulate = executables.jit(simulate_batch, static_argnames=('chunk_size',))
start = executables.jit(start_batch)
step = executables.jit(turn_batch, static_argnames=('chunk_size',))
