"""The sweep benchmark at a tiny size on the CPU: it runs `main` jitted
twice (priming, warm), splits the warm run's time into device and host,
and writes its JSON; its targets pass and fail on constructed figures."""

import json
import pathlib
import tempfile

from absl.testing import absltest

from experiments.bench import run_files
from tests.helpers import forked
from tests.helpers import runs


def _row(sessions, wall, device, methods=23):
  host = wall - device
  return {'sessions': sessions, 'methods': methods, 'wall_s': wall,
          'device_s': device, 'host_s': host, 'host_share': host / wall,
          'host_us_per_session_method': 1e6 * host / (sessions * methods)}


class BenchSweepTest(absltest.TestCase):

  def test_tiny_sweep_writes_its_json(self):
    work = pathlib.Path(tempfile.mkdtemp())
    out = work / 'sweep.json'
    proc = forked.run(
        'experiments.bench.bench_sweep', '--sessions=12',
        f'--work_dir={work / "work"}',
        runs.TINY_MAIN_RUN_ARGS + ',--batch_size=12',
        f'--output_json={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    results = json.loads(out.read_text())
    now, = results['now']
    self.assertEqual((now['sessions'], now['methods']), (12, 1))
    self.assertGreater(now['device_s'], 0)   # the turn programs were timed
    self.assertAlmostEqual(now['device_s'] + now['host_s'], now['wall_s'],
                           delta=0.02)
    self.assertGreater(now['output_bytes'], 0)
    self.assertGreater(now['peak_rss_mib'], 100)
    self.assertIn('device programs', now['profile_s'])
    self.assertIsNone(results['baseline'])
    self.assertLen(results['targets'], 2)
    self.assertIn('| now | 12 |', proc.stdout)

  def test_targets_pass_and_fail(self):
    # Host 10 s of 100 at 10,000 x 23: 43 us, 10%; 2.5 s at 1,000.
    good = [_row(1000, 20, 17.5), _row(10_000, 100, 90)]
    base = [_row(1000, 60, 20), _row(10_000, 250, 90)]
    self.assertTrue(all(t['passed']
                        for t in run_files.sweep_targets(good, base)))
    # Host 60 s of 150 (261 us, 40%), 24x the smaller size's, and the wall
    # time 0.6 of the baseline's: every target fails.
    bad = [_row(1000, 20, 17.5), _row(10_000, 150, 90)]
    self.assertFalse(any(t['passed']
                         for t in run_files.sweep_targets(bad, base)))


if __name__ == '__main__':
  absltest.main()
