"""A batch's trajectory rows, built column-wise, are the rows the runner
built a value at a time (its former loop is the oracle here), to the byte
once encoded."""

import functools
import json
import types

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from recovr_jax.protocol import environment
from recovr_jax.run import reporting
from recovr_jax.run import trajectories


def _oracle(name, batch, env, result, errors, ids):
  rows = []
  for i, sess in enumerate(batch):
    rows.append({
        'method': name, 'session': int(sess),
        'reference': int(env.reference[sess]),
        'target': int(env.target[sess]),
        'reference_id': ids(env.reference[sess]),
        'target_id': ids(env.target[sess]),
        'error': errors.get(str(i)) or errors.get(i),
        'turns': [dict(rec, top10=top.tolist(),
                       top10_ids=[ids(v) for v in top],
                       top10_scores=[round(float(x), 6) for x in
                                     result.scores[i, t, :len(top)]])
                  for t, rec in enumerate(result.records[i])
                  for top in [result.displayed[i, t, :10]]]})
  return rows


class TrajectoryRowsTest(parameterized.TestCase):

  @parameterized.parameters((100, None), (6, ('a/1', 'b', 'c', 'd')),
                            (12, None))
  def test_equal_to_the_value_at_a_time_rows(self, k, video_ids):
    rng = np.random.default_rng(k)
    n, s, turns = 40, 7, 4
    if video_ids is not None:
      n = len(video_ids)
    displayed = rng.integers(-1, n, (s, turns, k)).astype(np.int32)
    shown = min(k, environment.SHOWN)
    scores = rng.random((s, turns, shown)).astype(np.float32)
    scores[0, 0, 0] = -np.inf  # a pad's score
    scores[1, 1, :2] = [1 / 128, 0.0000125]  # exact halves at 6 places
    records = [[{'turn': t, 'action': 'keep' if t else None}
                for t in range(turns)] for _ in range(s)]
    result = environment.BatchResult(
        displayed=displayed, top_scores=scores[..., 0], records=records,
        scores=scores)
    env = types.SimpleNamespace(reference=rng.integers(0, n, 50),
                                target=rng.integers(0, n, 50))
    batch = np.asarray([3, 9, 11, 20, 21, 30, 49])
    errors = {'2': 'boom', 5: 'bang'}
    ids = functools.partial(reporting.video_id, video_ids)
    got = trajectories.block('m', batch, env, result, errors, ids).rows()
    want = _oracle('m', batch, env, result, errors, ids)
    encode = json.JSONEncoder(sort_keys=True).encode
    self.assertEqual([encode(r) for r in got], [encode(r) for r in want])

  def test_rounding_equals_pythons_round(self):
    rng = np.random.default_rng(0)
    halves = (np.arange(1, 5000) + 0.5) / 1e6
    x = np.concatenate([
        rng.random(50_000), 0.05 * rng.random(50_000), halves,
        np.nextafter(halves.astype(np.float32), np.float32(1)),
        [1 / 128, -1 / 128, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e7,
         -3.5e-7]]).astype(np.float32)
    self.assertEqual(json.dumps(trajectories.rounded(x).tolist()),
                     json.dumps([round(float(v), 6) for v in x]))


if __name__ == '__main__':
  absltest.main()
