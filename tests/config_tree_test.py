"""Tests for the settings written once (recovr_jax/config_tree.py) and the
flags derived from them (experiments/common/config_flags.py)."""

import dataclasses
from typing import ClassVar

from absl import flags
from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from experiments.common import config_flags
from experiments.common import run_flags
from recovr_jax import config_tree
from recovr_jax.run import run_config


@dataclasses.dataclass(frozen=True)
class _Inner:
  HELP_GROUP: ClassVar[str] = 'Inner'
  #: How sharp the toy is.
  sharpness: float = config_tree.setting(0.5, flag='toy_sharpness',
                                         sweep=True)
  #: The toy's mode.
  mode: str = config_tree.setting('a', choices=('a', 'b'))


@dataclasses.dataclass(frozen=True)
class _Toy:
  HELP_GROUP: ClassVar[str] = 'Toy'
  #: How many toys, at least one.
  toy_count: int = config_tree.setting(3, lower_bound=1)
  #: Pair of levels.
  levels: tuple[int, int] = config_tree.setting(
      (1, 2), elements=('toy_low', 'toy_high'),
      element_help=('The low level.', 'The high level.'), sweep=True)
  #: A level from a fixed few.
  toy_level: int = config_tree.setting(1, choices=(1, 2, 3))
  inner: _Inner = _Inner()
  plain: int = 7  # not a setting: no flag


class ConfigTreeTest(absltest.TestCase):

  def test_a_setting_written_once_is_a_flag_with_its_help(self):
    values = flags.FlagValues()
    leaves = config_flags.define(_Toy, 'toy_module', flag_values=values)
    self.assertEqual([leaf.name for leaf in leaves],
                     ['toy_count', 'toy_low', 'toy_high', 'toy_level',
                      'toy_sharpness', 'mode'])
    self.assertEqual(values['toy_count'].help, 'How many toys, at least one.')
    self.assertEqual(values['toy_high'].help, 'The high level.')
    self.assertEqual(values['toy_sharpness'].default, 0.5)
    self.assertNotIn('plain', values)
    values(['prog', '--toy_high=9', '--mode=b', '--toy_level=3'])
    built = _Toy(**config_tree.kwargs(_Toy, config_flags.values(leaves,
                                                                values)))
    self.assertEqual(built, _Toy(levels=(1, 9), toy_level=3,
                                 inner=_Inner(mode='b')))
    for bad in ('--mode=c', '--toy_level=4', '--toy_count=0'):
      with self.subTest(bad=bad), self.assertRaises(flags.IllegalFlagValueError):
        values(['prog', bad])
    self.assertEqual(config_flags.help_groups(leaves),
                     (('Toy', ['toy_count', 'toy_low', 'toy_high',
                               'toy_level']),
                      ('Inner', ['toy_sharpness', 'mode'])))

  def test_the_sweepable_settings_and_their_replacement(self):
    self.assertEqual(list(config_tree.sweepable(_Toy)),
                     ['toy_low', 'toy_high', 'toy_sharpness'])
    toy = _Toy()
    leaf = config_tree.sweepable(_Toy)['toy_high']
    self.assertEqual(config_tree.replace(toy, leaf, 5).levels, (1, 5))
    leaf = config_tree.sweepable(_Toy)['toy_sharpness']
    self.assertEqual(config_tree.replace(toy, leaf, 0.1).inner.sharpness, 0.1)

  def test_a_setting_without_help_is_refused(self):

    @dataclasses.dataclass(frozen=True)
    class Silent:
      # an ordinary comment is not help
      x: int = config_tree.setting(1)

    with self.assertRaisesRegex(TypeError, r'Silent\.x is a setting without'):
      config_tree.leaves(Silent)

  def test_a_flag_declared_twice_differently_is_refused(self):

    @dataclasses.dataclass(frozen=True)
    class Other:
      #: Same name, another default.
      toy_count: int = config_tree.setting(4)

    values = flags.FlagValues()
    config_flags.define(_Toy, 'toy_module', flag_values=values)
    with self.assertRaisesRegex(TypeError, '--toy_count is declared twice'):
      config_flags.define(Other, 'other_module', flag_values=values)

  def test_the_run_config_tree(self):
    leaves = config_tree.leaves(run_config.RunConfig)
    names = [leaf.name for leaf in leaves]
    shared = {n for n in names if names.count(n) > 1}
    self.assertEqual(shared, {'start'})  # both sources' --start, one flag
    self.assertEqual(set(names), {leaf.name for leaf in run_flags.LEAVES})
    for leaf in leaves:
      self.assertIn(leaf.name, flags.FLAGS)
      self.assertTrue(leaf.help.strip(), leaf.name)
    sweepable = run_config.SWEEPABLE
    self.assertEqual({leaf.name for leaf in leaves if leaf.setting.sweep},
                     set(sweepable))
    self.assertEqual(sweepable['ask_mode'].dotted, 'settings.ask.mode')
    self.assertEqual(sweepable['kappa_neu'].dotted, 'loop.kappa.1')
    base = run_config.RunConfig(methods=('recovr',), output_dir='/tmp/x')
    changed = run_config.with_setting(base, 'kappa_neu', 7)
    self.assertEqual(changed.loop.kappa, (11, 7, 2))
    self.assertEqual(run_config.with_setting(base, 'ask_mode', 'never')
                     .settings.ask.mode, 'never')
    self.assertEqual(run_config.with_setting(base, 'noise_rate', '0.25')
                     .user.noise_rate, 0.25)
    with self.assertRaisesRegex(ValueError, 'must be in'):
      run_config.with_setting(base, 'noise_rate', 2.0)


