"""Tests for configs as pytrees (recovr_jax/config_pytree.py): traced
fields are leaves, the rest is static, and a jitted function of a config
compiles once for every value of its traced fields."""

import dataclasses

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import config_pytree
from recovr_jax import config_tree
from recovr_jax import executables


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class _Scale:
  gain: float = config_pytree.number(2.0)
  steps: tuple[int, int] = config_pytree.number((1, 2))
  mode: str = 'add'

  def __post_init__(self):
    if config_pytree.concrete(self) and not self.gain > 0:
      raise ValueError('gain must be > 0')


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class _Outer:
  scale: _Scale = _Scale()
  bias: float = config_tree.setting(0.0, traced=True)
  width: int = 3  # a shape: static


def _apply(config, x):
  y = x[:config.width] * config.scale.gain + config.bias
  return y + config.scale.steps[1] if config.scale.mode == 'add' else y


_OPS = ('add', 'mul', 'neg')


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class _Choosing:
  op: str | None = config_pytree.choice('add', _OPS)


def _is(value, name):
  """A choice read by value: its name, or (under jit) its index."""
  return value == name if isinstance(value, str) else (
      value == _OPS.index(name))


def _chosen(config, x):
  if config.op is None:
    return x
  return jnp.where(_is(config.op, 'add'), x + 2.0,
                   jnp.where(_is(config.op, 'mul'), x * 3.0, -x))


class ConfigPytreeTest(absltest.TestCase):

  def test_traced_fields_are_leaves_and_the_rest_is_structure(self):
    config = _Outer(scale=_Scale(gain=3.0, steps=(4, 5)), bias=0.5)
    leaves, tree = jax.tree.flatten(config)
    self.assertEqual(leaves, [3.0, 4, 5, 0.5])
    self.assertEqual(tree, jax.tree.structure(_Outer()))
    self.assertNotEqual(tree, jax.tree.structure(_Outer(width=2)))
    self.assertNotEqual(tree, jax.tree.structure(
        _Outer(scale=_Scale(mode='none'))))
    self.assertEqual(jax.tree.unflatten(tree, leaves), config)
    self.assertTrue(config_pytree.concrete(config.scale))
    with self.assertRaisesRegex(ValueError, 'gain must be > 0'):
      _Scale(gain=-1.0)
    # Rebuilt from placeholders (as JAX does under jit): not checked.
    rebuilt = jax.tree.unflatten(tree, [object()] * 4)
    self.assertFalse(config_pytree.concrete(rebuilt.scale))
    self.assertEqual(rebuilt.width, 3)

  def test_jit_compiles_once_for_every_number(self):
    fn = executables.jit(_apply)
    x = jnp.arange(4, dtype=jnp.float32)
    for gain, bias in ((2.0, 0.0), (3.0, 1.5), (0.5, -2.0)):
      config = _Outer(scale=_Scale(gain=gain), bias=bias)
      np.testing.assert_array_equal(fn(config, x), _apply(config, x))
    self.assertEqual(fn.compiled._cache_size(), 1)  # pylint: disable=protected-access
    fn(_Outer(width=2), x)  # a static field: a program of its own
    fn(_Outer(scale=_Scale(mode='none')), x)
    self.assertEqual(fn.compiled._cache_size(), 3)  # pylint: disable=protected-access

  def test_a_choice_travels_as_its_index_and_none_stays_static(self):
    fn = executables.jit(_chosen)
    x = jnp.arange(4, dtype=jnp.float32)
    for op in _OPS:
      config = _Choosing(op=op)
      self.assertEqual(jax.tree.leaves(config), [_OPS.index(op)])
      np.testing.assert_array_equal(fn(config, x), _chosen(config, x))
    self.assertEqual(fn.compiled._cache_size(), 1)  # pylint: disable=protected-access
    self.assertEqual(jax.tree.leaves(_Choosing(op=None)), [])  # a branch
    np.testing.assert_array_equal(fn(_Choosing(op=None), x), x)
    self.assertEqual(fn.compiled._cache_size(), 2)  # pylint: disable=protected-access
    with self.assertRaisesRegex(ValueError, 'op must hold one of'):
      jax.tree.leaves(_Choosing(op='div'))


if __name__ == '__main__':
  absltest.main()
