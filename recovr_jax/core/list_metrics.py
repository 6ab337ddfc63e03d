"""Metrics over displayed lists (docs/definitions.md §6).

Dimension legend: ``S`` sessions, ``T + 1`` turns (turn 0 and ``T`` feedback
turns), ``K`` displayed list length. The session bootstrap of these metrics:
``core.resampling``.
A target absent from a list of length ``K`` has rank ``K + 1`` (censored), so
mean ranks and BRI are censored at ``log(K + 1)``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from recovr_jax.core import checks

class Rate(NamedTuple):
  """A rate with its numerator and denominator (``rate`` is NaN if 0/0)."""
  rate: jax.Array   # [] float32
  count: jax.Array  # [] int32
  total: jax.Array  # [] int32


class FailureModes(NamedTuple):
  """Failure-mode rates over active transitions ``t-1 -> t``."""
  drift: Rate              # r_t > r_{t-1}
  stagnation: Rate         # r_t >= r_{t-1}
  repeated_top1: Rate      # top1_t == top1_{t-1}
  improvement: Rate        # r_t < r_{t-1}
  recovery: Rate           # r_{t+1} < r_t given r_t >= r_{t-1}, active at t+1


def target_ranks(displayed, targets):
  """1-based rank of each session's target in each turn's displayed list.

  Args:
    displayed: ``[S, T+1, K]`` integer displayed ids, ``-1`` padding.
    targets: ``[S]`` non-negative integer target ids.

  Returns:
    ``[S, T+1]`` int32 ranks, ``K + 1`` where the target is absent.
  """
  displayed = checks.array('displayed', displayed, 3, 'int')
  checks.gallery_ids('displayed', displayed)
  targets = checks.array('targets', targets, 1, 'int')
  s, _, _ = displayed.shape
  checks.shape('targets', targets, (s,))
  checks.non_negative('targets', targets)
  return _target_ranks(displayed, targets)


@jax.jit
def _target_ranks(displayed, targets):
  _, _, k = displayed.shape
  hit = (displayed == targets[:, None, None]) & (displayed >= 0)
  first = jnp.argmax(hit, axis=-1)
  return jnp.where(jnp.any(hit, axis=-1), first + 1, k + 1).astype(jnp.int32)


def recall_at_k(ranks, k: int):
  """``[T+1]`` float32 share of sessions whose target rank is ``<= k``."""
  ranks = checks.array('ranks', ranks, 2, 'int')
  checks.ranks('ranks', ranks)
  k = checks.positive_int('k', k)
  return jnp.mean(jnp.asarray(ranks) <= k, axis=0, dtype=jnp.float32)


def bri(ranks):
  """Best log Rank Integral per turn (lower is better).

  With ``b_t = min_{s <= t} rank_s``: ``bri[0] = mean(log b_0)`` and, for
  ``i >= 1``, ``bri[i] = (1/i) * sum_{t<i} mean((log b_t + log b_{t+1}) / 2)``.

  Args:
    ranks: ``[S, T+1]`` integer ranks (censored at ``K + 1``).

  Returns:
    ``[T+1]`` float32.
  """
  ranks = checks.array('ranks', ranks, 2, 'int')
  checks.ranks('ranks', ranks)
  return _bri(ranks)


@jax.jit
def _bri(ranks):
  log_best = jnp.log(jax.lax.cummin(ranks, axis=1).astype(jnp.float32))
  mean_log = jnp.mean(log_best, axis=0)  # [T+1]
  trapezoids = (mean_log[:-1] + mean_log[1:]) / 2  # [T]
  steps = jnp.arange(1, mean_log.shape[0], dtype=jnp.float32)
  return jnp.concatenate([mean_log[:1], jnp.cumsum(trapezoids) / steps])


def failure_modes(ranks, top1, active=None) -> FailureModes:
  """Failure-mode rates over active transitions (docs/definitions.md §6).

  Args:
    ranks: ``[S, T+1]`` integer target ranks.
    top1: ``[S, T+1]`` integer displayed top-1 ids.
    active: optional ``[S, T+1]`` bool, the session was still running at
      turn ``t`` (turn ``t`` was executed). Default: the target was not shown
      as top-1 at any earlier turn, i.e. ``min_{s<t} rank_s > 1``.

  Returns:
    ``FailureModes`` of ``Rate(rate, count, total)``, pooled over turns.
  """
  ranks = checks.array('ranks', ranks, 2, 'int')
  checks.ranks('ranks', ranks)
  top1 = checks.array('top1', top1, 2, 'int')
  checks.shape('top1', top1, ranks.shape)
  checks.gallery_ids('top1', top1)
  return _failure_modes(ranks, top1, _active(ranks, active))


def _active(ranks, active):
  """``active`` checked against ``ranks``, or ``default_active``."""
  if active is None:
    return default_active(ranks)
  active = checks.array('active', active, 2, 'bool')
  checks.shape('active', active, ranks.shape)
  return active


def default_active(ranks):
  """``[S, T+1]`` bool: turn ``t`` ran (no earlier displayed top-1 hit)."""
  ranks = jnp.asarray(ranks)
  found_before = jax.lax.cummin(ranks, axis=1) <= 1
  return jnp.concatenate(
      [jnp.ones_like(found_before[:, :1]), ~found_before[:, :-1]], axis=1)


def _rate(event, mask) -> Rate:
  count = jnp.sum(event & mask, dtype=jnp.int32)
  total = jnp.sum(mask, dtype=jnp.int32)
  return Rate(rate=(count / total).astype(jnp.float32), count=count,
              total=total)


@jax.jit
def _failure_modes(ranks, top1, active):
  prev, cur = ranks[:, :-1], ranks[:, 1:]  # transition t-1 -> t, t = 1..T
  moving = active[:, 1:]
  stagnated = cur >= prev
  return FailureModes(
      drift=_rate(cur > prev, moving),
      stagnation=_rate(stagnated, moving),
      repeated_top1=_rate(top1[:, 1:] == top1[:, :-1], moving),
      improvement=_rate(cur < prev, moving),
      recovery=_rate(cur[:, 1:] < cur[:, :-1],
                     moving[:, :-1] & stagnated[:, :-1] & moving[:, 1:]),
  )


class RankCapFiring(NamedTuple):
  """Rank-cap firing over active transitions (paper appendix A.4)."""
  fired: Rate      # transitions where rank-cap changed the list it capped
  improved: Rate   # of those, the target rank improved at the same turn


def cumulative_hits(ranks, k: int):
  """``[T+1]``: share of sessions whose target was in the top ``k`` of any
  displayed list up to turn ``t`` (ChatIR / PlugIR's Hits@K)."""
  ranks = checks.array('ranks', ranks, 2, 'int')
  checks.ranks('ranks', ranks)
  k = checks.positive_int('k', k)
  return jnp.mean(jax.lax.cummin(ranks, axis=1) <= k, axis=0)


def rank_cap_firing(ranks, fired, active=None) -> RankCapFiring:
  """The rank-cap firing rate and same-turn improvement (docs/definitions.md
  §6).

  Args:
    ranks: ``[S, T+1]`` integer target ranks.
    fired: ``[S, T+1]`` bool, rank-cap fired at turn ``t`` (turn 0 unused).
    active: optional ``[S, T+1]`` bool (see ``failure_modes``).

  Returns:
    ``RankCapFiring``: firing over active transitions ``t-1 -> t``, and
    among firing transitions those with ``r_t < r_{t-1}``.
  """
  ranks = checks.array('ranks', ranks, 2, 'int')
  checks.ranks('ranks', ranks)
  fired = checks.array('fired', fired, 2, 'bool')
  checks.shape('fired', fired, ranks.shape)
  moving = _active(ranks, active)[:, 1:]
  firing = fired[:, 1:] & moving
  return RankCapFiring(fired=_rate(fired[:, 1:], moving),
                       improved=_rate(ranks[:, 1:] < ranks[:, :-1], firing))
