"""Tests for recovr_jax.profiling."""

import time

from absl.testing import absltest
import jax.numpy as jnp

from recovr_jax import profiling


class ProfileTest(absltest.TestCase):

  def test_parts_are_exclusive_and_add_up(self):
    profile = profiling.Profile()
    with profile.active():
      with profiling.part('outer'):
        time.sleep(0.05)
        with profiling.part('inner'):
          time.sleep(0.1)
        with profiling.part('inner'):
          time.sleep(0.02)
      time.sleep(0.03)
    report = profile.report()
    parts = report['parts']
    self.assertEqual(list(parts)[0], 'inner')  # largest first
    self.assertEqual(parts['inner']['calls'], 2)
    self.assertEqual(parts['outer']['calls'], 1)
    self.assertBetween(parts['inner']['seconds'], 0.11, 0.2)
    self.assertBetween(parts['outer']['seconds'], 0.045, 0.09)  # not 0.17
    self.assertBetween(parts['other']['seconds'], 0.025, 0.08)
    self.assertAlmostEqual(sum(p['seconds'] for p in parts.values()),
                           report['wall_s'], delta=0.005)
    self.assertIn('| inner |', profiling.table(report))

  def test_device_and_host_split_the_wall_time(self):
    profile = profiling.Profile()
    with profile.active():
      with profiling.part(profiling.DEVICE):
        time.sleep(0.05)
      time.sleep(0.03)
    report = profile.report()
    self.assertBetween(report['device_s'], 0.045, 0.09)
    self.assertAlmostEqual(report['device_s'] + report['host_s'],
                           report['wall_s'], delta=0.002)
    self.assertIn('Device (the turn programs', profiling.table(report))

  def test_loading_or_compiling_a_kept_program_is_the_hosts(self):
    # Before, a kept program's loading (or compiling) inside a turn program
    # call was timed as the device's (about 4 s of a warm 1,000-session
    # main's 14.5 s "device" part).
    from recovr_jax import executables  # pylint: disable=g-import-not-at-top
    self.addCleanup(executables.keep_in, executables.folder())
    executables.keep_in(self.create_tempdir().full_path)
    double = executables.jit(lambda x: 2 * x)
    profile = profiling.Profile()
    with profile.active():
      for _ in range(3):
        with profiling.part(profiling.DEVICE):
          profiling.sync(double(jnp.arange(4.0)))
    parts = profile.report()['parts']
    self.assertEqual(parts[profiling.PROGRAMS]['calls'], 1)  # once, found
    self.assertEqual(parts[profiling.DEVICE]['calls'], 3)
    self.assertGreater(parts[profiling.PROGRAMS]['seconds'], 0)

  def test_no_profile_no_record(self):
    with profiling.part('nothing'):
      pass
    wrapped = profiling.timed('double', lambda x: 2 * x)
    self.assertEqual(int(wrapped(jnp.asarray(3))), 6)
    profile = profiling.Profile()
    with profile.active():
      self.assertEqual(int(wrapped(jnp.asarray(4))), 8)
    self.assertNotIn('nothing', profile.report()['parts'])
    self.assertEqual(profile.report()['parts']['double']['calls'], 1)

  def test_counts(self):
    profiling.count('tokens', 5)   # no profile: nothing recorded
    profile = profiling.Profile()
    self.assertNotIn('counts', profile.report())
    with profile.active():
      profiling.count('tokens', 3)
      profiling.count('tokens', 4)
      profiling.count('GFLOP', 0.25)
    self.assertEqual(profile.report()['counts'],
                     {'GFLOP': 0.25, 'tokens': 7})

  def test_text_encoding_counts_its_work(self):
    from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
    encoder = encoders.TextEncoder(shared=False)
    profile = profiling.Profile()
    with profile.active():
      encoder(['a red circle', 'two small blue squares moving left'])
    counts = profile.report()['counts']
    c = encoder._model.config  # pylint: disable=protected-access
    # Both texts fit 8 tokens ([CLS] and [SEP] included): one pass of 16
    # rows x 8 tokens.
    self.assertEqual(counts['text encoding: tokens computed'], 16 * 8)
    self.assertBetween(counts['text encoding: tokens'], 10, 16)
    d, inner = c.hidden_size, c.intermediate_size
    self.assertAlmostEqual(counts['text encoding: GFLOP'], round(
        c.num_hidden_layers * 2 * 16 * 8 * (4 * d * d + 2 * d * inner +
                                            2 * 8 * d) / 1e9, 3))

  def test_one_active_profile(self):
    profile = profiling.Profile()
    with profile.active():
      with self.assertRaisesRegex(RuntimeError, 'already active'):
        with profiling.Profile().active():
          pass
    with profile.active():  # released after the error
      pass

  def test_part_closes_on_error(self):
    profile = profiling.Profile()
    with profile.active():
      with self.assertRaises(KeyError):
        with profiling.part('raises'):
          raise KeyError('x')
      with profiling.part('after'):
        pass
    self.assertEqual(profile.report()['parts']['raises']['calls'], 1)
    self.assertEqual(profile.report()['parts']['after']['calls'], 1)


if __name__ == '__main__':
  absltest.main()
