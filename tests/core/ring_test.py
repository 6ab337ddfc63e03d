"""Tests for the Result Memory ring."""

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import ring


class ResultMemoryTest(absltest.TestCase):

  def test_init_is_empty(self):
    result_memory = ring.init_result_memory(3, 2, 4)
    chex.assert_shape((result_memory.ids, result_memory.scores), (3, 2, 4))
    chex.assert_shape(result_memory.valid, (3, 2))
    self.assertTrue(np.all(result_memory.ids == -1))
    self.assertTrue(np.all(result_memory.scores == -np.inf))
    self.assertFalse(np.any(result_memory.valid))

  def test_push_is_age_indexed(self):
    result_memory = ring.init_result_memory(3, 1, 2)
    for turn in range(4):
      result_memory = ring.push(result_memory, np.full((1, 2), turn), np.full((1, 2), turn,
                                                               np.float32),
                         np.array([turn != 2]))
    # Age 0 is turn 3, age 1 turn 2 (marked invalid), age 2 turn 1.
    np.testing.assert_array_equal(result_memory.ids[:, 0, 0], [3, 2, 1])
    np.testing.assert_array_equal(result_memory.valid[:, 0], [True, False, True])
    self.assertEqual(result_memory.ids.dtype, jnp.int32)

  def test_push_jits_and_vmaps(self):
    result_memory = ring.init_result_memory(2, 2, 3)
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), result_memory)
    push = jax.jit(jax.vmap(ring.push))
    new = push(batch, jnp.arange(12).reshape(2, 2, 3),
               jnp.ones((2, 2, 3)), jnp.ones((2, 2), bool))
    np.testing.assert_array_equal(new.ids[1, 0], [[6, 7, 8], [9, 10, 11]])
    np.testing.assert_array_equal(new.ids[1, 1], -np.ones((2, 3)))

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, 'window must be >= 1'):
      ring.init_result_memory(0, 2, 4)
    result_memory = ring.init_result_memory(2, 2, 4)
    with self.assertRaisesRegex(ValueError, r'ids must have shape \(2, 4\)'):
      ring.push(result_memory, np.zeros((2, 5)), np.zeros((2, 4)), np.ones(2, bool))


if __name__ == '__main__':
  absltest.main()
