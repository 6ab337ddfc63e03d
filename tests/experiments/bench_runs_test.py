"""Smoke test of the whole-run benchmark on a tiny world (a subprocess: its
flags share names with the runner's)."""

import json
import pathlib
import tempfile

from absl.testing import absltest

from tests.helpers import entry_points
from tests.helpers import forked



class BenchRunsTest(absltest.TestCase):

  def test_tiny_jitted_run(self):
    out = pathlib.Path(tempfile.mkdtemp()) / 'bench.json'
    tiny = ('--benchmark=v1,--gallery_size=300,--num_test_triplets=12,'
            '--num_train_triplets=20,--methods=recovr,--batch_size=4,'
            '--bootstrap_resamples=20,--bootstrap_also=,'
            '--nocompilation_cache,--noplots')
    proc = forked.run(
        entry_points.module('bench_runs'),
        '--parts=main_jit', '--num_sessions=4', '--num_turns=2',
        f'--run_args={tiny}', '--repeats=1', f'--output_json={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    row = json.loads(out.read_text())['parts']['main_jit']
    self.assertEqual((row['runs'], row['sessions'], row['methods'],
                      row['turns'], row['gallery']), (1, 4, 1, 2, 300))
    # Turn 0 of every session, at most every turn of every session.
    self.assertBetween(row['session_turns'], 4, 4 * 3)
    self.assertAlmostEqual(row['retrieval_gflop'], round(
        2 * 2 * 300 * 384 * row['session_turns'] / 1e9, 3))
    self.assertGreater(row['compute_bound_s'], 0)
    # Every searched session-turn was scored, and no more: a batch of 4
    # is one chunk of 4 (session.stage), so the jitted driver
    # scores all 4 sessions a turn while one still searches.
    self.assertBetween(row['scored_session_turns'], row['session_turns'],
                       4 * 3)
    self.assertIn('jitted sessions', row['profile_s'])
    self.assertIn('| main_jit | 1 | 4 x 1 x 2 |', proc.stdout)
    # The anchor is the driver's matmul: a chunk's 64 sessions x 2
    # channels; the ranking core alone times the scored session-turns.
    results = json.loads(out.read_text())
    self.assertEqual([m['rows'] for m in results['matmul']], [128])
    core = row['ranking_core']
    self.assertEqual((core['gallery'], core['dim'], core['sessions'],
                      core['turns']), (300, 384, 64, 6))
    for part in ('matmul', 'retrieval', 'ranking_core'):
      self.assertGreater(core[f'{part}_us_per_session_turn'], 0)
    self.assertAlmostEqual(row['ranking_core_s'], row['scored_session_turns']
                           * core['ranking_core_us_per_session_turn'] / 1e6,
                           places=5)
    self.assertIn(f"| main_jit | {row['scored_session_turns']:,} | ",
                  proc.stdout.split('ranking core alone s')[1])
    # MiniLM's work as the run counted it, and its FLOP bound.
    counts = row['counts']
    self.assertGreater(counts['text encoding: tokens'], 0)
    self.assertGreaterEqual(counts['text encoding: tokens computed'],
                            counts['text encoding: tokens'])
    self.assertGreater(counts['text encoding: GFLOP'], 0)
    self.assertGreater(row['text_bound_s'], 0)
    self.assertIn('| main_jit | ', proc.stdout.split('tokens computed')[1])


if __name__ == '__main__':
  absltest.main()