@dataclasses.dataclass(frozen=True)
class _Scale:
  gain: float = config_tree.number(2.0)
  steps: tuple[int, int] = config_tree.number((1, 2))
  mode: str = 'add'

  def __post_init__(self):
    if not self.gain > 0:  # needs a concrete value: join must not call it
      raise ValueError('gain must be > 0')


@dataclasses.dataclass(frozen=True)
class _Outer:
  scale: _Scale = _Scale()
  bias: float = config_tree.setting(0.0, traced=True)
  width: int = 3  # a shape: static


def _apply(config, x):
  y = x[:config.width] * config.scale.gain + config.bias
  return y + config.scale.steps[1] if config.scale.mode == 'add' else y


class TracedSettingsTest(absltest.TestCase):

  def test_split_and_join(self):
    config = _Outer(scale=_Scale(gain=3.0, steps=(4, 5)), bias=0.5)
    skeleton, numbers = config_tree.split(config)
    self.assertEqual(numbers, {'scale.gain': 3.0, 'scale.steps': (4, 5),
                               'bias': 0.5})
    self.assertIs(skeleton.bias, config_tree.TRACED)
    self.assertEqual(skeleton.width, 3)
    self.assertEqual(skeleton, config_tree.split(_Outer())[0])
    self.assertNotEqual(skeleton, config_tree.split(_Outer(width=2))[0])
    self.assertEqual(config_tree.join(skeleton, numbers), config)
    with self.assertRaisesRegex(TypeError, 'bias must hold a number'):
      config_tree.split(_Outer(bias='x'))

  def test_jit_compiles_once_for_every_number(self):
    fn = config_tree.jit(_apply)
    x = jnp.arange(4, dtype=jnp.float32)
    for gain, bias in ((2.0, 0.0), (3.0, 1.5), (0.5, -2.0)):
      config = _Outer(scale=_Scale(gain=gain), bias=bias)
      np.testing.assert_array_equal(fn(config, x), _apply(config, x))
    self.assertEqual(fn.compiled._cache_size(), 1)  # pylint: disable=protected-access
    fn(_Outer(width=2), x)  # a static field: a program of its own
    fn(_Outer(scale=_Scale(mode='none')), x)
    self.assertEqual(fn.compiled._cache_size(), 3)  # pylint: disable=protected-access

  def test_a_choice_is_traced_as_its_index_and_none_stays_static(self):
    fn = config_tree.jit(_chosen)
    x = jnp.arange(4, dtype=jnp.float32)
    for op in _OPS:
      config = _Choosing(op=op)
      skeleton, numbers = config_tree.split(config)
      self.assertIs(skeleton.op, config_tree.TRACED)
      self.assertEqual(numbers, {'op': _OPS.index(op)})
      # Joined, it holds the index (a tracer under jit), read the same way.
      self.assertEqual(config_tree.join(skeleton, numbers).op,
                       _OPS.index(op))
      np.testing.assert_array_equal(fn(config, x), _chosen(config, x))
    self.assertEqual(fn.compiled._cache_size(), 1)  # pylint: disable=protected-access
    skeleton, numbers = config_tree.split(_Choosing(op=None))
    self.assertIsNone(skeleton.op)  # a branch: a program of its own
    self.assertEqual(numbers, {})
    np.testing.assert_array_equal(fn(_Choosing(op=None), x), x)
    self.assertEqual(fn.compiled._cache_size(), 2)  # pylint: disable=protected-access
    with self.assertRaisesRegex(TypeError, "op must hold one of"):
      config_tree.split(_Choosing(op='div'))


_OPS = ('add', 'mul', 'neg')


@dataclasses.dataclass(frozen=True)
class _Choosing:
  op: str | None = config_tree.choice('add', _OPS)


def _chosen(config, x):
  if config.op is None:
    return x
  return jnp.where(config_tree.is_choice(config.op, 'add', _OPS), x + 2.0,
                   jnp.where(config_tree.is_choice(config.op, 'mul', _OPS),
                             x * 3.0, -x))


if __name__ == '__main__':
  absltest.main()
