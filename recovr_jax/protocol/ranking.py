"""One interactive turn's ranking core, pure and jit-able (docs/definitions.md
§1).

``turn_step`` retrieves every channel's list, pushes them into the Result
Memory ring, applies rank-cap over the ring, fuses, and applies rank-cap to
the fused list (placement ``all``, the default; placement ``current`` caps
only the current turn's lists before fusion, the paper's sentence). It also
records whether rank-cap fired: whether it changed the list it is applied to
last (the fused list; under ``current``, one of the current turn's lists; a
single-list method's list). A turn whose window holds no valid list shows the
last list again, rank-capped. Write it per session and batch it by name:

    batched = jax.vmap(turn_step, in_axes=(None, None, 0, 0))
    # config and gallery shared; state and inputs per session

Sessions that have stopped keep their state: the last list carries forward.
"""

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from recovr_jax import config_pytree
from recovr_jax import config_tree
from recovr_jax.core import checks
from recovr_jax.core import demotion
from recovr_jax.core import fusion
from recovr_jax.core import retrieval
from recovr_jax.core import ring
from recovr_jax.core import sharding


PLACEMENTS = ('all', 'current')
# The profile's count of session-turns the ranking core scored against the
# gallery (each 2 x C x N x D FLOPs; ``profiling.count``), by either driver.
SCORED = 'ranking: session-turns scored'


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Static hyperparameters of the ranking core (hashable for jit)."""
  HELP_GROUP: ClassVar[str] = 'Methods and the protocol'
  #: T feedback turns.
  num_turns: int = config_tree.setting(5, sweep=True)
  #: W, the TW-RRF window.
  window: int = config_tree.setting(5, sweep=True)
  num_channels: int = 2         # C: 0 = T2V, 1 = CoVR
  #: K, the candidate pool.
  list_length: int = config_tree.setting(100, sweep=True)
  # None: show channel 1's list as is. A choice (read by value under jit:
  # the fusion variants share one compiled program).
  fusion_method: str | None = config_pytree.choice('tw_rrf', fusion.METHODS)
  #: k, the RRF constant.
  rrf_k: float = config_tree.setting(60.0, sweep=True, traced=True)
  #: TW-RRF recency weights.
  recency: str = config_tree.setting('linear', choices=fusion.RECENCIES,
                                     sweep=True)
  #: Decay of exp recency.
  gamma: float = config_tree.setting(0.5, sweep=True, traced=True)
  #: Rank-cap kappa after the user's sigma: neg, neu, pos
  #: (docs/definitions.md §3).
  kappa: tuple[int, int, int] = config_tree.setting(
      demotion.DEFAULT_KAPPA, sweep=True, traced=True,
      elements=('kappa_neg', 'kappa_neu', 'kappa_pos'),
      element_help=('Rank-cap after neg.', 'Rank-cap after neu.',
                    "Rank-cap after pos. The project's assumption, not a "
                    'paper value (the paper gives kappa_neg and kappa_neu '
                    'only).'))
  rank_cap: bool = config_pytree.switch(True)  # off: nothing is demoted
  #: Where rank-cap applies: all = every ring list and the fused list (a
  #: rejected top-1 never returns while another candidate exists); current
  #: = the current turn's lists before fusion only (the paper's sentence;
  #: docs/definitions.md §3).
  rank_cap_placement: str = config_tree.setting('all', choices=PLACEMENTS,
                                                sweep=True)
  # False: the top-1 just rejected gets no cap of its own; only top-1s shown
  # before it are demoted (the paper's reading of rank-cap without State
  # Reflection: it "can only react to stagnation"; docs/definitions.md §3).
  cap_just_rejected: bool = True
  num_ids: int | None = None    # gallery size, for the one-pass id sort
  #: The retrieval's score matmul precision (core/retrieval.py PRECISIONS):
  #: highest (exact float32), bf16x3 (three bfloat16 passes) or tf32 (one
  #: TF32 pass), each the named algorithm on every backend, for speed runs
  #: on accelerators; recorded in resolved_config.json. XLA:CPU computes
  #: bf16x3 in float32 and refuses tf32 (before any work).
  retrieval_precision: str = config_tree.setting(
      'highest', choices=tuple(retrieval.PRECISIONS))

  def __post_init__(self):
    if not config_pytree.concrete(self):
      return  # rebuilt from a pytree's leaves: checked when made
    problems = []  # every one, a line each
    for name in ('num_turns', 'window', 'num_channels', 'list_length') + (
        ('num_ids',) if self.num_ids is not None else ()):
      problem = checks.int_problem(name, getattr(self, name), 1)
      if problem:
        problems.append(problem)
    if self.fusion_method is not None and (
        self.fusion_method not in fusion.METHODS):
      problems.append(f'unknown fusion method {self.fusion_method!r}; valid '
                      f'choices: {", ".join(fusion.METHODS)}')
    if self.recency not in fusion.RECENCIES:
      problems.append(f'unknown recency {self.recency!r}; valid choices: '
                      f'{", ".join(fusion.RECENCIES)}')
    if self.rank_cap_placement not in PLACEMENTS:
      problems.append('unknown rank_cap_placement '
                      f'{self.rank_cap_placement!r}; valid choices: '
                      f'{", ".join(PLACEMENTS)}')
    if len(self.kappa) != 3 or any(
        checks.int_problem('kappa', k, 1) for k in self.kappa):
      problems.append(f'kappa (neg, neu, pos) must be three integers >= 1, '
                      f'got {self.kappa}')
    if not (math.isfinite(self.rrf_k) and self.rrf_k >= 0):
      problems.append(f'rrf_k must be a finite number >= 0, got {self.rrf_k}')
    if not (math.isfinite(self.gamma) and 0 < self.gamma <= 1):
      problems.append('gamma (the exp recency decay) must be in (0, 1], got '
                      f'{self.gamma}')
    if problems:
      raise ValueError('\n'.join(problems))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SessionState:
  """One session's ranking state."""
  ring: ring.ResultMemory  # [W, C, K] lists of the last W turns
  top1: jax.Array            # [T+1] int32 displayed top-1 per turn, -1 unseen
  shown_ids: jax.Array       # [K] int32 the displayed list of the last turn
  shown_scores: jax.Array    # [K] float32
  turn: jax.Array            # [] int32 the last executed turn
  stopped: jax.Array         # [] bool
  fired: jax.Array           # [T+1] bool rank-cap changed a list at turn t


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TurnInputs:
  """One session's inputs to a turn."""
  queries: jax.Array   # [C, D] float32 channel queries
  valid: jax.Array     # [C] bool, channels that have a query this turn
  exclude: jax.Array   # [] int32 gallery id removed from every list (v_ref)
  sigma: jax.Array     # [] int32 State Reflector's signal (0 neg, 1 neu, 2 pos)
  stop: jax.Array      # [] bool, the user stopped before this turn
  # [N] float32 subtracted from every channel's similarities (ReCoVR's
  # avoid constraints), or None.
  penalty: jax.Array | None = None


