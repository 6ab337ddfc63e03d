"""Tests for the settings written once (recovr_jax/config_tree.py) and the
flags derived from them (experiments/common/config_flags.py)."""

import dataclasses
from typing import ClassVar

from absl import flags
from absl.testing import absltest

from experiments.common import config_flags
from experiments.common import run_flags
from recovr_jax import config_tree
from recovr_jax.envs.files import files_source
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
    # Both sources' --start and both users' --drop_rate: one flag each.
    self.assertEqual(shared, {'start', 'drop_rate'})
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
                     .data.user.noise_rate, 0.25)
    with self.assertRaisesRegex(ValueError, 'must be in'):
      run_config.with_setting(base, 'noise_rate', 2.0)
    # Each source's user holds its own settings: the caption user reads
    # --drop_rate, not the world user's --noise_rate.
    files = dataclasses.replace(base, data=files_source.FilesData())
    self.assertEqual(run_config.with_setting(files, 'drop_rate', 0.5)
                     .data.user.drop_rate, 0.5)
    with self.assertRaisesRegex(ValueError,
                                '--noise_rate is for --data=world, not '
                                '--data=files'):
      run_config.with_setting(files, 'noise_rate', 0.1)


if __name__ == '__main__':
  absltest.main()
