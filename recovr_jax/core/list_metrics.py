"""Metrics over displayed lists (docs/definitions.md §6).

Dimension legend: ``S`` sessions, ``T + 1`` turns (turn 0 and ``T`` feedback
turns), ``K`` displayed list length, ``R`` bootstrap resamples.
A target absent from a list of length ``K`` has rank ``K + 1`` (censored), so
mean ranks and BRI are censored at ``log(K + 1)``.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import checks
from recovr_jax.core import percentiles

DEFAULT_RESAMPLES = 10_000


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


class BootstrapInterval(NamedTuple):
  """Per-turn paired difference ``a - b`` of means with its 95% interval."""
  mean: jax.Array   # [T+1] observed difference of means
  lower: jax.Array  # [T+1] 2.5th percentile
  upper: jax.Array  # [T+1] 97.5th percentile


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


def bootstrap_indices(key, num_resamples: int, num_sessions: int):
  """``[R, S]`` int32 session indices drawn with replacement."""
  num_resamples = checks.positive_int('num_resamples', num_resamples)
  num_sessions = checks.positive_int('num_sessions', num_sessions)
  return jax.random.randint(key, (num_resamples, num_sessions), 0,
                            num_sessions, dtype=jnp.int32)


class _Draws:
  """One set of resamples: ``[R, S]`` session indices and, made when first
  read, ``[R, S]`` float32 counts (how many times each session is drawn in
  each)."""

  def __init__(self, indices):
    self.indices = indices

  @functools.cached_property
  def counts(self):
    return _counts(self.indices)


_DRAWN = {}  # (key data, key impl, R, S) -> _Draws, the last few
_DRAWN_KEPT = 4


def _resamples(name: str, values, num_resamples: int, key) -> _Draws:
  """The resamples of ``values`` ``[S, M]`` (at least one session; ``key``
  default ``jax.random.key(0)``), drawn once per key and size: every
  method of a run is resampled with the same key."""
  num_resamples = checks.positive_int('num_resamples', num_resamples)
  s = values.shape[0]
  if s < 1:
    raise ValueError(f'{name} must hold at least one session')
  key = jax.random.key(0) if key is None else key
  drawn = (np.asarray(jax.random.key_data(key)).tobytes(),
           str(jax.random.key_impl(key)), num_resamples, s)
  if drawn not in _DRAWN:
    if len(_DRAWN) >= _DRAWN_KEPT:
      _DRAWN.pop(next(iter(_DRAWN)))
    _DRAWN[drawn] = _Draws(bootstrap_indices(key, num_resamples, s))
  return _DRAWN[drawn]


@jax.jit
def _counts(indices):
  r, s = indices.shape
  return jnp.zeros((r, s), jnp.float32).at[
      jnp.arange(r)[:, None], indices].add(1.0)


def paired_bootstrap(hits_a, hits_b, num_resamples: int = DEFAULT_RESAMPLES,
                     key=None) -> BootstrapInterval:
  """Paired session bootstrap of the per-turn difference of means ``a - b``.

  Whole sessions are resampled with the same indices for both methods; the
  interval is the percentile 95% interval over resamples.

  Args:
    hits_a: ``[S, T+1]`` per-session values of method a (e.g. ``rank <= 1``).
    hits_b: ``[S, T+1]`` the same sessions under method b.
    num_resamples: ``R >= 1``.
    key: a ``jax.random`` key; default ``jax.random.key(0)``.

  Returns:
    ``BootstrapInterval`` of ``[T+1]`` float32 arrays.
  """
  hits_a = checks.array('hits_a', hits_a, 2, 'float')
  hits_b = checks.array('hits_b', hits_b, 2, 'float')
  checks.shape('hits_b', hits_b, hits_a.shape)
  checks.finite('hits_a', hits_a, 'per-session values')
  checks.finite('hits_b', hits_b, 'per-session values')
  draws = _resamples('hits_a', hits_a, num_resamples, key)
  diffs = jnp.asarray(hits_a, jnp.float32) - jnp.asarray(hits_b, jnp.float32)
  return _bootstrap(diffs, draws)


def bootstrap_mean(values, num_resamples: int = DEFAULT_RESAMPLES,
                   key=None) -> BootstrapInterval:
  """Session bootstrap of the mean of each column of ``values``.

  Whole sessions (rows) are resampled; the interval is the percentile 95%
  interval over resamples. The same ``key`` gives every method the same
  resamples.

  Args:
    values: ``[S, M]`` per-session values (e.g. ``rank <= k`` per turn).
    num_resamples: ``R >= 1``.
    key: a ``jax.random`` key; default ``jax.random.key(0)``.

  Returns:
    ``BootstrapInterval`` of ``[M]`` float32 arrays (``mean`` is the
    observed mean).
  """
  values = checks.array('values', values, 2, 'float')
  checks.finite('values', values, 'per-session values')
  draws = _resamples('values', values, num_resamples, key)
  return _bootstrap(values, draws)


def bootstrap_ratio(numerators, denominators,
                    num_resamples: int = DEFAULT_RESAMPLES,
                    key=None) -> BootstrapInterval:
  """Session bootstrap of ratios of sums (e.g. values read / values named).

  Whole sessions (rows) are resampled; each resample's ratio is the sum of
  the resampled numerators over the sum of their denominators, and the
  interval is the percentile 95% interval over the resamples whose
  denominator is not zero (``nan`` where none is).

  Args:
    numerators: ``[S, M]`` per-session counts.
    denominators: ``[S, M]`` per-session counts (``>= 0``).
    num_resamples: ``R >= 1``.
    key: a ``jax.random`` key; default ``jax.random.key(0)``.

  Returns:
    ``BootstrapInterval`` of ``[M]`` float32 arrays (``mean`` is the
    observed ratio, ``nan`` where the denominator sums to zero).
  """
  numerators = checks.array('numerators', numerators, 2, 'float')
  denominators = checks.array('denominators', denominators, 2, 'float')
  checks.shape('denominators', denominators, numerators.shape)
  checks.finite('numerators', numerators, 'per-session counts')
  checks.finite('denominators', denominators, 'per-session counts')
  if np.any(np.asarray(denominators) < 0):
    raise ValueError('denominators must be >= 0')
  indices = _resamples('numerators', numerators, num_resamples, key).indices
  return _bootstrap_ratio(jnp.asarray(numerators, jnp.float32),
                          jnp.asarray(denominators, jnp.float32), indices)


@jax.jit
def _bootstrap_ratio(num, den, indices):
  def ratio(n, d):
    return jnp.where(d > 0, n / jnp.where(d > 0, d, 1.0), jnp.nan)
  sums = jax.lax.map(lambda idx: (jnp.sum(num[idx], axis=0),
                                  jnp.sum(den[idx], axis=0)), indices,
                     batch_size=256)
  ratios = ratio(*sums)                                          # [R, M]
  lower, upper = jnp.nanpercentile(ratios, jnp.array([2.5, 97.5]), axis=0)
  return BootstrapInterval(mean=ratio(jnp.sum(num, axis=0),
                                      jnp.sum(den, axis=0)),
                           lower=lower, upper=upper)


def _bootstrap(diffs, draws: _Draws) -> BootstrapInterval:
  """``diffs [S, M]`` (concrete), ``draws`` -> ``BootstrapInterval``.

  A resample's mean is its sum over S. Where every column holds whole
  numbers whose sums stay below 2^24 (hits, their differences) every
  float32 sum is exact in any order, so the sums are ``counts @ diffs`` (a
  matmul); otherwise the rows are gathered and averaged (``jnp.mean``, whose
  order of summation XLA may choose by the array's shape: so every column
  at once, as always). Both give ``jnp.mean`` of the gathered rows to the
  bit."""
  diffs = jnp.asarray(diffs, jnp.float32)
  host = np.asarray(diffs)
  whole = bool(np.all(host == np.rint(host)) and
               np.abs(host).max(initial=0) * host.shape[0] < 2 ** 24)
  if whole:
    return _bootstrap_counted(diffs, draws.counts)
  return _bootstrap_gathered(diffs, draws.indices)


@jax.jit
def _bootstrap_counted(diffs, counts):
  return _interval(diffs, (counts @ diffs) / jnp.float32(diffs.shape[0]))


@jax.jit
def _bootstrap_gathered(diffs, indices):
  # Resample means in chunks so memory stays O(chunk * S * M).
  return _interval(diffs, jax.lax.map(lambda idx: jnp.mean(diffs[idx], axis=0),
                                      indices, batch_size=256))


def _interval(diffs, means):
  """``BootstrapInterval`` of ``diffs [S, M]`` from its resamples' ``means
  [R, M]`` (traced)."""
  lower, upper = percentiles.percentile(means, jnp.array([2.5, 97.5]))
  return BootstrapInterval(mean=jnp.mean(diffs, axis=0), lower=lower,
                           upper=upper)

