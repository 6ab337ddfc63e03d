"""The host driver: every method, any reasoner, any user.

The user, the method (its reasoning and text encoding) and the record run in
Python, batched over a batch's sessions; the ranking core
(``ranking.turn_step``) is one jitted function vmapped over the batch. Every
method meets the same user, targets, turn-0 ranking and stop rule
(``session.feedback_turn``). ``OnHost`` is the driver of
``--simulation=host``; ``HostLoop`` the turn's callbacks (``session.TurnLoop``),
which the study and the stepped jitted driver use too.
"""

import dataclasses
import functools

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import executables
from recovr_jax import profiling
from recovr_jax.drivers import driver
from recovr_jax.protocol import environment
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.protocol import session


@executables.jit
def _start(config, gallery, states, inputs):
  step = functools.partial(ranking.start_step, config)
  # config and gallery shared; state and inputs per session.
  return jax.vmap(step, in_axes=(None, 0, 0))(gallery, states, inputs)


@executables.jit
def _turn(config, gallery, states, inputs):
  step = functools.partial(ranking.turn_step, config)
  return jax.vmap(step, in_axes=(None, 0, 0))(gallery, states, inputs)


def _inputs(turn_plan: plan.TurnPlan, reference, stop):
  return ranking.TurnInputs(
      queries=jnp.asarray(turn_plan.queries, jnp.float32),
      valid=jnp.asarray(turn_plan.valid),
      exclude=jnp.asarray(reference, jnp.int32),
      sigma=jnp.asarray(turn_plan.sigma, jnp.int32), stop=jnp.asarray(stop),
      penalty=None if turn_plan.penalty is None else jnp.asarray(
          turn_plan.penalty, jnp.float32))


@dataclasses.dataclass
class _Carry:
  """A batch between turns (host values; ``ranking`` is batched JAX)."""
  ranking: ranking.SessionState       # [S, ...]
  method_state: object
  questions: list                     # [S] question shown with the list
  asked: np.ndarray                   # [S] int questions asked so far
  new_questions: list                 # [S] asked with this turn's list


@dataclasses.dataclass(frozen=True)
class _Feedback:
  rows: np.ndarray                    # [B] sessions still searching
  shown: np.ndarray                   # [B] their displayed top-1
  responses: dict                     # row -> user feedback


