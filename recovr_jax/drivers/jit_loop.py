"""The jitted turn: one session's turn in JAX (``vmap``-ped over a batch),
the protocol's skeleton (``session.feedback_turn``) run with a method's
pure-JAX form (``jax_form``) on a data source's face (``traced.Face``), cut
into the stages the runner (``drivers.jit_runner``) calls one by one, with
the host's work between them:

=====  =============  ==========================================  ========
turn   stage          what it computes                            host
=====  =============  ==========================================  ========
0      ``start``      the face's start and the method's init:     phrases
                      the T2V text's table key (``asks``)
0      ``show``       turn 0's composed query, its ranking        --
t>0    ``hear``       the stop rule and the user's decision       words
                      (``Face.hear``): what the host must write,
                      parse or encode before it is read
                      (``asks``)
t>0    ``decide``     the reading (``Face.read``) and the         phrases
                      method's plan: the table keys its
                      ranking reads (``asks``)
t>0    ``show``       the composed query, the ranking core,       --
                      the method's question, the turn's record
=====  =============  ==========================================  ========

Each stage is one kept program; its ``asks`` are the only arrays the host
reads before the turn's record (``jit_runner``); the rest of a stage's
results stay on the device for the next. Text encoding is a table lookup
(``Face.text``) of the method's channel texts as codes (``Face.code``).

With ``chunk_size`` a stage computes only the chunks of sessions still
searching (``session.stage``); every stage of a turn orders the sessions
alike (its stop rule reads the ranking state the turn starts from). The
``live_`` stages run ``decide`` and ``show`` on the sessions the host
names (``hear``'s ``active``, gathered into a bucket) and scatter the
results back. ``simulate_batch``, every turn as one ``lax.scan`` of
``session.feedback_turn`` on tables that hold all a batch reads, is the
tests' oracle.
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


def _start(config: traced.JitConfig, shared: _Shared, query):
  """Turn 0 before its ranking (stage ``start``): ``(started, asks)``,
  ``asks['needed']`` ``[2]`` the table keys its ranking reads (0: none)."""
  face = config.face
  start, face_state = face.start(shared.data, shared.tables, query)
  method_state, search = config.form.init(start)
  search_code = face.code(search) * config.form.t2v
  search_key = face.key(search_code, plan.T2V)
  covr_valid = jnp.asarray(config.form.covr if start.covr_valid is None
                           else start.covr_valid)
  started = dict(method=method_state, face=face_state,
                 search_code=search_code, search_key=search_key,
                 modification=start.modification, covr_valid=covr_valid)
  needed = jnp.where(search_code > 0, search_key, 0)
  return started, dict(needed=jnp.stack([needed, jnp.zeros_like(needed)]))


def _start_show(config: traced.JitConfig, shared: _Shared, query, started):
  """Turn 0 ranked (stage ``show``) from ``_start``'s ``started``:
  ``(carry, outputs)``."""
  face, data = config.face, shared.data
  ref = data.reference[query]
  covr = compose(config.composer, shared.composer_params,
                 ranking.gallery_row(data.gallery, ref, shared.split),
                 started['modification'])
  code, key = started['search_code'], started['search_key']
  inputs = ranking.TurnInputs(
      queries=jnp.stack([face.text(shared.tables, key), covr]),
      valid=jnp.stack([code > 0, started['covr_valid']]),
      exclude=ref, sigma=jnp.asarray(demotion.SIGMA_NEU),
      stop=jnp.asarray(False))
  state = ranking.start_step(config.loop, data.gallery,
                             ranking.init_state(config.loop), inputs,
                             split=shared.split)
  carry = SessionCarry(state=state, method=started['method'],
                       question=jnp.asarray(-1, jnp.int32),
                       asked=jnp.asarray(0, jnp.int32),
                       face=started['face'])
  needed = jnp.where(code > 0, key, 0)
  return carry, dict(shown=state.shown_ids, scores=state.shown_scores,
                     needed=jnp.stack([needed, jnp.zeros_like(needed)]))


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
  ``_channels``): ``(search, edit)``."""
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
  """``session.TurnLoop`` for one session in JAX (traced under vmap); the
  user's ``respond`` in the face's two parts, ``hear`` and ``read``."""

  def __init__(self, config: traced.JitConfig, shared: _Shared, query):
    self.config, self.shared, self.query = config, shared, query
    self.reference = shared.data.reference[query]
    self.target = shared.data.target[query]

  def still_searching(self, carry):
    return session.searching(carry.state, self.target)

  def _user(self, carry):
    """What the face's user reads besides the tables: its per-session
    state, the shown top-1 and the question shown with it."""
    return carry.face, jnp.maximum(carry.state.shown_ids[0], 0), carry.question

  def hear(self, carry, turn):
    """The user's decision and what the host must add for its reading:
    ``(heard, asks)``."""
    return self.config.face.hear(self.shared.data, self.shared.tables,
                                 self.shared.seed_key, self.query, turn,
                                 *self._user(carry))

  def read(self, carry, heard):
    """``(observation, face state, own record outputs)``."""
    return self.config.face.read(self.shared.data, self.shared.tables,
                                 self.query, heard, *self._user(carry))

  def respond(self, carry, turn, active):
    del active
    heard, _ = self.hear(carry, turn)
    return self.read(carry, heard)

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
    return dataclasses.replace(carry, state=ranking.turn_step(
        self.config.loop, shared.data.gallery, carry.state, inputs,
        split=shared.split))

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


