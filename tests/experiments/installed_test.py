"""The quickstart's first steps from a folder outside the checkout, with the
package installed as a wheel installs it (not editable): ``experiments`` and
its flag files ship (setup.py), and ``--flagfile=experiments/flagfiles/...``
finds the installed copy (``flagfiles.shipped``)."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]


class InstalledTest(absltest.TestCase):

  def test_quickstart_runs_from_any_folder(self):
    tmp = pathlib.Path(tempfile.mkdtemp())
    site, elsewhere = tmp / 'site', tmp / 'elsewhere'
    elsewhere.mkdir()
    built = subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '-q', '--no-deps',
         '--no-compile', '--target', str(site), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False)
    self.assertEqual(built.returncode, 0, built.stderr[-3000:])
    env = dict(os.environ, PYTHONPATH=str(site))

    def run(*args):
      return subprocess.run([sys.executable, *args], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=600,
                            check=False)

    where = run('-c', 'import experiments, recovr_jax; '
                'print(experiments.__file__); print(recovr_jax.__file__)')
    self.assertEqual(where.returncode, 0, where.stderr[-2000:])
    for line in where.stdout.split():
      self.assertTrue(pathlib.Path(line).is_relative_to(site), line)
    self.assertEqual(run('-m', 'experiments.run', '--helpshort').returncode,
                     0)
    done = run('-m', 'experiments.run',
               '--flagfile=experiments/flagfiles/quickstart',
               '--num_test_triplets=8', '--num_train_triplets=20',
               '--gallery_size=200', '--num_sessions=4', '--batch_size=4',
               '--num_turns=2', '--methods=recovr', '--noplots',
               '--bootstrap_resamples=20', f'--cache_dir={tmp / "cache"}')
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    # The flag file's relative --output_dir lands in the working folder.
    metrics = json.loads((elsewhere / 'out' / 'quickstart' /
                          'metrics.json').read_text())
    self.assertIn('recovr', json.dumps(metrics))
    # A flag file that is neither here nor shipped is absl's to name.
    missing = run('-m', 'experiments.run',
                  '--flagfile=experiments/flagfiles/no_such_file')
    self.assertNotEqual(missing.returncode, 0)
    self.assertIn('no_such_file', missing.stderr)


if __name__ == '__main__':
  absltest.main()