class HostLoop:
  """``session.TurnLoop`` over a batch of sessions in NumPy."""

  def __init__(self, env, method, sessions, user, ctx, config):
    self.env, self.method, self.user, self.ctx = env, method, user, ctx
    self.config = config
    self.sessions = np.asarray(sessions)
    self.reference = np.asarray(env.reference)[self.sessions]
    self.target = np.asarray(env.target)[self.sessions]

  @functools.cached_property
  def gallery(self):
    """The searchable rows on the device (made on the first ranking)."""
    return jnp.asarray(self.env.gallery[:self.env.searchable])

  def still_searching(self, carry):
    return np.asarray(session.searching(carry.ranking, self.target))

  def respond(self, carry, turn, active):
    rows = np.flatnonzero(active)
    shown = np.asarray(carry.ranking.shown_ids[:, 0])[rows]
    with profiling.part('simulated user'):
      return _Feedback(rows, shown, {i: self.user(
          int(self.sessions[i]), turn, int(self.target[i]), int(g),
          carry.questions[i]) for i, g in zip(rows, shown)})

  def plan(self, carry, fb, active):
    s = len(self.sessions)
    full = plan.empty_plan(s, self.env.gallery.shape[1])
    if not len(fb.rows):
      return carry, full
    shown = fb.shown
    obs = plan.Observation(
        sessions=fb.rows,
        feedback=tuple(fb.responses[i].text for i in fb.rows),
        action=tuple(fb.responses[i].action for i in fb.rows),
        shown=shown,
        shown_caption=tuple(self.ctx.captions[g] for g in shown),
        question=tuple(carry.questions[i] for i in fb.rows))
    with profiling.part('method step (reasoning)'):
      state, turn_plan = self.method.step(self.ctx, carry.method_state, obs)
    full.queries[fb.rows] = turn_plan.queries
    full.valid[fb.rows] = turn_plan.valid
    full.sigma[fb.rows] = turn_plan.sigma
    if turn_plan.penalty is not None:
      n = self.env.searchable
      penalty = np.zeros((s, n), np.float32)
      penalty[fb.rows] = turn_plan.penalty[:, :n]
      full = dataclasses.replace(full, penalty=penalty)
    records = [{}] * s
    for j, i in enumerate(fb.rows):
      records[i] = turn_plan.records[j] if turn_plan.records else {}
    full = dataclasses.replace(full, records=tuple(records))
    return dataclasses.replace(carry, method_state=state), full

  def rank(self, carry, turn_plan, active):
    profiling.count(ranking.SCORED, len(active))  # every session's row
    with profiling.part('ranking'):
      states = profiling.sync(_turn(
          self.config, self.gallery, carry.ranking,
          _inputs(turn_plan, self.reference, ~active)))
    return dataclasses.replace(carry, ranking=states)

  def ask(self, carry, active):
    rows = np.flatnonzero(active)
    shown = plan.Shown(
        sessions=rows, ids=np.asarray(carry.ranking.shown_ids)[rows],
        scores=np.asarray(carry.ranking.shown_scores)[rows],
        asked=carry.asked[rows])
    with profiling.part('questions'):
      questions = self.method.question(self.ctx, carry.method_state, shown)
    new_questions = [None] * len(self.sessions)
    asked = carry.asked.copy()
    for i, q in zip(rows, questions):
      if q is not None:
        new_questions[i] = q
        asked[i] += 1
    return dataclasses.replace(carry, asked=asked,
                               new_questions=new_questions)

  def record(self, carry, fb, turn_plan, active):
    out = []
    turns = np.asarray(carry.ranking.turn)
    fired = np.asarray(carry.ranking.fired)
    for i in range(len(self.sessions)):
      if i in fb.responses:
        rec = plan.turn_record(
            int(turns[i]), fb.responses[i].action, fb.responses[i].text,
            turn_plan.sigma[i], fired[i, turns[i]], carry.questions[i],
            **turn_plan.records[i])
      else:
        rec = plan.stopped_record(int(turns[i]))
      rec['asked'] = carry.new_questions[i]
      out.append(rec)
    return out


def begin(env: environment.Environment, method,
          sessions: np.ndarray, user, ctx: plan.Context,
          base: ranking.LoopConfig, loop_class=None):
  """Turn 0 of ``sessions``: ``(host_loop, carry, records)``, where
  ``records`` holds each session's turn-0 record; ``feedback_turn(host_loop,
  carry, turn)`` below then runs each feedback turn (``run_batch``; the study
  app runs them one at a time as a participant answers). ``loop_class``: a
  ``HostLoop`` subclass (default ``HostLoop``)."""
  config = method.ranking(base)
  host_loop = (loop_class or HostLoop)(env, method, sessions, user, ctx,
                                      config)
  s = len(sessions)
  carry, turn_plan, records = start_plan(host_loop)
  profiling.count(ranking.SCORED, s)
  with profiling.part('ranking'):
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (s,) + x.shape),
                          ranking.init_state(config))
    states = profiling.sync(_start(config, host_loop.gallery, states, _inputs(
        turn_plan, host_loop.reference, np.zeros(s, bool))))
  return host_loop, dataclasses.replace(carry, ranking=states), records


