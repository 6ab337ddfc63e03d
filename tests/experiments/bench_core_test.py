"""The core benchmark on a tiny configuration, and its NumPy baselines.

The benchmark runs in a forked process (``tests/helpers/forked.py``): its
flags share names with the runner's.
"""

import json
import pathlib
import tempfile

from absl.testing import absltest
import numpy as np

from experiments.bench import plain_loop

from tests.helpers import forked



def rings(rng, s, w, c, k, pool, n_demote):
  ids = np.stack([np.stack([np.stack([rng.choice(pool, k, replace=False)
                                      for _ in range(c)]) for _ in range(w)])
                  for _ in range(s)]).astype(np.int32)
  demote = ids[:, :n_demote, 0, 0].copy()
  demote[:, -1] = -1  # an unused slot
  caps = rng.integers(1, 12, (s, n_demote)).astype(np.int32)
  return ids, demote, caps


class NumpyBaselineTest(absltest.TestCase):

  def test_vectorised_numpy_equals_the_python_loop(self):
    # Small pools: ids recur across lists and turns, demoted ids sit at
    # every position, two demotion entries can name one id.
    rng = np.random.default_rng(0)
    for k, pool in ((10, 14), (6, 30), (20, 21)):
      ids, demote, caps = rings(rng, 40, 4, 2, k, pool, 4)
      demote[::3, 1] = demote[::3, 0]  # one id twice, two caps
      weights = [(4 - a) / 4 for a in range(4)]
      loop = np.array([plain_loop.python_session(
          ids[i].tolist(), demote[i].tolist(), caps[i].tolist(), weights, k)
                       for i in range(len(ids))])
      vec = plain_loop.numpy_sessions(ids, demote, caps, weights, k)
      np.testing.assert_array_equal(vec, loop, err_msg=f'k={k} pool={pool}')

  def test_vectorised_rank_cap_keeps_padding_last(self):
    ids = np.array([[[5, 7, 9, -1, -1]]])
    got = plain_loop.numpy_rank_cap(ids, np.array([5]), np.array([3]))
    np.testing.assert_array_equal(got, [[[7, 9, 5, -1, -1]]])


class BenchCoreTest(absltest.TestCase):

  def test_tiny_run_reports_targets_profile_and_machine(self):
    out = pathlib.Path(tempfile.mkdtemp()) / 'bench.json'
    proc = forked.run(
        'experiments.bench.bench_core',
        '--shapes=6000x16,3000x8', '--k=10', '--b=8', '--sessions=32',
        '--n=2000', '--d=16', '--block_size=2048', '--tune_sizes',
        '--block_sizes=4096', '--group_sizes=0,4',
        f'--output_json={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    got = json.loads(out.read_text())
    self.assertEqual([(r['config']['n'], r['config']['d'])
                      for r in got['retrieval']], [(6000, 16), (3000, 8)])
    for r in got['retrieval']:
      self.assertEqual(r['top_k_id_agreement_with_numpy'], 1.0)
      self.assertIn('met', r['targets'])
    fused = got['fusion']
    self.assertEqual(fused['fused_id_agreement_with_numpy_vectorised'], 1.0)
    self.assertIn('numpy_vectorised', fused['seconds'])
    self.assertEqual(set(fused['profile_seconds']), {
        'rank_cap_ring_lists', 'fuse_without_rank_cap', 'id_sort',
        'top_k_unmasked'})
    self.assertIn('met', fused['targets'])
    self.assertTrue(got['machine_kind'])
    self.assertIn(got['machine']['cpu']['model'], proc.stdout)
    # The sizes measured on this part, the library's among them.
    tuned = got['sizes_on_this_part']
    self.assertEqual(tuned['library_sizes'], '16384x16')
    self.assertEqual(set(tuned['seconds']), {'4096x0', '4096x4', '16384x16'})
    self.assertIn(tuned['fastest'], tuned['seconds'])
    self.assertIn('the library uses 16384x16', proc.stdout)

  def test_bad_shape_is_refused_naming_the_flag(self):
    proc = forked.run('experiments.bench.bench_core', '--shapes=100000',
                      '--output_json=')
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn("--shapes: '100000' is not NxD", proc.stderr)


if __name__ == '__main__':
  absltest.main()
