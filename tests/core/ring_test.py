"""Tests for the Result Memory ring."""

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import ring as ring_lib


class ResultMemoryTest(absltest.TestCase):

  def test_init_is_empty(self):
    ring = ring_lib.init_result_memory(3, 2, 4)
    chex.assert_shape((ring.ids, ring.scores), (3, 2, 4))
    chex.assert_shape(ring.valid, (3, 2))
    self.assertTrue(np.all(ring.ids == -1))
    self.assertTrue(np.all(ring.scores == -np.inf))
    self.assertFalse(np.any(ring.valid))

  def test_push_is_age_indexed(self):
    ring = ring_lib.init_result_memory(3, 1, 2)
    for turn in range(4):
      ring = ring_lib.push(ring, np.full((1, 2), turn), np.full((1, 2), turn,
                                                               np.float32),
                         np.array([turn != 2]))
    # Age 0 is turn 3, age 1 turn 2 (marked invalid), age 2 turn 1.
    np.testing.assert_array_equal(ring.ids[:, 0, 0], [3, 2, 1])
    np.testing.assert_array_equal(ring.valid[:, 0], [True, False, True])
    self.assertEqual(ring.ids.dtype, jnp.int32)

  def test_push_jits_and_vmaps(self):
    ring = ring_lib.init_result_memory(2, 2, 3)
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), ring)
    push = jax.jit(jax.vmap(ring_lib.push))
    new = push(batch, jnp.arange(12).reshape(2, 2, 3),
               jnp.ones((2, 2, 3)), jnp.ones((2, 2), bool))
    np.testing.assert_array_equal(new.ids[1, 0], [[6, 7, 8], [9, 10, 11]])
    np.testing.assert_array_equal(new.ids[1, 1], -np.ones((2, 3)))

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, 'window must be >= 1'):
      ring_lib.init_result_memory(0, 2, 4)
    ring = ring_lib.init_result_memory(2, 2, 4)
    with self.assertRaisesRegex(ValueError, r'ids must have shape \(2, 4\)'):
      ring_lib.push(ring, np.zeros((2, 5)), np.zeros((2, 4)), np.ones(2, bool))


if __name__ == '__main__':
  absltest.main()