def init_state(config: LoopConfig) -> SessionState:
  k = config.list_length
  return SessionState(
      ring=ring.init_result_memory(config.window, config.num_channels, k),
      top1=jnp.full((config.num_turns + 1,), -1, jnp.int32),
      shown_ids=jnp.full((k,), -1, jnp.int32),
      shown_scores=jnp.full((k,), -jnp.inf, jnp.float32),
      turn=jnp.array(-1, jnp.int32), stopped=jnp.array(False),
      fired=jnp.zeros((config.num_turns + 1,), bool))


# Rows per block of the exact top-K (``retrieval.retrieve``'s block_size);
# a split gallery keeps the whole gallery's blocks (tests lower it). None:
# the backend's (``retrieval.sizes``: 16,384 on a CPU).
BLOCK_SIZE = None


def block_rows() -> int:
  """``BLOCK_SIZE``, or the backend's."""
  return retrieval.sizes()[0] if BLOCK_SIZE is None else BLOCK_SIZE


@dataclasses.dataclass(frozen=True)
class GallerySplit:
  """A gallery of ``num_valid`` rows whose rows are split over mesh axis
  ``axis`` of ``shards`` devices (inside ``shard_map``).

  The split keeps the whole gallery's blocks of the exact top-K
  (``block_size`` rows; ``retrieval.retrieve`` scores a block at a time, and
  a CPU's matmul kernel can round a row's score differently in blocks of
  other shapes): shard ``s`` holds full blocks ``s * per_shard ...`` (blocks
  past the last are padding) and then a slot for the gallery's last partial
  block, real only on the last shard. So every score is computed on the
  same shape as on the whole gallery, and the merged lists are equal bit
  for bit."""
  axis: str
  num_valid: int
  shards: int
  block_size: int

  @property
  def full_blocks(self) -> int:
    return self.num_valid // self.block_size

  @property
  def per_shard(self) -> int:
    return -(-self.full_blocks // self.shards)

  @property
  def rest(self) -> int:
    return self.num_valid % self.block_size

  @property
  def rows(self) -> int:
    """Rows each shard holds."""
    return self.per_shard * self.block_size + self.rest

  @classmethod
  def of(cls, axis: str, num_valid: int, shards: int,
         block_size: int | None = None) -> 'GallerySplit':
    """The split of ``num_valid`` rows with the whole gallery's blocks
    (``min(BLOCK_SIZE, num_valid)`` rows, as ``retrieve`` takes them)."""
    block = min(block_rows() if block_size is None else block_size,
                num_valid)
    return cls(axis, num_valid, shards, block)

  def global_ids(self, shard, xp=jnp):
    """``([rows] global id, [rows] bool real)`` of shard ``shard``'s rows."""
    i = xp.arange(self.rows)
    full = i < self.per_shard * self.block_size
    block = shard * self.per_shard + i // self.block_size
    ids = xp.where(full, block * self.block_size + i % self.block_size,
                   self.full_blocks * self.block_size + i -
                   self.per_shard * self.block_size)
    real = xp.where(full, block < self.full_blocks, shard == self.shards - 1)
    return ids, real

  def locate(self, ids):
    """``(shard, local row)`` of global ``ids`` (jnp)."""
    full = ids < self.full_blocks * self.block_size
    block = ids // self.block_size
    shard = jnp.where(full, block // max(self.per_shard, 1), self.shards - 1)
    local = jnp.where(full, (block % max(self.per_shard, 1)) *
                      self.block_size + ids % self.block_size,
                      self.per_shard * self.block_size + ids -
                      self.full_blocks * self.block_size)
    return shard, local


def gallery_row(gallery, i, split: GallerySplit | None = None):
  """Row ``i`` (a global id) of the gallery, whole or split: the shard that
  holds it contributes the row, the others zeros (an exact sum)."""
  if split is None:
    return gallery[i]
  shard, local = split.locate(i)
  mine = shard == jax.lax.axis_index(split.axis)
  row = jnp.where(mine, gallery[jnp.clip(local, 0, split.rows - 1)], 0.0)
  return jax.lax.psum(row, split.axis)


def _retrieve_split(config, gallery, queries, exclude, penalty,
                    split: GallerySplit):
  """``retrieval.retrieve`` over a split gallery: each shard's top-K of its
  rows (in the whole gallery's blocks; padding never enters), ids made
  global, gathered in shard order (lower ids first) and merged by one
  ``top_k``, whose lower-index tie rule gives the whole gallery's lists
  exactly, ties included."""
  c = queries.shape[0]
  here = jax.lax.axis_index(split.axis)
  ids_here, real = split.global_ids(here)
  # Padding rows score -inf (a penalty of +inf; real rows' penalty + 0.0
  # is the penalty itself).
  local_penalty = jnp.where(real, 0.0, jnp.inf)
  if penalty is not None:
    local_penalty = local_penalty + jnp.where(
        real, penalty[jnp.clip(ids_here, 0, split.num_valid - 1)], 0.0)
  shard, local = split.locate(exclude)
  local_exclude = jnp.where((exclude >= 0) & (shard == here), local, -1)
  local_ids, scores = retrieval.top_k_blocks(
      queries, gallery, jnp.broadcast_to(local_exclude, (c,)),
      k=config.list_length, block_size=split.block_size,
      group_size=retrieval.sizes()[1],
      penalty=jnp.broadcast_to(local_penalty, (c, split.rows)),
      precision=retrieval.precision_of(config.retrieval_precision))
  ids = jnp.where(scores == -jnp.inf, -1,
                  ids_here[jnp.clip(local_ids, 0, split.rows - 1)])
  return sharding.merge_shards(ids, scores, split.axis, config.list_length)


def _retrieve_channels(config, gallery, inputs, split=None):
  """Every channel's list; also returned unmasked for turn 0's display."""
  c, _ = inputs.queries.shape
  if split is not None:
    raw_ids, raw_scores = _retrieve_split(config, gallery, inputs.queries,
                                          inputs.exclude, inputs.penalty,
                                          split)
  else:
    penalty = None if inputs.penalty is None else jnp.broadcast_to(
        inputs.penalty, (c, gallery.shape[0]))
    raw_ids, raw_scores = retrieval.retrieve(
        inputs.queries, gallery, config.list_length,
        exclude=jnp.broadcast_to(inputs.exclude, (c,)), penalty=penalty,
        block_size=block_rows(), precision=config.retrieval_precision)
  # Without the barrier XLA:CPU recomputes the top-k for the masked and the
  # raw outputs separately (start_step was 10x slower than turn_step).
  raw_ids, raw_scores = jax.lax.optimization_barrier((raw_ids, raw_scores))
  ids = jnp.where(inputs.valid[:, None], raw_ids, -1)
  scores = jnp.where(inputs.valid[:, None], raw_scores, -jnp.inf)
  return ids, scores, raw_ids, raw_scores


def start_step(config: LoopConfig, gallery, state: SessionState,
               inputs: TurnInputs, shown_channel: int = 1,
               split: GallerySplit | None = None):
  """Turn 0: the valid channels' lists enter the ring; the list of
  ``shown_channel`` (the CoVR channel, shared by every method) is displayed
  unchanged, whether or not the method keeps that channel."""
  ids, scores, raw_ids, raw_scores = _retrieve_channels(config, gallery,
                                                        inputs, split)
  result_memory = ring.push(state.ring, ids, scores, inputs.valid)
  shown_ids = raw_ids[shown_channel]
  shown_scores = raw_scores[shown_channel]
  return dataclasses.replace(
      state, ring=result_memory, top1=state.top1.at[0].set(shown_ids[0]),
      shown_ids=shown_ids, shown_scores=shown_scores,
      turn=jnp.array(0, jnp.int32), stopped=jnp.array(False))


def turn_step(config: LoopConfig, gallery, state: SessionState,
              inputs: TurnInputs, split: GallerySplit | None = None
              ) -> SessionState:
  """A feedback turn ``t = state.turn + 1`` for one session."""
  turn = state.turn + 1
  ids, scores, _, _ = _retrieve_channels(config, gallery, inputs, split)
  result_memory = ring.push(state.ring, ids, scores, inputs.valid)
  demote, caps = demotion.demotion_set(state.top1, turn, inputs.sigma,
                                       kappa=config.kappa)
  if not config.cap_just_rejected:  # its own entry (age 0) left out
    just = jnp.arange(state.top1.shape[0]) == turn - 1
    demote = jnp.where(just, -1, demote)
    caps = jnp.where(just, 0, caps)
  # Without rank-cap nothing is demoted (a switch: one program for both).
  demote = jnp.where(config.rank_cap, demote, -1)
  caps = jnp.where(config.rank_cap, caps, 0)
  if config.fusion_method is None:
    # Single-list methods (the baselines): the CoVR list, rank-capped.
    shown_ids, shown_scores = demotion.rank_cap(ids[-1], scores[-1], demote,
                                                caps)
    fired = jnp.any(shown_ids != ids[-1])
  elif config.rank_cap_placement == 'current':
    capped = jax.vmap(demotion.rank_cap, in_axes=(0, 0, None, None))
    cur_ids, cur_scores = capped(ids, scores, demote, caps)
    fired = jnp.any(cur_ids != ids)
    # The ring keeps this turn's lists as rank-cap left them.
    result_memory = ring.push(state.ring, cur_ids, cur_scores, inputs.valid)
    shown_ids, shown_scores = fusion.fuse(
        result_memory.ids, result_memory.scores, result_memory.valid,
        method=config.fusion_method,
        k=config.rrf_k, recency=config.recency, gamma=config.gamma,
        num_ids=config.num_ids)
  else:
    shown_ids, shown_scores, fired = fusion.fuse_with_rank_cap(
        result_memory.ids, result_memory.scores, result_memory.valid, demote,
        caps,
        method=config.fusion_method, k=config.rrf_k, recency=config.recency,
        gamma=config.gamma, num_ids=config.num_ids, return_fired=True)
  # No valid list in the window (nothing to search for this turn, e.g.
  # static_rrf after feedback that names nothing): the last list is shown
  # again, rank-capped.
  last_ids, last_scores = demotion.rank_cap(state.shown_ids,
                                            state.shown_scores, demote, caps)
  empty = shown_ids[0] < 0
  fired = jnp.where(empty, jnp.any(last_ids != state.shown_ids), fired)
  shown_ids = jnp.where(empty, last_ids, shown_ids)
  shown_scores = jnp.where(empty, last_scores, shown_scores)
  new = SessionState(ring=result_memory,
                     top1=state.top1.at[turn].set(shown_ids[0]),
                     shown_ids=shown_ids, shown_scores=shown_scores,
                     turn=turn, stopped=jnp.array(False),
                     fired=state.fired.at[turn].set(fired & config.rank_cap))
  # A session that stopped carries its last list forward.
  stopped = state.stopped | inputs.stop
  return jax.tree.map(lambda a, b: jnp.where(stopped, a, b),
                      carry_forward(state), new)


def carry_forward(state: SessionState) -> SessionState:
  """A feedback turn of a session that has stopped: its last list is shown
  again (what ``turn_step`` does for a stopped session, without the work)."""
  turn = state.turn + 1
  return dataclasses.replace(
      state, top1=state.top1.at[turn].set(state.shown_ids[0]), turn=turn,
      stopped=jnp.array(True))
