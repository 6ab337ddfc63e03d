"""A refused flag value is one clear line and a hint, not the whole help."""

import pathlib
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[1]


class BadFlagValueTest(parameterized.TestCase):

  @parameterized.parameters(
      ('run', ['--methods=bogus'], 'unknown --methods bogus; valid: recovr'),
      ('eval_reading', ['--noise_rates=2'], '--noise_rates: each must be in'),
      ('fidelity', ['--main_dir=/nonexistent'], '/nonexistent/metrics.json'),
  )
  def test_one_line_and_the_hint(self, script, args, expected):
    proc = subprocess.run([sys.executable, '-m', f'experiments.{script}',
                           *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
    lines = [l for l in proc.stderr.splitlines()
             if not l.startswith(('W', 'I')) or ': error: ' in l]
    self.assertLess(len(lines), 10, proc.stderr)
    self.assertIn(f'experiments.{script}: error: ', proc.stderr)
    self.assertIn(expected, proc.stderr)
    self.assertIn('Pass --helpshort to see the flags.', proc.stderr)
    self.assertNotIn('flags:', proc.stderr)  # no help dump


if __name__ == '__main__':
  absltest.main()
