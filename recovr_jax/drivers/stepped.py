"""A jitted face that steps the host's user and method one turn at a time.

For a data source whose user and reasoning exist only on the host (real
files: the caption user compares captions, the free-text reasoner and the
language models write text), the jitted driver (``drivers.jit_runner``) still
runs every session's turns in JAX, ``vmap``-ped over sessions, with the
ranking core (retrieval, TW-RRF, rank-cap, the stop rule); what the host
would compute at a turn is tabulated like the world's words:

* the table holds each session's channel queries, their validity, sigma and
  the user's action per turn (``StepTables``); the face reads them
  (``StepFace``) and ``TabulatedForm`` passes them on as the turn's plan;
* after turn ``t``'s ``hear`` stage, the host (``_Stepper``, the host
  driver itself: ``host_driver.HostLoop``'s ``respond``, ``plan``, ``ask``
  and ``record``) lets the user answer the list of turn ``t - 1`` and the
  method plan turn ``t``; the turn is then read and ranked in JAX, and the
  host's method asks its question about the new list and records the
  turn. Each turn is ranked once, as on the host driver.

The user and the method are called with the same lists, in the same order
and batches as by the host driver, so the lists and records equal the host
driver's (tested); only the ranking moves into JAX.
"""
import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import demotion
from recovr_jax.drivers import host_driver
from recovr_jax.protocol import environment
from recovr_jax.protocol import traced
from recovr_jax.protocol import plan


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepTables:
  """A batch's tabulated turns; row ``1 + b * (T + 1) + t`` holds turn ``t``
  of the batch's ``b``-th session (row 0: nothing)."""
  row_of_query: jax.Array  # [Q] int32 the session's position b (-1: none)
  t2v: jax.Array           # [R, D] float32 T2V queries
  covr: jax.Array          # [R, D] float32 composed queries
  valid: jax.Array         # [R, 2] bool channels used
  sigma: jax.Array         # [R] int32
  action: jax.Array        # [R] int32 the user's action (plan.ACTIONS)
  filled: jax.Array        # [R] bool the host has planned this turn


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TabulatedStep:
  """The stepped face's observation: the turn's plan the host tabulated."""
  plan: plan.JaxPlan


@dataclasses.dataclass(frozen=True)
class TabulatedForm(plan.JaxForm):
  """A method's host step as read from the table: the plan the face found
  (``TabulatedStep.plan``). The host asks the questions."""
  READS: ClassVar[type] = TabulatedStep
  t2v: bool = True
  covr: bool = True

  def init(self, start):
    return {}, start.init_search

  def step(self, state, obs):
    return state, obs.info.plan


@dataclasses.dataclass(frozen=True)
class StepFace(traced.Face):
  """Turns read from ``StepTables``; a text code is a table row (0: none)."""
  OBSERVATION: ClassVar[type] = TabulatedStep
  num_turns: int

  def _row(self, tables, query, turn):
    return 1 + tables.row_of_query[query] * (self.num_turns + 1) + turn

  def _search(self, tables, row, use):
    return jnp.where(use & tables.valid[row, plan.T2V], row - 1,
                     -1)[None].astype(jnp.int32)

  def start(self, data, tables, query):
    del data
    row = self._row(tables, query, 0)
    return plan.JaxStart(
        init_search=self._search(tables, row, True),
        modification_attrs=jnp.full((1,), -1, jnp.int32),
        modification=tables.covr[row],
        covr_valid=tables.valid[row, plan.COVR]), jnp.zeros((), jnp.int32)

  def code(self, assignment):
    return (assignment[0] + 1).astype(jnp.int32)

  def key(self, code, channel):
    del channel  # only T2V texts are looked up; CoVR queries come whole
    return code

  def text(self, tables, key):
    return tables.t2v[key]

  def hear(self, data, tables, seed_key, query, turn, state, top1,
           question):
    # The host plans every searching session's turn (``_Stepper.heard``).
    del data, tables, seed_key, query, state, top1, question
    return dict(turn=jnp.asarray(turn, jnp.int32)), {}

  def read(self, data, tables, query, heard, state, top1, question):
    row = self._row(tables, query, heard['turn'])
    filled = tables.filled[row]
    turn_plan = plan.JaxPlan(
        search=self._search(tables, row, filled), edit=jnp.full((1,), -1),
        use_search=True, use_edit=filled & tables.valid[row, plan.COVR],
        sigma=jnp.where(filled, tables.sigma[row], demotion.SIGMA_NEU),
        anchor=top1, avoid=jnp.zeros((1, 0), bool),
        edit_embedding=tables.covr[row])
    obs = plan.JaxObservation(
        shown=top1, reference=data.reference[query],
        action=jnp.where(filled, tables.action[row], plan.MODIFY),
        asked=question, info=TabulatedStep(plan=turn_plan))
    return obs, state, dict(filled=filled)

  def record(self, outputs, active):
    return dict(filled=outputs['filled'] | ~active)

  def stopped(self):
    return dict(filled=jnp.asarray(True))


@dataclasses.dataclass(frozen=True)
class _Settled:
  """What the host driver reads of the ranking at a ranked turn ``t``
  (stands in for a batch of ``ranking.SessionState``)."""
  shown_ids: np.ndarray     # [S, K]
  shown_scores: np.ndarray  # [S, K]
  turn: np.ndarray          # [S] all t
  fired: np.ndarray         # [S, T+1], column t from the trace

  @classmethod
  def of(cls, turn: int, outs: dict, width: int):
    """Of turn ``turn``'s outputs ``outs``, ``fired`` ``width`` turns
    wide."""
    s = len(outs['shown'])
    fired = np.zeros((s, width), bool)
    if turn:
      fired[:, turn] = outs['fired']
    return cls(shown_ids=outs['shown'], shown_scores=outs['scores'],
               turn=np.full(s, turn), fired=fired)