def _hear(config, shared, query, carry, turn):
  """Stage ``hear`` of feedback turn ``turn``: ``(heard, asks)``, ``asks``
  the face's and ``active`` (the stop rule)."""
  loop = _JitLoop(config, shared, query)
  heard, asks = loop.hear(carry, turn)
  return heard, dict(asks, active=loop.still_searching(carry))


def _decide(config, shared, query, carry, heard):
  """Stage ``decide``: the reading of ``heard`` and the method's plan,
  ``(decided, asks)``, ``asks['needed']`` ``[2]`` the keys its ranking
  reads (0: none)."""
  loop = _JitLoop(config, shared, query)
  active = loop.still_searching(carry)
  observation = loop.read(carry, heard)
  carry, turn_plan = loop.plan(carry, observation, active)
  obs, _, own = observation
  needed = _needed(_channels(config.face, turn_plan))
  return (carry, obs, own, turn_plan), dict(needed=jnp.stack(
      [jnp.where(active, k, 0) for k in needed]))


def _show(config, shared, query, decided):
  """Stage ``show``: the turn ``decided`` ranked, the method's question
  and the turn's record, ``(carry, outputs)`` (the plan left the ranking
  state, which the stop rule reads, as the turn found it)."""
  carry, obs, own, turn_plan = decided
  loop = _JitLoop(config, shared, query)
  return session.show(loop, carry, (obs, None, own), turn_plan,
                      loop.still_searching(carry))


def _stopped_turn(config: traced.JitConfig, carry: SessionCarry):
  """``_show`` of a session that has stopped, without the work."""
  carry = dataclasses.replace(carry,
                              state=ranking.carry_forward(carry.state))
  zero = jnp.zeros((), jnp.int32)
  return carry, _turn_outputs(
      carry, jnp.asarray(False), zero + plan.STOP,
      zero + demotion.SIGMA_NEU, zero, zero, zero, zero, zero - 1,
      config.face.stopped())


def simulate_batch(config: traced.JitConfig, data: plan.JaxData, tables,
                   composer_params, queries, seed_key) -> traced.JitTrace:
  """A batch of sessions, one per entry of ``queries`` ``[S]``, every turn
  in one ``lax.scan`` of ``session.feedback_turn`` (every session computes
  every turn) on ``tables`` that hold all the batch reads (the tables a
  run of ``jit_runner`` ends with): the tests' oracle for the staged run."""
  shared = _Shared(data, tables, composer_params, seed_key)

  def one(query):
    started, _ = _start(config, shared, query)
    carry, first = _start_show(config, shared, query, started)
    loop = _JitLoop(config, shared, query)
    carry, outs = jax.lax.scan(
        lambda c, t: session.feedback_turn(loop, c, t), carry,
        jnp.arange(1, config.loop.num_turns + 1))
    return first, outs

  first, outs = jax.vmap(one)(queries)
  needed = jnp.concatenate([
      first['needed'][:, None],
      jnp.stack([outs['needed_search'], outs['needed_edit']], axis=2)],
                           axis=1)
  scores = jnp.concatenate([first['scores'][:, None], outs['scores']],
                           axis=1)
  return traced.JitTrace(
      displayed=jnp.concatenate([first['shown'][:, None], outs['shown']],
                                axis=1),
      top_scores=scores[:, :, 0], scores=scores,
      active=outs['active'], action=outs['action'], sigma=outs['sigma'],
      search=outs['search'], edit=outs['edit'], needed=needed,
      fired=outs['fired'], asked=outs['asked'],
      questions=outs['questions'], own=outs['own'])


