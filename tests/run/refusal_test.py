"""A refused command never changes a finished run: every check that can
refuse runs before anything is written to the output folder (before, a
refusal after the folder was claimed left a finished run marked
INCOMPLETE with the refused command's flags, and --noresume had deleted
its outputs), and a refused first run leaves no folder behind."""

import pathlib
from unittest import mock

from absl import app
from absl.testing import absltest
from absl.testing import parameterized

from recovr_jax.run import resources
from recovr_jax.run import runner
from recovr_jax.run import validation
from tests.helpers import runs


def _snapshot(folder: pathlib.Path) -> dict:
  return {str(p.relative_to(folder)): p.read_bytes()
          for p in sorted(folder.rglob('*')) if p.is_file()}


def _refuse_input(*args, **kwargs):
  del args, kwargs
  raise validation.ConfigError('--cache_dir: a text cache that is a folder')


def _full_disk(*args, **kwargs):
  del args, kwargs
  raise ValueError('--output_dir: the run writes about 9 MiB and the disk '
                   'has 1 MiB free')


class RefusalTest(parameterized.TestCase):

  @parameterized.product(refusal=('input', 'disk'), resume=(True, False))
  def test_a_finished_run_stays_as_it_was(self, refusal, resume):
    out = pathlib.Path(self.create_tempdir().full_path) / 'run'
    self.assertIsNone(runs.run_tiny(out, methods=['recovr']))
    before = _snapshot(out)
    self.assertNotIn('INCOMPLETE', before)
    patch = (mock.patch.object(runner, 'build', _refuse_input)
             if refusal == 'input' else
             mock.patch.object(resources, 'check_disk', _full_disk))
    with patch, self.assertRaises(app.UsageError):
      # Other flags (a refused rerun with other settings is no resume).
      runs.run_tiny(out, methods=['recovr'], resume=resume)
    self.assertEqual(_snapshot(out), before)

  def test_a_refused_first_run_leaves_no_folder(self):
    out = pathlib.Path(self.create_tempdir().full_path) / 'new' / 'run'
    with mock.patch.object(resources, 'check_disk', _full_disk), \
        self.assertRaisesRegex(app.UsageError, 'disk has 1 MiB free'):
      runs.run_tiny(out, methods=['recovr'])
    self.assertFalse(out.exists())


  def test_a_missing_text_encoder_dir_is_named_before_any_work(self):
    # Before, checksums.path_digest raised FileNotFoundError from the
    # run's identity, leaving an empty output folder.
    out = pathlib.Path(self.create_tempdir().full_path) / 'new' / 'run'
    with self.assertRaisesRegex(app.UsageError, '--text_encoder_dir '
                                '/no/such/minilm: no such directory'):
      runs.run_tiny(out, methods=['recovr'],
                    text_encoder_dir='/no/such/minilm')
    self.assertFalse(out.exists())

if __name__ == '__main__':
  absltest.main()
