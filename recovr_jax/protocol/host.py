"""The host driver: every method, any reasoner, any user.

The user, the method (its reasoning and text encoding) and the record run in
Python, batched over a batch's sessions; the ranking core
(``ranking.turn_step``) is one jitted function vmapped over the batch. Every
method meets the same user, targets, turn-0 ranking and stop rule
(``session.feedback_turn``).
"""

import dataclasses
import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import config_tree
from recovr_jax import profiling
from recovr_jax.protocol import plan as plan_lib
from recovr_jax.protocol import ranking
from recovr_jax.protocol import session


# The shown list's top, whose scores a batch keeps (trajectories'
# ``top10_scores``).
SHOWN = 10


@dataclasses.dataclass(frozen=True)
class Environment:
  """What a run reads: the gallery (Progress Memory, long-term part), the
  composed queries to answer, the encoders and the user's view."""
  gallery: np.ndarray                  # [N, D] float32 video embeddings
  captions: tuple[str, ...]            # [N] Progress Memory captions
  attributes: np.ndarray | None        # [N, A] the world's labels (the
                                       # simulated user's and the jitted
                                       # driver's view); None on real data
  reference: np.ndarray                # [Q] gallery ids
  target: np.ndarray                   # [Q] gallery ids
  modification: tuple[str, ...]        # [Q]
  encode_text: Callable[[Sequence[str]], np.ndarray]
  compose: Callable[[np.ndarray, np.ndarray], np.ndarray]
  # The same composer as a pure JAX function, for the jitted driver:
  # 'mlp' with its params, 'sum', or None.
  composer: str | None = None
  composer_params: object = None
  # [N] the videos' ids (file names on real data), for display and exports.
  video_ids: tuple[str, ...] | None = None
  # Rows [0, num_searchable) are retrieved; later rows are references only
  # (real data: CoVR's test gallery is the set of targets). None: all.
  num_searchable: int | None = None
  # [Q, D] precomputed turn-0 composed queries (real data), instead of
  # compose(v_ref, modification); None: composed.
  query_embeddings: np.ndarray | None = None
  # Annotation rows left out (--missing_ids=drop), each with its reason.
  dropped: tuple[dict, ...] = ()
  # [Q] the query each session repeats (the world's --query_repeats: the
  # per-query arrays above are tiled); None: session i is query i. The
  # bootstraps resample whole queries when queries repeat.
  query: np.ndarray | None = None

  @property
  def searchable(self) -> int:
    """How many gallery rows the ranking retrieves from."""
    return len(self.gallery) if self.num_searchable is None else (
        self.num_searchable)


@dataclasses.dataclass
class BatchResult:
  """Per-session records of one batch."""
  displayed: np.ndarray        # [S, T+1, K] int32 shown lists per turn
  top_scores: np.ndarray       # [S, T+1] float32 score of each shown top-1
  records: list[list[dict]]    # [S][turn] feedback, action, sigma, question
  scores: np.ndarray           # [S, T+1, SHOWN] float32 scores of the
                               # shown top SHOWN (the viewer's)


@config_tree.jit
def _start(config, gallery, states, inputs):
  step = functools.partial(ranking.start_step, config)
  # config and gallery shared; state and inputs per session.
  return jax.vmap(step, in_axes=(None, 0, 0))(gallery, states, inputs)


@config_tree.jit
def _turn(config, gallery, states, inputs):
  step = functools.partial(ranking.turn_step, config)
  return jax.vmap(step, in_axes=(None, 0, 0))(gallery, states, inputs)


def _inputs(plan: plan_lib.TurnPlan, reference, stop):
  return ranking.TurnInputs(
      queries=jnp.asarray(plan.queries, jnp.float32),
      valid=jnp.asarray(plan.valid), exclude=jnp.asarray(reference, jnp.int32),
      sigma=jnp.asarray(plan.sigma, jnp.int32), stop=jnp.asarray(stop),
      penalty=None if plan.penalty is None else jnp.asarray(plan.penalty,
                                                            jnp.float32))


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


