"""The session bootstrap of per-session metrics (docs/definitions.md §6):
percentile 95% intervals of means, paired differences and ratios of sums,
resampling whole sessions, or whole queries where queries repeat.

Dimension legend: ``S`` sessions, ``C`` clusters (queries), ``M`` columns,
``R`` resamples.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import checks
from recovr_jax.core import percentiles

DEFAULT_RESAMPLES = 10_000


class BootstrapInterval(NamedTuple):
  """Per-turn paired difference ``a - b`` of means with its 95% interval."""
  mean: jax.Array   # [T+1] observed difference of means
  lower: jax.Array  # [T+1] 2.5th percentile
  upper: jax.Array  # [T+1] 97.5th percentile


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
                     key=None, clusters=None) -> BootstrapInterval:
  """Paired session bootstrap of the per-turn difference of means ``a - b``.

  Whole sessions are resampled with the same indices for both methods; the
  interval is the percentile 95% interval over resamples.

  Args:
    hits_a: ``[S, T+1]`` per-session values of method a (e.g. ``rank <= 1``).
    hits_b: ``[S, T+1]`` the same sessions under method b.
    num_resamples: ``R >= 1``.
    key: a ``jax.random`` key; default ``jax.random.key(0)``.
    clusters: ``[S]`` int cluster of each session (its query, when queries
      repeat); where two sessions share one, whole clusters are resampled
      (``_cluster_bootstrap``). None: each session its own.

  Returns:
    ``BootstrapInterval`` of ``[T+1]`` float32 arrays.
  """
  hits_a = checks.array('hits_a', hits_a, 2, 'float')
  hits_b = checks.array('hits_b', hits_b, 2, 'float')
  checks.shape('hits_b', hits_b, hits_a.shape)
  checks.finite('hits_a', hits_a, 'per-session values')
  checks.finite('hits_b', hits_b, 'per-session values')
  diffs = jnp.asarray(hits_a, jnp.float32) - jnp.asarray(hits_b, jnp.float32)
  if _repeated(clusters, diffs):
    return _cluster_bootstrap('hits_a', diffs, clusters, num_resamples, key)
  draws = _resamples('hits_a', hits_a, num_resamples, key)
  return _bootstrap(diffs, draws)


def bootstrap_mean(values, num_resamples: int = DEFAULT_RESAMPLES,
                   key=None, clusters=None) -> BootstrapInterval:
  """Session bootstrap of the mean of each column of ``values``.

  Whole sessions (rows) are resampled; the interval is the percentile 95%
  interval over resamples. The same ``key`` gives every method the same
  resamples.

  Args:
    values: ``[S, M]`` per-session values (e.g. ``rank <= k`` per turn).
    num_resamples: ``R >= 1``.
    key: a ``jax.random`` key; default ``jax.random.key(0)``.
    clusters: ``[S]`` int cluster of each session, as ``paired_bootstrap``.

  Returns:
    ``BootstrapInterval`` of ``[M]`` float32 arrays (``mean`` is the
    observed mean).
  """
  values = checks.array('values', values, 2, 'float')
  checks.finite('values', values, 'per-session values')
  if _repeated(clusters, values):
    return _cluster_bootstrap('values', values, clusters, num_resamples, key)
  draws = _resamples('values', values, num_resamples, key)
  return _bootstrap(values, draws)


def _repeated(clusters, values) -> bool:
  """Whether ``clusters`` (``[S]`` ints or None) puts two of ``values``'
  sessions in one cluster."""
  if clusters is None:
    return False
  clusters = np.asarray(clusters)
  if clusters.shape != (np.shape(values)[0],) or clusters.dtype.kind not in 'iu':
    raise ValueError(f'clusters must be [{np.shape(values)[0]}] ints (one '
                     f'per session), got {clusters.dtype} {clusters.shape}')
  return len(np.unique(clusters)) < clusters.shape[0]


def _cluster_bootstrap(name, values, clusters, num_resamples, key):
  """The bootstrap of ``values [S, M]``' column means resampling whole
  clusters (a session's query, run again under other user draws): each
  resample draws C of the C clusters with replacement, and its mean is the
  sum of the drawn clusters' values over their sessions (a ratio: clusters
  may differ in size)."""
  _, which = np.unique(np.asarray(clusters), return_inverse=True)
  num = int(which.max()) + 1
  values = jnp.asarray(values, jnp.float32)
  sums = jax.ops.segment_sum(values, jnp.asarray(which), num)        # [C, M]
  sizes = jnp.asarray(np.bincount(which, minlength=num), jnp.float32)
  counts = _resamples(name, sums, num_resamples, key).counts        # [R, C]
  highest = jax.lax.Precision.HIGHEST
  means = (jnp.matmul(counts, sums, precision=highest) /
           jnp.matmul(counts, sizes, precision=highest)[:, None])
  return _interval(values, means)


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

