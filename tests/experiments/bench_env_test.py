"""Benchmarks re-run themselves without the OpenBLAS variables that slow
NumPy, and record what they removed and the BLAS in use."""

import json
import os
import subprocess
import sys

from absl.testing import absltest

_CODE = '''
import json, os
from experiments.bench import bench_common
bench_common.full_speed_blas()
info = bench_common.environment()
print(json.dumps({"core": os.environ.get("OPENBLAS_CORETYPE"),
                  "l2": os.environ.get("OPENBLAS_L2_SIZE"),
                  "removed": info["blas_env_removed"],
                  "cpu": info["cpu"],
                  "line": bench_common.blas_line(info)}))
'''


class BenchEnvTest(absltest.TestCase):

  def test_blas_variables_are_removed_and_recorded(self):
    env = dict(os.environ, OPENBLAS_CORETYPE='Haswell',
               OPENBLAS_L2_SIZE='262144', JAX_PLATFORMS='cpu')
    out = subprocess.run([sys.executable, '-c', _CODE], env=env, check=True,
                         capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    got = json.loads(out.stdout.strip().splitlines()[-1])
    self.assertIsNone(got['core'])
    self.assertIsNone(got['l2'])
    self.assertEqual(got['removed'], {'OPENBLAS_CORETYPE': 'Haswell',
                                      'OPENBLAS_L2_SIZE': '262144'})
    self.assertIn('removed from the environment', got['line'])
    self.assertIn('re-running without', out.stderr)
    # The CPU is recorded with the features that pick the kernels.
    self.assertNotEmpty(got['cpu']['model'])
    self.assertIn(got['cpu']['model'], got['line'])
    if os.path.exists('/proc/cpuinfo') and 'avx2' in open(
        '/proc/cpuinfo').read():
      self.assertIn('avx2', got['cpu']['flags'])


if __name__ == '__main__':
  absltest.main()
