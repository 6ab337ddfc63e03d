"""Tests for the cluster bootstrap of recovr_jax.core.resampling against a
NumPy cluster bootstrap (queries that repeat are resampled whole)."""

from absl.testing import absltest
import jax
import numpy as np

from recovr_jax.core import resampling


def numpy_cluster_bootstrap(values, clusters, drawn):
  """Each resample ``drawn[r]`` (cluster positions among the sorted
  distinct clusters, with replacement): every session of each drawn
  cluster, as often as it is drawn; its column means; the percentile 95%
  interval."""
  ids = np.unique(clusters)
  members = [np.flatnonzero(clusters == c) for c in ids]
  means = []
  for row in drawn:
    rows = np.concatenate([members[c] for c in row])
    means.append(values[rows].astype(np.float64).mean(axis=0))
  means = np.asarray(means)
  return (values.mean(axis=0), np.percentile(means, 2.5, axis=0),
          np.percentile(means, 97.5, axis=0))


class ClusterBootstrapTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    # 7 queries repeated unevenly (a last partial repeat), 4 columns of hits
    # that depend on the query: sessions of one query are alike.
    self.clusters = np.concatenate([np.tile(np.arange(7), 4), np.arange(3)])
    easy = rng.random(7)
    self.values = (rng.random((len(self.clusters), 4)) <
                   easy[self.clusters, None]).astype(np.float32)
    self.key = jax.random.key(3)
    self.drawn = np.asarray(resampling.bootstrap_indices(self.key, 300, 7))

  def test_equals_a_numpy_cluster_bootstrap(self):
    got = resampling.bootstrap_mean(self.values, 300, self.key,
                                    clusters=self.clusters)
    mean, lower, upper = numpy_cluster_bootstrap(self.values, self.clusters,
                                                 self.drawn)
    np.testing.assert_allclose(got.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(got.lower, lower, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.upper, upper, rtol=1e-5, atol=1e-6)

  def test_the_paired_bootstrap_resamples_queries_too(self):
    other = np.roll(self.values, 1, axis=1)
    got = resampling.paired_bootstrap(self.values, other, 300, self.key,
                                      clusters=self.clusters)
    mean, lower, upper = numpy_cluster_bootstrap(self.values - other,
                                                 self.clusters, self.drawn)
    np.testing.assert_allclose(got.mean, mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.lower, lower, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.upper, upper, rtol=1e-5, atol=1e-6)

  def test_sessions_of_their_own_take_the_session_bootstrap(self):
    values = self.values[:7]
    plain = resampling.bootstrap_mean(values, 300, self.key)
    own = resampling.bootstrap_mean(values, 300, self.key,
                                    clusters=np.arange(7) * 5)
    for a, b in zip(plain, own):
      np.testing.assert_array_equal(a, b)

  def test_alike_sessions_widen_the_interval(self):
    # Each query's repeats identical: resampling sessions would pretend
    # 5 x as much evidence as the 40 queries hold.
    rng = np.random.default_rng(1)
    per_query = (rng.random((40, 1)) < 0.5).astype(np.float32)
    clusters = np.tile(np.arange(40), 5)
    values = per_query[clusters]
    width = lambda b: float(b.upper[0] - b.lower[0])
    by_query = resampling.bootstrap_mean(values, 2000, self.key,
                                         clusters=clusters)
    by_session = resampling.bootstrap_mean(values, 2000, self.key)
    self.assertGreater(width(by_query), 1.8 * width(by_session))

  def test_clusters_must_be_one_int_per_session(self):
    with self.assertRaisesRegex(ValueError, r'clusters must be \[31\] ints'):
      resampling.bootstrap_mean(self.values, 10, self.key,
                                clusters=self.clusters[:-1])
    with self.assertRaisesRegex(ValueError, 'clusters must be'):
      resampling.bootstrap_mean(self.values, 10, self.key,
                                clusters=self.clusters.astype(float))


if __name__ == '__main__':
  absltest.main()
