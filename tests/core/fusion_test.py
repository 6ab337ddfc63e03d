"""Tests for recovr_jax.fusion against a per-candidate Python reference."""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import numpy as np

from recovr_jax.core import fusion
from recovr_jax import fuse
from tests.core.demotion_test import reference_rank_cap

RRF_METHODS = ('tw_rrf', 'static_rrf', 'uniform_rrf', 'penalty_rrf')


def reference_scores(ids, scores, valid, method, k=60, recency='linear',
                     gamma=0.5, channel_weights=None, penalty_rank=None):
  """docs/definitions.md §4 read literally, in float64: {id: fused score}."""
  w, c, kk = ids.shape
  lam = np.ones(c) if channel_weights is None else np.asarray(channel_weights)
  if method == 'uniform_rrf' or recency == 'uniform':
    turn_w = np.ones(w)
  elif recency == 'linear':
    turn_w = (w - np.arange(w)) / w
  else:
    turn_w = gamma ** np.arange(w, dtype=np.float64)
  r_pen = kk if penalty_rank is None else penalty_rank
  lists = [(a, ch) for a in range(w) for ch in range(c)
           if valid[a, ch] and (method != 'static_rrf' or a == 0)]
  where = {}
  for a, ch in lists:
    for p in range(kk):
      d = int(ids[a, ch, p])
      if d >= 0:
        where.setdefault(d, {})[(a, ch)] = (p + 1, float(scores[a, ch, p]))
  fused = {}
  for d, hits in where.items():
    if method == 'sim_max':
      fused[d] = max(s for _, s in hits.values())
    elif method == 'sim_sum':
      fused[d] = sum(s for _, s in hits.values())
    else:
      total = 0.0
      for a, ch in lists:
        if (a, ch) in hits:
          total += turn_w[a] * lam[ch] / (k + hits[(a, ch)][0])
        elif method == 'penalty_rrf':
          total -= turn_w[a] * lam[ch] / (k + r_pen)
      fused[d] = total
  return fused


def reference_fuse(ref, out_k):
  order = sorted(ref, key=lambda d: (-ref[d], d))[:out_k]
  ids = np.full((out_k,), -1)
  ids[:len(order)] = order
  return ids


def assert_fused(testcase, got_ids, got_scores, ref, out_k, tol=1e-6):
  """Checks a fused list against reference scores, allowing for float32.

  Returned scores must match the reference; the order must follow the
  reference scores; exact float32 ties must go to the lower id; nothing left
  out may beat the last entry; padding fills the tail.
  """
  got_ids, got_scores = np.asarray(got_ids), np.asarray(got_scores)
  n = min(out_k, len(ref))
  testcase.assertTrue(np.all(got_ids[n:] == -1))
  testcase.assertTrue(np.all(got_scores[n:] == -np.inf))
  ids = got_ids[:n].tolist()
  testcase.assertEqual(len(set(ids)), n)
  for d, s in zip(ids, got_scores[:n]):
    testcase.assertIn(d, ref)
    testcase.assertAlmostEqual(float(s), ref[d], delta=tol * max(1, abs(ref[d])))
  for i in range(n - 1):
    a, b = ids[i], ids[i + 1]
    testcase.assertGreaterEqual(ref[a], ref[b] - tol)
    if got_scores[i] == got_scores[i + 1]:
      testcase.assertLess(a, b)
  if n:
    left_out = set(ref) - set(ids)
    for d in left_out:
      testcase.assertLessEqual(ref[d], ref[ids[-1]] + tol)


def random_ring(rng, w, c, kk, pool, p_invalid=0.2, p_pad=0.3, dyadic=False):
  ids = np.full((w, c, kk), -1, np.int32)
  scores = np.full((w, c, kk), -np.inf, np.float32)
  for a, ch in itertools.product(range(w), range(c)):
    n = kk if rng.random() > p_pad else int(rng.integers(0, kk + 1))
    ids[a, ch, :n] = rng.choice(pool, n, replace=False)
    if dyadic:  # exactly summable in float32, with ties
      vals = rng.integers(-8, 9, n) / 8.0
    else:
      vals = rng.standard_normal(n)
    scores[a, ch, :n] = -np.sort(-vals)
  valid = rng.random((w, c)) > p_invalid
  return ids, scores, valid


