"""Smoke test of the end-to-end benchmark on a tiny configuration.

Runs in a forked process (``tests/helpers/forked.py``): the benchmark's
flags share names with the runner's.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest

from tests.helpers import entry_points
from tests.helpers import forked

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_benchmark(test, module, args):
  """Runs ``experiments.<module>`` with ``args`` in a forked process (its flags
  share names with the runner's), asserts it exits 0; returns its JSON."""
  out = pathlib.Path(tempfile.mkdtemp())
  proc = forked.run(entry_points.module(module), *args,
                    f'--cache_dir={out / "cache"}',
                    f'--output_json={out / "bench.json"}')
  test.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
  return json.loads((out / 'bench.json').read_text())


def assert_refused(test, module, flag, message):
  """``experiments.<module> <flag>`` exits non-zero saying ``message``."""
  proc = forked.run(entry_points.module(module), flag)
  test.assertNotEqual(proc.returncode, 0)
  test.assertIn(message, proc.stderr)


class BenchSessionsTest(absltest.TestCase):

  def test_tiny_run(self):
    result = run_benchmark(self, 'bench_sessions', [
        '--num_sessions=12', '--num_turns=2', '--gallery_size=1000',
        '--repeats=1', '--check_sessions=4', '--session_devices=2'])
    self.assertEqual(set(result['seconds']),
                     {'jit', 'jit_split', 'host', 'per_session'})
    self.assertTrue(result['jit_split_equals_jit'])
    same = result['host_equals_jit_same_draws']
    self.assertEqual(same['identical_lists'], 12)
    # The independent per-session NumPy reference shows the jitted lists.
    plain = result['per_session_equals_jit_same_draws']
    self.assertEqual((plain['sessions'], plain['identical_lists']), (4, 4))
    self.assertLen(result['r_at_1']['jit (jax draws)'], 3)

  def test_bad_flags(self):
    assert_refused(self, 'bench_sessions', '--gallery_size=10',
                   '--gallery_size must be in 1000..')



class BenchMethodsTest(absltest.TestCase):

  def test_tiny_run(self):
    result = run_benchmark(self, 'bench_methods', [
        '--methods=umivr', '--num_sessions=8', '--per_session_sessions=3',
        '--num_turns=2', '--gallery_size=1000', '--repeats=1'])
    row = result['methods']['umivr']
    self.assertEqual(row['per_session_identical_lists'], 3)
    self.assertTrue(row['per_session_same_r_at_1'])
    self.assertGreater(row['speedup'], 0)
    self.assertIn('blas', json.dumps(result['machine']).lower())



class BenchDistributedTest(absltest.TestCase):

  def test_tiny_gallery_split_over_two_processes(self):
    out = pathlib.Path(tempfile.mkdtemp()) / 'bench.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'experiments.bench.bench_distributed',
         '--parts=gallery', '--gallery_rows=5000', '--d=16', '--b=4',
         '--k=10', '--repeats=1', f'--output_json={out}'],
        cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS='cpu'),
        capture_output=True, text=True, timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    result = json.loads(out.read_text())['gallery']
    self.assertTrue(result['lists_equal'])
    self.assertEqual([r['rows_held'] for r in result['by_processes']['2']],
                     [2500, 2500])
    self.assertEqual(result['by_processes']['1'][0]['rows_held'], 5000)

  def test_bad_flags(self):
    assert_refused(self, 'bench_distributed', '--processes=1,0',
                   '--processes must be >= 1')
    assert_refused(self, 'bench_distributed', '--jit_layouts=2',
                   'expected PROCESSESxDEVICES')

if __name__ == '__main__':
  absltest.main()
