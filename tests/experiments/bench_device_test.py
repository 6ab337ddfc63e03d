"""The device check at tiny sizes on the CPU: it runs end to end and writes
its JSON with the device, the precision and each measurement."""

import json
import pathlib
import tempfile

from absl.testing import absltest

from tests.helpers import forked
from tests.helpers import runs



class BenchDeviceTest(absltest.TestCase):

  def test_tiny_check_writes_its_json(self):
    out = pathlib.Path(tempfile.mkdtemp()) / 'device.json'
    proc = forked.run(
        'experiments.bench.bench_device',
        '--gallery_sizes=3000,5000', '--bf16_above=4000', '--dim=32',
        '--k=10', '--queries=8', '--fusion_sessions=64', '--repeats=2',
        '--main_sessions=12', runs.TINY_MAIN_RUN_ARGS,
        f'--output_json={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    results = json.loads(out.read_text())
    self.assertEqual(results['device']['backend'], 'cpu')
    self.assertEqual(results['device']['precision'], 'highest')
    self.assertEqual([r['n'] for r in results['topk']], [3000, 5000])
    self.assertEqual([r['storage'] for r in results['topk']],
                     ['float32', 'bfloat16'])
    for row in results['topk']:
      self.assertTrue(row['equal_to_full_top_k'])
      self.assertGreater(row['share_of_matmul'], 0)
    self.assertGreater(results['fusion']['sessions_per_s'], 0)
    main, = results['main']
    self.assertEqual((main['sessions'], main['methods']), (12, 1))
    self.assertGreater(main['scored_session_turns'], 0)
    self.assertGreater(main['share_of_compute_bound'], 0)
    self.assertIn('jitted sessions at', proc.stdout)


class BenchDeviceFlagsTest(absltest.TestCase):

  def test_help_exits_0(self):
    for arg in ('--help', '--helpshort'):
      proc = forked.run('experiments.bench.bench_device', arg)
      self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
      self.assertIn('--require_backend', proc.stdout)

  def test_another_backend_than_required_fails_at_once(self):
    proc = forked.run('experiments.bench.bench_device',
                      '--require_backend=gpu', '--parts=fusion')
    self.assertEqual(proc.returncode, 1)
    self.assertIn('--require_backend=gpu: JAX runs on cpu', proc.stderr)
    self.assertNotIn('fusion + rank-cap', proc.stdout)  # nothing measured


if __name__ == '__main__':
  absltest.main()