class FuseTest(parameterized.TestCase):

  @parameterized.product(method=RRF_METHODS,
                         recency=fusion.RECENCIES,
                         shape=[(5, 2, 10), (3, 1, 6), (1, 2, 4)])
  def test_rrf_matches_reference(self, method, recency, shape):
    w, c, kk = shape
    for seed in range(10):
      rng = np.random.default_rng(seed)
      # A small pool makes many ids appear in several lists.
      ids, scores, valid = random_ring(rng, w, c, kk, pool=kk + 5)
      lam = rng.uniform(0.5, 2.0, c).astype(np.float32)
      out_k = (max(1, kk // 2), 2 * kk)[seed % 2]  # cut and padded
      got = fuse(ids, scores, valid, method=method, recency=recency,
                 gamma=0.7, channel_weights=lam, out_k=out_k,
                 penalty_rank=kk + 3)
      ref = reference_scores(ids, scores, valid, method, recency=recency,
                             gamma=0.7, channel_weights=lam,
                             penalty_rank=kk + 3)
      assert_fused(self, *got, ref, out_k)

  @parameterized.product(method=('sim_max', 'sim_sum'))
  def test_sim_matches_reference_exactly(self, method):
    for seed in range(20):
      rng = np.random.default_rng(seed)
      ids, scores, valid = random_ring(rng, 4, 2, 8, pool=12, dyadic=True)
      got_ids, got_scores = fuse(ids, scores, valid, method=method, out_k=10)
      ref = reference_scores(ids, scores, valid, method)
      ref_ids = reference_fuse(ref, 10)
      np.testing.assert_array_equal(got_ids, ref_ids, err_msg=f'seed {seed}')
      np.testing.assert_array_equal(
          got_scores, [ref[d] if d >= 0 else -np.inf for d in ref_ids])

  def test_structural_ties_go_to_lower_id(self):
    # 9 and 4 each appear once at rank 1 of a current-turn list: equal scores.
    ids = np.array([[[9, 5], [4, 6]]])  # [W=1, C=2, K=2]
    got, scores = fuse(ids, np.zeros((1, 2, 2), np.float32),
                       np.ones((1, 2), bool))
    np.testing.assert_array_equal(got, [4, 9])
    self.assertEqual(float(scores[0]), float(scores[1]))

  def test_hand_tw_rrf(self):
    # W=2, C=1: id 1 at rank 1 now (w=1); id 2 at rank 1 a turn ago (w=0.5)
    # and rank 2 now.
    ids = np.array([[[1, 2]], [[2, 3]]])
    got, scores = fuse(ids, np.zeros((2, 1, 2), np.float32),
                       np.ones((2, 1), bool), k=1, out_k=3)
    np.testing.assert_array_equal(got, [2, 1, 3])
    np.testing.assert_allclose(scores, [1 / 3 + 0.5 / 2, 1 / 2, 0.5 / 3])

  def test_invalid_lists_are_ignored(self):
    ids = np.array([[[1, 2]], [[3, 4]]])
    valid = np.array([[True], [False]])
    for method in fusion.METHODS:
      got, _ = fuse(ids, np.ones((2, 1, 2), np.float32), valid, method=method,
                    out_k=4)
      np.testing.assert_array_equal(got, [1, 2, -1, -1])
    got, scores = fuse(ids, np.ones((2, 1, 2), np.float32),
                       np.zeros((2, 1), bool))
    np.testing.assert_array_equal(got, [-1, -1])
    np.testing.assert_array_equal(scores, [-np.inf, -np.inf])

  def test_num_ids_single_pass_equals_default(self):
    rng = np.random.default_rng(5)
    ids, scores, valid = random_ring(rng, 5, 2, 20, pool=60)
    for method in fusion.METHODS:
      a = fuse(ids, scores, valid, method=method)
      b = fuse(ids, scores, valid, method=method, num_ids=60)
      np.testing.assert_array_equal(a[0], b[0])
      np.testing.assert_array_equal(a[1], b[1])

  def test_large_ids_sort_correctly(self):
    ids = np.array([[[2**30 + 5, 7, 2**23 + 1]], [[7, 2**30 + 5, 3]]])
    got, _ = fuse(ids, np.zeros((2, 1, 3), np.float32), np.ones((2, 1), bool),
                  method='uniform_rrf', out_k=4)
    # 3 and 2**23 + 1 tie at rank 3 (uniform weights): the lower id first.
    np.testing.assert_array_equal(got, [7, 2**30 + 5, 3, 2**23 + 1])

  def test_jit_vmap_and_no_retrace(self):
    rng = np.random.default_rng(7)
    rings = [random_ring(rng, 3, 2, 6, pool=10) for _ in range(4)]
    ids, scores, valid = (np.stack(x) for x in zip(*rings))

    @jax.jit
    @chex.assert_max_traces(n=1)
    def batched(ids, scores, valid, k):
      return jax.vmap(lambda i, s, v: fuse(i, s, v, k=k, out_k=8))(
          ids, scores, valid)

    got_ids, got_scores = batched(ids, scores, valid, 60.0)
    batched(ids[::-1], scores, valid, 30.0)  # new values, same shapes
    for s in range(4):
      ref_ids, ref_scores = fuse(ids[s], scores[s], valid[s], out_k=8)
      np.testing.assert_array_equal(got_ids[s], ref_ids)
      np.testing.assert_array_equal(got_scores[s], ref_scores)


class FuseWithRankCapTest(absltest.TestCase):

  def test_matches_reference_pipeline(self):
    for seed in range(10):
      rng = np.random.default_rng(seed)
      ids, scores, valid = random_ring(rng, 3, 2, 8, pool=12, dyadic=True)
      demote = rng.integers(-1, 12, 4).astype(np.int32)
      caps = rng.integers(1, 10, 4).astype(np.int32)
      got_ids, got_scores = fusion.fuse_with_rank_cap(
          ids, scores, valid, demote, caps, method='sim_sum', out_k=8)
      capped_ids, capped_scores = ids.copy(), scores.copy()
      for a, ch in itertools.product(range(3), range(2)):
        capped_ids[a, ch], capped_scores[a, ch] = reference_rank_cap(
            ids[a, ch], scores[a, ch], demote, caps)
      ref = reference_scores(capped_ids, capped_scores, valid, 'sim_sum')
      ref_ids = reference_fuse(ref, 8)
      ref_ids, _ = reference_rank_cap(
          ref_ids, np.zeros(8), demote, caps)
      np.testing.assert_array_equal(got_ids, ref_ids, err_msg=f'seed {seed}')

  def test_rank_cap_changes_rrf_ranks(self):
    # Demoting id 1 from rank 1 to rank 3 in both lists makes id 2 the winner.
    ids = np.array([[[1, 2, 3], [1, 2, 3]]])
    got, _ = fusion.fuse_with_rank_cap(
        ids, np.zeros((1, 2, 3), np.float32), np.ones((1, 2), bool),
        np.array([1]), np.array([3]))
    np.testing.assert_array_equal(got, [2, 3, 1])


class FuseBadInputTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.ids = np.arange(8).reshape(2, 2, 2)
    self.scores = np.zeros((2, 2, 2), np.float32)
    self.valid = np.ones((2, 2), bool)

  def test_unknown_method_lists_choices(self):
    with self.assertRaisesRegex(ValueError, "unknown fusion method 'rrf'.*"
                                'tw_rrf, static_rrf, uniform_rrf, penalty_rrf,'
                                ' sim_max, sim_sum'):
      fuse(self.ids, self.scores, self.valid, method='rrf')

  def test_unknown_recency_lists_choices(self):
    with self.assertRaisesRegex(ValueError,
                                "unknown recency 'log'.*linear, exp, uniform"):
      fuse(self.ids, self.scores, self.valid, recency='log')

  def test_shapes(self):
    with self.assertRaisesRegex(ValueError, 'ids must have rank 3'):
      fuse(self.ids[0], self.scores, self.valid)
    with self.assertRaisesRegex(ValueError, r'valid must have shape \(2, 2\)'):
      fuse(self.ids, self.scores, self.valid[:1])
    with self.assertRaisesRegex(ValueError, 'channel_weights must have shape'):
      fuse(self.ids, self.scores, self.valid, channel_weights=np.ones(3))
    with self.assertRaisesRegex(TypeError, 'valid must be boolean'):
      fuse(self.ids, self.scores, self.valid.astype(int))

  def test_values(self):
    with self.assertRaisesRegex(ValueError, 'repeats a gallery id'):
      fuse(np.array([[[1, 1]]]), self.scores[:1, :1], self.valid[:1, :1])
    with self.assertRaisesRegex(ValueError, 'k must be >= 0'):
      fuse(self.ids, self.scores, self.valid, k=-1)
    with self.assertRaisesRegex(ValueError, 'gamma must be > 0'):
      fuse(self.ids, self.scores, self.valid, recency='exp', gamma=0)
    with self.assertRaisesRegex(ValueError, 'out_k must be >= 1'):
      fuse(self.ids, self.scores, self.valid, out_k=0)
    with self.assertRaisesRegex(ValueError, 'every id must be below num_ids'):
      fuse(self.ids, self.scores, self.valid, num_ids=5)
    with self.assertRaisesRegex(ValueError, 'ids holds -7'):
      fuse(np.array([[[1, -7]]]), self.scores[:1, :1], self.valid[:1, :1])
    for bad in (-1.0, np.nan, np.inf):
      with self.assertRaisesRegex(ValueError,
                                  'channel_weights must be finite and >= 0'):
        fuse(self.ids, self.scores, self.valid,
             channel_weights=np.array([1.0, bad]))
    # A NaN score dropped its id from a sim_sum list.
    nan = np.array(self.scores, np.float32)
    nan[0, 1, 0] = np.nan
    with self.assertRaisesRegex(ValueError, r'scores holds NaN \(first at '
                                r'index \(0, 1, 0\)\)'):
      fuse(self.ids, nan, self.valid, method='sim_sum')


if __name__ == '__main__':
  absltest.main()
