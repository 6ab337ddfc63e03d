"""One run as two processes on JAX's distributed runtime (gloo on CPU):
the outputs equal the one-process run's byte for byte, for the host and
the jitted driver; the launcher stops every process when one fails."""

import pathlib
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
from absl.testing import parameterized

from tests import run_test

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The runner tests' tiny world, as command-line flags.
TINY = [f'--{k}={v}' for k, v in run_test.TINY.items()
        if not isinstance(v, bool)] + ['--nocompilation_cache',
                                       '--methods=recovr']


def _module(*args):
  return subprocess.run([sys.executable, '-m', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=900)


class TwoProcessesTest(parameterized.TestCase):

  @parameterized.parameters('host', 'jit')
  def test_two_processes_equal_one(self, simulation):
    root = pathlib.Path(tempfile.mkdtemp())
    flags = TINY + [f'--simulation={simulation}',
                    f'--cache_dir={root / "cache"}']
    # One process: in this one (run_main puts its cache in root/cache).
    run_test.run_main(root / 'one', methods=['recovr'], simulation=simulation)
    two = _module('experiments.launch', '--num_processes=2', '--',
                  *flags, f'--output_dir={root / "two"}')
    self.assertEqual(two.returncode, 0, two.stderr[-3000:])
    for name in ('metrics.json', 'trajectories.jsonl', 'bootstrap.json'):
      self.assertEqual((root / 'one' / name).read_bytes(),
                       (root / 'two' / name).read_bytes(), name)
    # Process 1 ran its share of the batches (1 of 0, 1, 2).
    self.assertIn('process 1: recovr batch 2 of 3 done',
                  (root / 'two' / 'process_1.log').read_text())
    self.assertFalse((root / 'two' / 'INCOMPLETE').exists())


class LaunchTest(absltest.TestCase):

  def test_a_failing_process_stops_the_others_and_is_named(self):
    start = time.time()
    out = pathlib.Path(tempfile.mkdtemp())
    proc = _module('experiments.launch', '--num_processes=3',
                   '--module=tests.launch_fake', '--',
                   f'--output_dir={out}')
    self.assertEqual(proc.returncode, 3, proc.stderr)
    self.assertIn('process 1 of 3 exited with code 3', proc.stderr)
    self.assertIn('process_1.log', proc.stderr)
    self.assertLess(time.time() - start, 60)  # the others did not sleep on

  def test_the_launcher_sets_the_process_flags_itself(self):
    proc = _module('experiments.launch', '--num_processes=2', '--',
                   '--process_id=1')
    self.assertEqual(proc.returncode, 1)
    self.assertIn('the launcher sets it for each process', proc.stderr)


if __name__ == '__main__':
  absltest.main()
