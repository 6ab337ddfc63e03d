"""Tests for recovr_jax.metrics against plain Python references."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import list_metrics
from recovr_jax.core import resampling


def reference_target_ranks(displayed, targets):
  s, t1, k = displayed.shape
  out = np.full((s, t1), k + 1)
  for i in range(s):
    for t in range(t1):
      row = list(displayed[i, t])
      if targets[i] in row:
        out[i, t] = row.index(targets[i]) + 1
  return out


def reference_bri(ranks):
  s, t1 = ranks.shape
  best = np.minimum.accumulate(ranks, axis=1).astype(np.float64)
  out = [np.mean(np.log(best[:, 0]))]
  for i in range(1, t1):
    total = 0.0
    for t in range(i):
      total += np.mean((np.log(best[:, t]) + np.log(best[:, t + 1])) / 2)
    out.append(total / i)
  return np.array(out)


def reference_failure_modes(ranks, top1):
  counts = {m: [0, 0] for m in ('drift', 'stagnation', 'repeated_top1',
                                'improvement', 'recovery')}
  s, t1 = ranks.shape
  for i in range(s):
    stop = next((t for t in range(t1) if ranks[i, t] == 1), t1)
    active = [t <= stop for t in range(t1)]  # turn t executed
    for t in range(1, t1):
      if not active[t]:
        continue
      r0, r1 = ranks[i, t - 1], ranks[i, t]
      for name, event in (('drift', r1 > r0), ('stagnation', r1 >= r0),
                          ('repeated_top1', top1[i, t] == top1[i, t - 1]),
                          ('improvement', r1 < r0)):
        counts[name][0] += int(event)
        counts[name][1] += 1
      if r1 >= r0 and t + 1 < t1 and active[t + 1]:
        counts['recovery'][0] += int(ranks[i, t + 1] < r1)
        counts['recovery'][1] += 1
  return counts


def random_sessions(rng, s, t1, k):
  """Ranks that follow the protocol: a found session stays at rank 1."""
  ranks = rng.integers(1, k + 2, (s, t1))
  for i in range(s):
    hit = np.flatnonzero(ranks[i] == 1)
    if hit.size:
      ranks[i, hit[0]:] = 1
  top1 = rng.integers(0, 4, (s, t1))
  return ranks, top1


@jax.jit
def _gathered_bootstrap(values, indices):
  # The bootstrap as it was computed before the draw counts (one program:
  # XLA may fuse, and so round, its arithmetic by the whole program).
  means = jax.lax.map(lambda r: jnp.mean(values[r], axis=0), indices,
                      batch_size=256)
  lower, upper = jnp.percentile(means, jnp.array([2.5, 97.5]), axis=0)
  return jnp.mean(values, axis=0), lower, upper


class MetricsTest(parameterized.TestCase):

  def test_target_ranks(self):
    for seed in range(10):
      rng = np.random.default_rng(seed)
      displayed = rng.integers(-1, 12, (6, 4, 5))
      targets = rng.integers(0, 12, 6)
      got = list_metrics.target_ranks(displayed, targets)
      chex.assert_shape(got, (6, 4))
      np.testing.assert_array_equal(got,
                                    reference_target_ranks(displayed, targets))

  def test_padding_never_matches(self):
    got = list_metrics.target_ranks(np.array([[[-1, -1]]]), np.array([0]))
    np.testing.assert_array_equal(got, [[3]])

  def test_recall_at_k(self):
    ranks = np.array([[1, 3], [5, 2], [11, 11]])
    np.testing.assert_allclose(list_metrics.recall_at_k(ranks, 1), [1 / 3, 0])
    np.testing.assert_allclose(list_metrics.recall_at_k(ranks, 5), [2 / 3, 2 / 3])

  def test_bri_matches_reference(self):
    for seed in range(10):
      ranks, _ = random_sessions(np.random.default_rng(seed), 20, 6, 100)
      np.testing.assert_allclose(list_metrics.bri(ranks), reference_bri(ranks),
                                 rtol=1e-5)

  def test_bri_found_at_turn_zero_is_zero(self):
    np.testing.assert_array_equal(list_metrics.bri(np.ones((1, 6), int)),
                                  np.zeros(6))

  def test_bri_hand_case(self):
    # b = [4, 2, 2]: bri = [log 4, (log 4 + log 2)/2, ((log4+log2)/2 + log2)/2]
    got = list_metrics.bri(np.array([[4, 2, 3]]))
    l2, l4 = np.log(2), np.log(4)
    np.testing.assert_allclose(
        got, [l4, (l4 + l2) / 2, ((l4 + l2) / 2 + l2) / 2], rtol=1e-6)

  def test_failure_modes_match_reference(self):
    for seed in range(10):
      ranks, top1 = random_sessions(np.random.default_rng(seed), 30, 6, 8)
      got = list_metrics.failure_modes(ranks, top1)
      ref = reference_failure_modes(ranks, top1)
      for name, (count, total) in ref.items():
        rate = getattr(got, name)
        self.assertEqual(int(rate.count), count, name)
        self.assertEqual(int(rate.total), total, name)
        if total:
          self.assertAlmostEqual(float(rate.rate), count / total, places=6)

  def test_session_stopping_at_turn_zero_has_no_transitions(self):
    got = list_metrics.failure_modes(np.ones((1, 6), int), np.zeros((1, 6), int))
    self.assertEqual(int(got.stagnation.total), 0)
    self.assertTrue(np.isnan(got.stagnation.rate))

  def test_explicit_active_mask(self):
    ranks = np.array([[5, 5, 4, 4]])
    active = np.array([[True, True, False, False]])
    got = list_metrics.failure_modes(ranks, np.zeros((1, 4), int), active)
    self.assertEqual(int(got.stagnation.total), 1)
    self.assertEqual(int(got.recovery.total), 0)

  def test_paired_bootstrap_matches_reference(self):
    rng = np.random.default_rng(0)
    a = (rng.random((50, 4)) < 0.6).astype(np.float32)
    b = (rng.random((50, 4)) < 0.4).astype(np.float32)
    key = jax.random.key(3)
    got = resampling.paired_bootstrap(a, b, num_resamples=500, key=key)
    idx = np.asarray(resampling.bootstrap_indices(key, 500, 50))
    means = (a - b)[idx].mean(axis=1)
    np.testing.assert_allclose(got.mean, (a - b).mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(got.lower, np.percentile(means, 2.5, axis=0),
                               atol=1e-5)
    np.testing.assert_allclose(got.upper, np.percentile(means, 97.5, axis=0),
                               atol=1e-5)

  @parameterized.parameters((300, 700), (6, 50), (40, 333))
  def test_bootstrap_mean_is_the_gathered_mean_to_the_bit(self, s,
                                                          resamples):
    # Whole-number columns are summed by a matmul of the draw counts, the
    # rest gathered: both as the mean of the gathered rows, bit for bit.
    rng = np.random.default_rng(4)
    values = np.concatenate([
        (rng.random((s, 3)) < 0.4).astype(np.float32),       # hits
        rng.integers(-3, 4, (s, 2)).astype(np.float32),      # differences
        np.log(rng.integers(1, 900, (s, 2))).astype(np.float32),  # BRI
        # Whole, but their sums pass 2^24 (rounded: the order matters).
        rng.integers(2 ** 20, 2 ** 21, (s, 1)).astype(np.float32),
    ], axis=1)
    key = jax.random.key(5)
    idx = resampling.bootstrap_indices(key, resamples, s)
    for name, columns in (('mixed', values), ('whole', values[:, :5])):
      got = resampling.bootstrap_mean(columns, resamples, key)
      want = _gathered_bootstrap(columns, idx)
      for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b, err_msg=name)
    # Another key draws other resamples (the draws are kept per key).
    other = resampling.bootstrap_mean(values[:, :5], resamples,
                                   jax.random.key(6))
    self.assertFalse(np.array_equal(other.lower, got.lower))

  def test_paired_bootstrap_default_and_reproducible(self):
    rng = np.random.default_rng(1)
    a = rng.random((40, 3)).astype(np.float32)
    first = resampling.paired_bootstrap(a, a * 0.5)
    second = resampling.paired_bootstrap(a, a * 0.5)
    np.testing.assert_array_equal(first.lower, second.lower)
    self.assertTrue(np.all(first.lower <= first.mean))
    self.assertTrue(np.all(first.mean <= first.upper))

  def test_bootstrap_ratio_matches_reference(self):
    rng = np.random.default_rng(2)
    den = rng.integers(0, 4, (60, 3)).astype(np.float32)
    num = np.floor(den * rng.random((60, 3))).astype(np.float32)
    den[:, 2] = 0  # a ratio with nothing to divide by
    num[:, 2] = 0
    key = jax.random.key(5)
    got = resampling.bootstrap_ratio(num, den, num_resamples=400, key=key)
    idx = np.asarray(resampling.bootstrap_indices(key, 400, 60))
    ratios = num[idx][..., :2].sum(axis=1) / den[idx][..., :2].sum(axis=1)
    np.testing.assert_allclose(got.mean[:2], num[:, :2].sum(0) /
                               den[:, :2].sum(0), atol=1e-6)
    np.testing.assert_allclose(got.lower[:2],
                               np.percentile(ratios, 2.5, axis=0), atol=1e-5)
    np.testing.assert_allclose(got.upper[:2],
                               np.percentile(ratios, 97.5, axis=0), atol=1e-5)
    self.assertTrue(np.all(np.isnan([got.mean[2], got.lower[2],
                                     got.upper[2]])))
    # One session: every resample is that session.
    one = resampling.bootstrap_ratio([[3.0]], [[4.0]], num_resamples=10)
    np.testing.assert_allclose([one.lower[0], one.upper[0]], [0.75, 0.75])
    with self.assertRaisesRegex(ValueError, 'denominators must be >= 0'):
      resampling.bootstrap_ratio([[1.0]], [[-1.0]])
    with self.assertRaisesRegex(ValueError,
                                r'denominators must have shape \(1, 1\)'):
      resampling.bootstrap_ratio([[1.0]], [[1.0, 2.0]])

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, 'displayed must have rank 3'):
      list_metrics.target_ranks(np.zeros((2, 3), int), np.zeros(2, int))
    with self.assertRaisesRegex(ValueError, 'targets must be >= 0'):
      list_metrics.target_ranks(np.zeros((1, 2, 3), int), np.array([-1]))
    with self.assertRaisesRegex(ValueError, 'k must be >= 1'):
      list_metrics.recall_at_k(np.ones((2, 2), int), 0)
    with self.assertRaisesRegex(ValueError, 'ranks must be >= 1'):
      list_metrics.bri(np.zeros((2, 2), int))
    # Ranks are 1-based: every rank metric refuses 0 (recall and Hits@K
    # counted it as found).
    zero = np.array([[0, 3], [2, 1]])
    for fn in (lambda r: list_metrics.recall_at_k(r, 1),
               lambda r: list_metrics.cumulative_hits(r, 1),
               lambda r: list_metrics.failure_modes(r, np.ones_like(r)),
               lambda r: list_metrics.rank_cap_firing(r, np.ones(r.shape, bool))):
      with self.assertRaisesRegex(ValueError, r'ranks must be >= 1 \(1-based'):
        fn(zero)
    with self.assertRaisesRegex(ValueError, 'displayed holds -4'):
      list_metrics.target_ranks(np.array([[[2, -4, -1]]]), np.array([2]))
    with self.assertRaisesRegex(ValueError, 'top1 holds -2'):
      list_metrics.failure_modes(np.ones((1, 2), int), np.array([[1, -2]]))
    with self.assertRaisesRegex(ValueError, r'hits_b must have shape \(3, 2\)'):
      resampling.paired_bootstrap(np.ones((3, 2)), np.ones((3, 3)))
    # NaN values gave NaN intervals; no resample gave an empty draw.
    nan = np.array([[1.0, 0.0], [np.nan, 1.0]])
    with self.assertRaisesRegex(ValueError, r'hits_b holds NaN or inf \(first '
                                r'at row 1\); per-session values must be'):
      resampling.paired_bootstrap(np.ones((2, 2)), nan, 10)
    with self.assertRaisesRegex(ValueError, 'values holds NaN'):
      resampling.bootstrap_mean(nan, 10)
    with self.assertRaisesRegex(ValueError, 'numerators holds NaN'):
      resampling.bootstrap_ratio(nan, np.ones((2, 2)), 10)
    for resamples, sessions, name in ((0, 5, 'num_resamples'),
                                      (5, 0, 'num_sessions')):
      with self.assertRaisesRegex(ValueError, f'{name} must be >= 1, got 0'):
        resampling.bootstrap_indices(jax.random.key(0), resamples, sessions)


if __name__ == '__main__':
  absltest.main()


class MetricsJitTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_jit_equals_reference(self):
    rng = np.random.default_rng(4)
    ranks, top1 = random_sessions(rng, 12, 6, 9)
    displayed = rng.integers(-1, 10, (12, 6, 9))
    targets = rng.integers(0, 10, 12)
    np.testing.assert_allclose(self.variant(list_metrics.bri)(ranks),
                               reference_bri(ranks), rtol=1e-5)
    np.testing.assert_array_equal(
        self.variant(list_metrics.target_ranks)(displayed, targets),
        reference_target_ranks(displayed, targets))
    got = self.variant(list_metrics.failure_modes)(ranks, top1)
    ref = reference_failure_modes(ranks, top1)
    self.assertEqual(int(got.recovery.count), ref['recovery'][0])
    self.assertEqual(int(got.drift.total), ref['drift'][1])


class MetricsBatchTest(absltest.TestCase):

  def test_vmap_over_methods_equals_loop_without_retrace(self):
    rng = np.random.default_rng(6)
    displayed = rng.integers(-1, 10, (3, 8, 6, 5))  # [methods, S, T+1, K]
    targets = rng.integers(0, 10, 8)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def per_method(displayed):
      ranks = jax.vmap(list_metrics.target_ranks, in_axes=(0, None))(displayed,
                                                               targets)
      return ranks, jax.vmap(list_metrics.bri)(ranks)

    ranks, bris = per_method(displayed)
    per_method(displayed[::-1])  # new values, same shapes: no retrace
    for i in range(3):
      ref = reference_target_ranks(displayed[i], targets)
      np.testing.assert_array_equal(ranks[i], ref)
      np.testing.assert_allclose(bris[i], reference_bri(ref), rtol=1e-5)