class StepEnvironment(traced.Environment):
  """The ``traced.Environment`` of one batch: the host environment, its
  method, user and context, whose turns ``_Stepper`` tabulates."""

  def __init__(self, env: environment.Environment, method, sessions, user, ctx,
               base):
    self.host = host_driver.HostLoop(env, method, sessions, user, ctx,
                                method.ranking(base))
    searchable = env.searchable
    self.data = plan.JaxData(
        gallery=jnp.asarray(env.gallery[:searchable], jnp.float32),
        memory=plan.JaxMemory(
            caption_attrs=jnp.zeros((searchable, 0), jnp.int32),
            asked_with_value=jnp.zeros((0, 0), jnp.int32),
            asked_plain=jnp.zeros((0,), jnp.int32),
            asked_open=jnp.asarray(-1, jnp.int32)),
        reference=jnp.asarray(env.reference, jnp.int32),
        target=jnp.asarray(env.target, jnp.int32),
        modification=jnp.zeros((len(env.target), 0), jnp.float32))
    self.composer, self.composer_params = 'given', None
    self.stepper = None

  def config(self, base):
    """The run's ``traced.JitConfig`` (the host driver's ranking core)."""
    return traced.JitConfig(
        loop=self.host.config,
        face=StepFace(num_turns=base.num_turns), form=TabulatedForm(),
        composer='given')

  def filler(self, config, seed, num_sessions, run_sessions=None):
    del seed, run_sessions  # one batch's steps, no tables kept
    if num_sessions != len(self.host.sessions):
      raise ValueError(f'this environment tabulates {len(self.host.sessions)}'
                       f' sessions, not {num_sessions}')
    self.stepper = _Stepper(self.host, config.loop.num_turns)
    return self.stepper

  def result(self, trace) -> environment.BatchResult:
    """The host driver's ``BatchResult`` of the run's trace."""
    return environment.BatchResult(
        displayed=trace.displayed, top_scores=trace.top_scores,
        records=self.stepper.records,
        scores=np.asarray(trace.scores)[..., :environment.SHOWN])


class _Stepper:
  """The tables of one batch, filled turn by turn by the host driver
  (``traced.Filler``)."""

  READS_LISTS = True  # the host's method asks about each list

  def __init__(self, driver: host_driver.HostLoop, num_turns: int):
    self.driver, self.num_turns = driver, num_turns
    env, sessions = driver.env, driver.sessions
    s, dim = len(sessions), env.gallery.shape[1]
    rows = 1 + s * (num_turns + 1)
    row_of_query = np.full(len(env.target), -1, np.int32)
    row_of_query[sessions] = np.arange(s)
    self.tables = dict(
        row_of_query=row_of_query, t2v=np.zeros((rows, dim), np.float32),
        covr=np.zeros((rows, dim), np.float32),
        valid=np.zeros((rows, 2), bool),
        sigma=np.full(rows, demotion.SIGMA_NEU, np.int32),
        action=np.zeros(rows, np.int32), filled=np.zeros(rows, bool))
    self.carry, turn_plan, first = host_driver.start_plan(driver)
    self._write(0, np.arange(s), turn_plan, ['stop'] * s)
    self.records = [[rec] for rec in first]
    self.pending = None    # (observation, plan, active) of the last turn
    self.last = None       # the last ranked turn's outputs

  def _write(self, turn, rows, turn_plan, actions):
    if turn_plan.penalty is not None and np.any(turn_plan.penalty[rows]):
      raise ValueError(
          f'method {self.driver.method.name!r} wrote a per-video penalty, '
          'which the jitted face of this data source cannot carry; use '
          '--simulation=host')
    at = 1 + rows * (self.num_turns + 1) + turn
    t = self.tables
    t['t2v'][at] = turn_plan.queries[rows, plan.T2V]
    t['covr'][at] = turn_plan.queries[rows, plan.COVR]
    t['valid'][at] = turn_plan.valid[rows]
    t['sigma'][at] = turn_plan.sigma[rows]
    t['action'][at] = [plan.ACTIONS.index(a) for a in actions]
    t['filled'][at] = True

  def arrays(self):
    return StepTables(**{k: jnp.asarray(v) for k, v in self.tables.items()})

  def heard(self, turn: int, active, asks) -> str:
    """The host's user answers the list of turn ``turn - 1`` and its
    method plans turn ``turn``."""
    del asks
    driver = self.driver
    carry = dataclasses.replace(self.carry, ranking=_Settled.of(
        turn - 1, self.last, turn + 1))
    fb = driver.respond(carry, turn, active)
    carry, turn_plan = driver.plan(carry, fb, active)
    self._write(turn, fb.rows, turn_plan,
                [fb.responses[i].action for i in fb.rows])
    self.carry = carry
    self.pending = (fb, turn_plan, active)
    return f'planned turn {turn} on the host ({len(fb.rows)} sessions)'

  def planned(self, turn: int, active, needed) -> str:
    del turn, active, needed  # the host's plans hold their queries
    return ''

  def shown(self, turn: int, outs: dict):
    """Turn ``turn`` was ranked: the host's method asks its question
    about the list, and the turn is recorded."""
    self.last = outs
    if turn == 0:
      return
    driver = self.driver
    fb, turn_plan, active = self.pending
    carry = dataclasses.replace(self.carry,
                                ranking=_Settled.of(turn, outs, turn + 1))
    carry = driver.ask(carry, active)
    for i, rec in enumerate(driver.record(carry, fb, turn_plan, active)):
      self.records[i].append(rec)
    self.carry = dataclasses.replace(carry, questions=carry.new_questions)