def start_plan(host_loop: HostLoop):
  """Turn 0 of ``host_loop``'s sessions before any ranking: ``(carry
  without its ranking state, the method's plan, each session's turn-0
  record)``."""
  env, sessions = host_loop.env, host_loop.sessions
  s = len(sessions)
  mods = tuple(env.modification[i] for i in sessions)
  if env.query_embeddings is not None:
    covr0 = np.asarray(env.query_embeddings, np.float32)[sessions]
  else:
    # A session without a reference (a text start) searches with its text.
    covr0 = plan.anchored(env.gallery, env.compose, host_loop.reference,
                              env.encode_text(mods))
  with profiling.part('method step (reasoning)'):
    method_state, turn_plan = host_loop.method.init(host_loop.ctx, plan.Start(
        reference=host_loop.reference, modification=mods, covr_query=covr0))
  carry = _Carry(ranking=None, method_state=method_state,
                 questions=[None] * s, asked=np.zeros(s, int),
                 new_questions=[None] * s)
  return carry, turn_plan, [plan.start_record(mods[i]) for i in range(s)]


def feedback_turn(host_loop: HostLoop, carry: _Carry, turn: int):
  """One feedback turn: ``(carry, records)``; ``carry.questions`` are then
  the questions shown with the new lists."""
  carry, rows = session.feedback_turn(host_loop, carry, turn)
  return dataclasses.replace(carry, questions=carry.new_questions), rows


def run_batch(env: environment.Environment, method,
              sessions: np.ndarray, user, ctx: plan.Context,
              base: ranking.LoopConfig) -> environment.BatchResult:
  """Runs ``method`` on the composed queries ``sessions`` (indices).

  Args:
    env: the environment.
    method: a ``methods`` method.
    sessions: ``[S]`` indices into ``env``'s queries; they also seed the
      user's draws, so a session meets the same user under every method.
    user: ``(session, turn, target_id, shown_id, question) -> Feedback``.
    ctx: what the method may read (Progress Memory, encoders, reasoner).
    base: the ranking core's hyperparameters (T, W, K, k, kappa, ...).
  """
  host_loop, carry, first = begin(env, method, sessions, user, ctx, base)
  shown = [np.asarray(carry.ranking.shown_ids)]
  top_scores = [np.asarray(carry.ranking.shown_scores[:, 0])]
  shown_top = environment.SHOWN
  scores = [np.asarray(carry.ranking.shown_scores[:, :shown_top])]
  records = [[rec] for rec in first]
  for turn in range(1, host_loop.config.num_turns + 1):
    carry, rows = feedback_turn(host_loop, carry, turn)
    shown.append(np.asarray(carry.ranking.shown_ids))
    top_scores.append(np.asarray(carry.ranking.shown_scores[:, 0]))
    scores.append(np.asarray(carry.ranking.shown_scores[:, :shown_top]))
    for i, rec in enumerate(rows):
      records[i].append(rec)
  return environment.BatchResult(
      displayed=np.stack(shown, axis=1),
      top_scores=np.stack(top_scores, axis=1), records=records,
      scores=np.stack(scores, axis=1))


class OnHost(driver.Driver):
  """A batch a turn at a time on the host; a batch whose reasoning raises
  is run again session by session, and the sessions that raise are
  recorded with their error."""

  NAME = 'host'
  STEPWISE = True

  def run_batch(self, run, method, batch, loop, label, errors):
    env, user, ctx = run.env, run.user, run.ctx
    try:
      return run_batch(env, method, batch, user, ctx, loop)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('%s raised %r; retrying per session', label, e)
    shape = (len(batch), loop.num_turns + 1, loop.list_length)
    displayed = np.full(shape, -1, np.int32)
    top_scores = np.full(shape[:2], -np.inf, np.float32)
    scores = np.full(shape[:2] + (min(environment.SHOWN, shape[2]),),
                     -np.inf, np.float32)
    records = []
    for i, sess in enumerate(batch):
      try:
        r = run_batch(env, method, np.array([sess]), user, ctx, loop)
        displayed[i], top_scores[i] = r.displayed[0], r.top_scores[0]
        scores[i] = r.scores[0]
        records.append(r.records[0])
      except Exception as e:  # pylint: disable=broad-except
        errors[str(i)] = f'{type(e).__name__}: {e}'
        records.append([])
    return environment.BatchResult(displayed=displayed,
                                   top_scores=top_scores, records=records,
                                   scores=scores)
