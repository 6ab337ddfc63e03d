"""Tests for MERLIN's slerp query update."""

from absl.testing import absltest
import jax
import numpy as np

from recovr_jax import slerp


def reference_slerp(prev, new, alpha):
  prev = prev / np.linalg.norm(prev)
  new = new / np.linalg.norm(new)
  theta = np.arccos(np.clip(new @ prev, -1, 1))
  return (np.sin((1 - alpha) * theta) * new + np.sin(alpha * theta) * prev
          ) / np.sin(theta)


class SlerpTest(absltest.TestCase):

  def test_matches_reference(self):
    rng = np.random.default_rng(0)
    for _ in range(20):
      prev, new = rng.standard_normal((2, 8))
      alpha = rng.uniform()
      np.testing.assert_allclose(slerp(prev, new, alpha),
                                 reference_slerp(prev, new, alpha), atol=2e-6)

  def test_alpha_keeps_prev_share(self):
    prev, new = np.array([1.0, 0.0]), np.array([0.0, 3.0])
    out = np.asarray(slerp(prev, new, 0.8))  # 80% of the 90-degree arc
    np.testing.assert_allclose(out, [np.cos(0.1 * np.pi), np.sin(0.1 * np.pi)],
                               atol=1e-6)
    np.testing.assert_allclose(slerp(prev, new, 1.0), [1, 0], atol=1e-6)
    np.testing.assert_allclose(slerp(prev, new, 0.0), [0, 1], atol=1e-6)
    self.assertAlmostEqual(float(np.linalg.norm(out)), 1.0, places=6)

  def test_parallel_returns_prev(self):
    prev = np.array([0.0, 2.0, 0.0])
    np.testing.assert_allclose(slerp(prev, prev * 5, 0.8), [0, 1, 0])
    np.testing.assert_allclose(slerp(prev, -prev, 0.8), [0, 1, 0])
    self.assertTrue(np.all(np.isfinite(slerp(prev, prev, 0.3))))

  def test_jit_and_vmap(self):
    rng = np.random.default_rng(1)
    prev, new = rng.standard_normal((2, 4, 6)).astype(np.float32)
    got = jax.jit(jax.vmap(slerp, in_axes=(0, 0, None)))(prev, new, 0.8)
    for s in range(4):
      np.testing.assert_allclose(got[s], slerp(prev[s], new[s], 0.8),
                                 atol=1e-6)

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, 'prev and new must have the same'):
      slerp(np.ones(3), np.ones(4))
    with self.assertRaisesRegex(ValueError, r'alpha must be in \[0, 1\]'):
      slerp(np.ones(3), np.ones(3), 1.5)
    with self.assertRaisesRegex(ValueError, 'new holds NaN'):
      slerp(np.ones(3), np.array([1.0, np.nan, 0.0]))
    # A zero vector has no direction (its result was not unit length).
    with self.assertRaisesRegex(ValueError, 'prev is all zeros'):
      slerp(np.zeros(3), np.ones(3))
    with self.assertRaisesRegex(ValueError, 'new is all zeros'):
      slerp(np.ones(3), np.zeros(3))


if __name__ == '__main__':
  absltest.main()
