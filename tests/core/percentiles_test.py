"""core.percentiles against jnp.percentile."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import percentiles


class PercentileTest(absltest.TestCase):

  def test_jnp_percentile_to_the_bit(self):
    # The integer-key sort and the interpolation as jnp.percentile does
    # them; -0.0 (which its sort orders as 0.0) and NaN take it as it is.
    rng = np.random.default_rng(7)
    q = jnp.array([2.5, 97.5])
    want = jax.jit(lambda x: jnp.percentile(x, q, axis=0))
    got = jax.jit(lambda x: percentiles.percentile(x, q))
    cases = [rng.normal(size=(10000, 42)), rng.standard_cauchy((777, 5)),
             rng.integers(-300, 300, (501, 7)) / 500, np.ones((3, 2)),
             rng.normal(size=(1, 4))]
    zeros = (rng.integers(-2, 3, (200, 6)) / 7).astype(np.float32)
    zeros[rng.random(zeros.shape) < 0.3] = -0.0
    nan = rng.normal(size=(50, 3)).astype(np.float32)
    nan[7, 1] = np.nan
    for x in cases + [zeros, nan]:
      x = np.asarray(x, np.float32)
      np.testing.assert_array_equal(np.asarray(got(x)).view(np.int32),
                                    np.asarray(want(x)).view(np.int32),
                                    err_msg=str(x.shape))


if __name__ == '__main__':
  absltest.main()