class HostDriver:
  """``session.Driver`` over a batch of sessions in NumPy."""

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
    full = plan_lib.empty_plan(s, self.env.gallery.shape[1])
    if not len(fb.rows):
      return carry, full
    shown = fb.shown
    obs = plan_lib.Observation(
        sessions=fb.rows,
        feedback=tuple(fb.responses[i].text for i in fb.rows),
        action=tuple(fb.responses[i].action for i in fb.rows),
        shown=shown,
        shown_caption=tuple(self.ctx.captions[g] for g in shown),
        question=tuple(carry.questions[i] for i in fb.rows))
    with profiling.part('method step (reasoning)'):
      state, plan = self.method.step(self.ctx, carry.method_state, obs)
    full.queries[fb.rows] = plan.queries
    full.valid[fb.rows] = plan.valid
    full.sigma[fb.rows] = plan.sigma
    if plan.penalty is not None:
      n = self.env.searchable
      penalty = np.zeros((s, n), np.float32)
      penalty[fb.rows] = plan.penalty[:, :n]
      full = dataclasses.replace(full, penalty=penalty)
    records = [{}] * s
    for j, i in enumerate(fb.rows):
      records[i] = plan.records[j] if plan.records else {}
    full = dataclasses.replace(full, records=tuple(records))
    return dataclasses.replace(carry, method_state=state), full

  def rank(self, carry, plan, active):
    profiling.count(ranking.SCORED, len(active))  # every session's row
    with profiling.part('ranking'):
      states = profiling.sync(_turn(self.config, self.gallery, carry.ranking,
                                    _inputs(plan, self.reference, ~active)))
    return dataclasses.replace(carry, ranking=states)

  def ask(self, carry, active):
    rows = np.flatnonzero(active)
    shown = plan_lib.Shown(
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

  def record(self, carry, fb, plan, active):
    out = []
    turns = np.asarray(carry.ranking.turn)
    fired = np.asarray(carry.ranking.fired)
    for i in range(len(self.sessions)):
      if i in fb.responses:
        rec = plan_lib.turn_record(
            int(turns[i]), fb.responses[i].action, fb.responses[i].text,
            plan.sigma[i], fired[i, turns[i]], carry.questions[i],
            **plan.records[i])
      else:
        rec = plan_lib.stopped_record(int(turns[i]))
      rec['asked'] = carry.new_questions[i]
      out.append(rec)
    return out


def begin(env: Environment, method,
          sessions: np.ndarray, user, ctx: plan_lib.Context,
          base: ranking.LoopConfig, driver_class=None):
  """Turn 0 of ``sessions``: ``(driver, carry, records)``, where ``records``
  holds each session's turn-0 record; ``feedback_turn(driver, carry, turn)``
  below then runs each feedback turn (``run_batch``; the study app runs them
  one at a time as a participant answers). ``driver_class``: a
  ``HostDriver`` subclass (default ``HostDriver``)."""
  config = method.ranking(base)
  driver = (driver_class or HostDriver)(env, method, sessions, user, ctx,
                                        config)
  s = len(sessions)
  carry, plan, records = start_plan(driver)
  profiling.count(ranking.SCORED, s)
  with profiling.part('ranking'):
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (s,) + x.shape),
                          ranking.init_state(config))
    states = profiling.sync(_start(config, driver.gallery, states, _inputs(
        plan, driver.reference, np.zeros(s, bool))))
  return driver, dataclasses.replace(carry, ranking=states), records


def start_plan(driver: HostDriver):
  """Turn 0 of ``driver``'s sessions before any ranking: ``(carry without
  its ranking state, the method's plan, each session's turn-0 record)``."""
  env, sessions = driver.env, driver.sessions
  s = len(sessions)
  mods = tuple(env.modification[i] for i in sessions)
  if env.query_embeddings is not None:
    covr0 = np.asarray(env.query_embeddings, np.float32)[sessions]
  else:
    # A session without a reference (a text start) searches with its text.
    covr0 = plan_lib.anchored(env.gallery, env.compose, driver.reference,
                              env.encode_text(mods))
  with profiling.part('method step (reasoning)'):
    method_state, plan = driver.method.init(driver.ctx, plan_lib.Start(
        reference=driver.reference, modification=mods, covr_query=covr0))
  carry = _Carry(ranking=None, method_state=method_state,
                 questions=[None] * s, asked=np.zeros(s, int),
                 new_questions=[None] * s)
  return carry, plan, [plan_lib.start_record(mods[i]) for i in range(s)]


def feedback_turn(driver: HostDriver, carry: _Carry, turn: int):
  """One feedback turn: ``(carry, records)``; ``carry.questions`` are then
  the questions shown with the new lists."""
  carry, rows = session.feedback_turn(driver, carry, turn)
  return dataclasses.replace(carry, questions=carry.new_questions), rows


def run_batch(env: Environment, method,
              sessions: np.ndarray, user, ctx: plan_lib.Context,
              base: ranking.LoopConfig) -> BatchResult:
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
  driver, carry, first = begin(env, method, sessions, user, ctx, base)
  shown = [np.asarray(carry.ranking.shown_ids)]
  top_scores = [np.asarray(carry.ranking.shown_scores[:, 0])]
  scores = [np.asarray(carry.ranking.shown_scores[:, :SHOWN])]
  records = [[rec] for rec in first]
  for turn in range(1, driver.config.num_turns + 1):
    carry, rows = feedback_turn(driver, carry, turn)
    shown.append(np.asarray(carry.ranking.shown_ids))
    top_scores.append(np.asarray(carry.ranking.shown_scores[:, 0]))
    scores.append(np.asarray(carry.ranking.shown_scores[:, :SHOWN]))
    for i, rec in enumerate(rows):
      records[i].append(rec)
  return BatchResult(displayed=np.stack(shown, axis=1),
                     top_scores=np.stack(top_scores, axis=1),
                     records=records, scores=np.stack(scores, axis=1))
