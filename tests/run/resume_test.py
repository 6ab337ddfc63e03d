"""Resuming a run: a repeated command resumes byte for byte, a full disk
or a bad cache path is named, and outputs that would not fit are refused
before the work."""

import errno
import shutil
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest

from recovr_jax.run import outputs
from recovr_jax.run import resources
from tests.helpers import runs


class ResumeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    flags.FLAGS.mark_as_parsed()
    runs.smoke_run(cls)

  def test_resume_after_first_batch_is_identical(self):
    copy = self.root / 'resumed'
    shutil.copytree(self.out, copy)
    for method_dir in (copy / 'batches').iterdir():
      for path in method_dir.iterdir():
        if not path.name.startswith('00000'):
          if path.is_dir():
            shutil.rmtree(path)
          else:
            path.unlink()
    for name in ('metrics.json', 'trajectories.jsonl', 'report.md'):
      (copy / name).unlink()
    runs.run_tiny(copy, methods=['recovr', 'ivr'])
    for name in ('metrics.json', 'metrics.csv', 'failure_modes.json',
                 'bootstrap.json', 'trajectories.jsonl'):
      self.assertEqual((copy / name).read_bytes(),
                       (self.out / name).read_bytes(), name)

  def test_a_full_disk_names_the_file_and_the_same_command_resumes(self):
    copy = self.root / 'full_disk'
    shutil.copytree(self.out, copy)
    for name in ('metrics.json', 'trajectories.jsonl', 'ranks.csv'):
      (copy / name).unlink()
    real_write = outputs.write

    def full(config, out, *args, **kwargs):
      raise OSError(errno.ENOSPC, 'No space left on device',
                    str(out / 'trajectories.jsonl'))

    with mock.patch.object(outputs, 'write', full):
      # experiments.run exits 1 with this one line (absl prints what main
      # returns).
      self.assertEqual(
          runs.run_tiny(copy, methods=['recovr', 'ivr']),
          f'FAILED: {copy / "trajectories.jsonl"}: could not be written (No '
          f'space left on device); {copy / outputs.INCOMPLETE} is kept: free '
          'space and rerun the command (its batches are saved; it writes the '
          'outputs again)')
    self.assertTrue((copy / outputs.INCOMPLETE).exists())
    self.assertIs(outputs.write, real_write)
    runs.run_tiny(copy, methods=['recovr', 'ivr'])  # the same command
    self.assertFalse((copy / outputs.INCOMPLETE).exists())
    for name in ('metrics.json', 'ranks.csv', 'trajectories.jsonl'):
      self.assertEqual((copy / name).read_bytes(),
                       (self.out / name).read_bytes(), name)

  def test_a_cache_path_that_is_no_file_is_named_before_the_work(self):
    from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
    out, cache = self.root / 'blocked', self.root / 'blocked_cache'
    encoders.TextEncoder().cache_path(cache).mkdir(parents=True)
    with self.assertRaisesRegex(app.UsageError, 'where the text embedding '
                                'cache goes, is not a file: remove it'):
      runs.run_tiny(out, methods=['recovr'], cache_dir=str(cache))
    self.assertFalse((out / 'batches').exists())  # no session ran
    # Refused before any work in a new directory: nothing of it stays, so
    # the corrected command is not "a run with other settings".
    for name in ('INCOMPLETE', 'flags.txt', 'resolved_config.json'):
      self.assertFalse((out / name).exists(), name)

  def test_outputs_that_would_not_fit_are_refused_before_the_work(self):
    out = self.root / 'no_room'
    # 10 sessions x 1 method x 4 turns: about 95 KiB (resources.output_bytes).
    asked = resources.output_bytes(runs.TINY['num_sessions'], 1,
                                   runs.TINY['num_turns'], 100, False, False)
    self.assertEqual(round(asked / 1024), 95)
    with mock.patch('shutil.disk_usage',
                    return_value=mock.Mock(free=16 << 10)):
      with self.assertRaisesRegex(app.UsageError, f'--output_dir={out}: '
                                  'the run writes about 95 KiB and the disk '
                                  'has 16 KiB free'):
        runs.run_tiny(out, methods=['recovr'])
    self.assertEqual([p for p in out.rglob('*') if p.is_file()
                      and 'batches' in p.parts], [])  # no session ran


if __name__ == '__main__':
  absltest.main()