# The stages over a batch, each ``(config, data, tables, composer_params,
# seed_key, turn, queries [S], *per session)``: the config, data, tables,
# parameters, key and turn shared by the batch's sessions, the rest split
# over them (``jit_runner`` splits them over a mesh's session axis).
# ``chunk_size``: see the module's docstring; ``split``: ``data.gallery``
# is this device's rows of a split gallery (inside ``shard_map``).

def start_batch(config, data, tables, composer_params, seed_key, turn,
                queries, split=None):
  """Stage ``start`` of a batch: ``(started, asks)``."""
  del turn
  shared = _Shared(data, tables, composer_params, seed_key, split)
  return jax.vmap(functools.partial(_start, config, shared))(queries)


def start_show_batch(config, data, tables, composer_params, seed_key, turn,
                     queries, started, split=None):
  """Turn 0's stage ``show``: ``(carry, outputs)``."""
  del turn
  shared = _Shared(data, tables, composer_params, seed_key, split)
  return jax.vmap(functools.partial(_start_show, config, shared))(queries,
                                                                  started)


def hear_batch(config, data, tables, composer_params, seed_key, turn,
               queries, carry, chunk_size=None, split=None):
  """Stage ``hear`` of feedback turn ``turn``: ``(heard, asks)``."""
  shared = _Shared(data, tables, composer_params, seed_key, split)
  return session.stage(
      lambda q, c: _hear(config, shared, q, c, turn), None,
      data.target[queries], queries, carry, (), chunk_size)


def decide_batch(config, data, tables, composer_params, seed_key, turn,
                 queries, carry, heard, chunk_size=None, split=None):
  """Stage ``decide``: ``(decided, asks)``."""
  del turn
  shared = _Shared(data, tables, composer_params, seed_key, split)
  return session.stage(
      functools.partial(_decide, config, shared), None,
      data.target[queries], queries, carry, (heard,), chunk_size)


def show_batch(config, data, tables, composer_params, seed_key, turn,
               queries, carry, decided, chunk_size=None, split=None):
  """Stage ``show`` of a feedback turn: ``(carry, outputs)``; a stopped
  session's is ``_stopped_turn`` of the turn's ``carry``."""
  del turn
  shared = _Shared(data, tables, composer_params, seed_key, split)
  return session.stage(
      lambda q, c, d: _show(config, shared, q, d),
      lambda c, d: _stopped_turn(config, c),
      data.target[queries], queries, carry, (decided,), chunk_size)


def _take(tree, live):
  """``tree``'s rows ``live`` (an index past the last row: the last)."""
  return jax.tree.map(lambda x: jnp.take(x, live, axis=0, mode='clip'),
                      tree)


def live_decide_batch(config, data, tables, composer_params, seed_key, turn,
                      queries, carry, heard, live, split=None):
  """Stage ``decide`` of the sessions ``live`` ``[B]`` alone (indices into
  the batch; the batch's size pads a bucket): ``(decided, asks)``, each
  ``[B, ...]``."""
  return decide_batch(config, data, tables, composer_params, seed_key, turn,
                      _take(queries, live), _take(carry, live),
                      _take(heard, live), split=split)


def live_show_batch(config, data, tables, composer_params, seed_key, turn,
                    queries, carry, decided, live, split=None):
  """Stage ``show`` of the sessions ``live`` alone (``decided``:
  ``live_decide_batch``'s), the others' turns ``_stopped_turn``:
  ``(carry, outputs)`` of the whole batch."""
  carry_live, outs_live = show_batch(
      config, data, tables, composer_params, seed_key, turn,
      _take(queries, live), _take(carry, live), decided, split=split)
  carry, outs = jax.vmap(functools.partial(_stopped_turn, config))(carry)
  put = lambda whole, part: whole.at[live].set(part, mode='drop')
  return (jax.tree.map(put, carry, carry_live),
          jax.tree.map(put, outs, outs_live))


# Compiled once per shape and per non-numeric settings: the traced ones
# (``config_pytree``: rrf_k, gamma, kappa, the user's rates, ...) are
# arguments, and so is ``turn``, so every turn of a run shares each stage's
# program.
simulate = executables.jit(simulate_batch)
start = executables.jit(start_batch)
start_show = executables.jit(start_show_batch)
hear = executables.jit(hear_batch, static_argnames=('chunk_size',))
decide = executables.jit(decide_batch, static_argnames=('chunk_size',))
show = executables.jit(show_batch, static_argnames=('chunk_size',))
live_decide = executables.jit(live_decide_batch)
live_show = executables.jit(live_show_batch)
