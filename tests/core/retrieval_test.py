"""Tests for recovr_jax.retrieval against a NumPy reference."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import retrieve
from recovr_jax.core import retrieval


def reference_retrieve(queries, gallery, k, exclude=None):
  """Sort all scores by (-score, id); pad with -1 / -inf."""
  scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
  b, n = scores.shape
  ids_out = np.full((b, k), -1, np.int64)
  scores_out = np.full((b, k), -np.inf)
  for i in range(b):
    keep = np.arange(n)
    if exclude is not None and exclude[i] >= 0:
      keep = keep[keep != exclude[i]]
    order = keep[np.lexsort((keep, -scores[i, keep]))][:k]
    ids_out[i, :len(order)] = order
    scores_out[i, :len(order)] = scores[i, order]
  return ids_out, scores_out


def reference_retrieve_scores(scores, k, exclude):
  """Like reference_retrieve, from a given ``[B, N]`` score matrix."""
  b, n = scores.shape
  ids_out = np.full((b, k), -1, np.int64)
  scores_out = np.full((b, k), -np.inf, np.float32)
  for i in range(b):
    keep = np.arange(n)
    keep = keep[keep != exclude[i]]
    order = keep[np.lexsort((keep, -scores[i, keep]))][:k]
    ids_out[i, :len(order)] = order
    scores_out[i, :len(order)] = scores[i, order]
  return ids_out, scores_out


def integer_embeddings(rng, shape, low=-2, high=3):
  """Small integers: exact float32 dot products, so ties are real ties."""
  return rng.integers(low, high, shape).astype(np.float32)


class RetrieveTest(parameterized.TestCase):

  @parameterized.parameters(
      # (n, b, d, k, block_size): full blocks, a remainder, N < K, N == block.
      (64, 4, 3, 10, 16),
      (70, 4, 3, 10, 16),
      (7, 3, 3, 10, 16),
      (16, 2, 3, 16, 16),
      (33, 5, 2, 4, 8),
      (100, 3, 4, 1, 1000),
  )
  def test_matches_reference_with_ties(self, n, b, d, k, block_size):
    for seed in range(8):
      rng = np.random.default_rng(seed)
      gallery = integer_embeddings(rng, (n, d))
      queries = integer_embeddings(rng, (b, d))
      exclude = rng.integers(-1, n, (b,)).astype(np.int32)
      ids, scores = retrieve(queries, gallery, k, exclude=exclude,
                             block_size=block_size)
      ref_ids, ref_scores = reference_retrieve(queries, gallery, k, exclude)
      chex.assert_shape((ids, scores), (b, k))
      self.assertEqual(ids.dtype, jnp.int32)
      np.testing.assert_array_equal(ids, ref_ids, err_msg=f'seed {seed}')
      np.testing.assert_array_equal(scores, ref_scores)

  def test_candidate_group_pruning_is_exact(self):
    # Blocks of 64 rows, k = 3, groups of 4: 64 >= 4 * 3 * 4 turns pruning
    # on. Blocks of 62 rows (and galleries whose last block holds 58 or 53)
    # end in a short group of 2 or 1.
    for seed in range(12):
      rng = np.random.default_rng(seed)
      n = (200, 256, 130, 250)[seed % 4]
      gallery = integer_embeddings(rng, (n, 3), -1, 2)  # many ties
      queries = integer_embeddings(rng, (6, 3))
      exclude = rng.integers(-1, n, (6,)).astype(np.int32)
      ref = reference_retrieve(queries, gallery, 3, exclude)
      for block, group in ((64, 4), (62, 4), (64, 0)):
        ids, scores = retrieve(queries, gallery, 3, exclude=exclude,
                               block_size=block, group_size=group)
        msg = f'{seed} {block} {group}'
        np.testing.assert_array_equal(ids, ref[0], err_msg=msg)
        np.testing.assert_array_equal(scores, ref[1], err_msg=msg)

  def test_a_short_last_group_is_searched(self):
    # 50 rows in groups of 4: the last group holds ids 48 and 49 only. Its
    # maximum (id 49) is the best entry; the tie at 5 between ids 6 and 48
    # still goes to id 6; excluding id 49 leaves id 48 its group's maximum.
    values = np.zeros((50, 1), np.float32)
    values[6], values[48], values[49] = 5, 5, 9
    ids, _ = retrieve(np.ones((1, 1), np.float32), values, 3, block_size=50,
                      group_size=4)
    np.testing.assert_array_equal(ids, [[49, 6, 48]])
    ids, _ = retrieve(np.ones((1, 1), np.float32), values, 3, block_size=50,
                      group_size=4, exclude=np.array([49], np.int32))
    np.testing.assert_array_equal(ids, [[6, 48, 0]])

  def test_pruned_candidates_keep_id_order_for_ties(self):
    # Group 5 (ids 20-23) has the larger maximum, but the tie at 5 between
    # ids 4 and 21 must still go to id 4.
    values = np.zeros((32, 1), np.float32)
    values[4], values[20], values[21] = 5, 9, 5
    ids, _ = retrieve(np.ones((1, 1), np.float32), values, 2, block_size=32,
                      group_size=4)
    np.testing.assert_array_equal(ids, [[20, 4]])

  def test_masked_merge_is_exact_on_adversarial_orders(self):
    # The masks' floors (module docstring) on galleries built to defeat
    # them: rows in rising score order (every block beats the running list),
    # falling order (nothing after the first block can enter), shuffled
    # (entries one step above a floor must still enter), all equal
    # (every floor is a tie), a few distinct values, and a penalty. Blocks
    # of 64 with groups of 4 and k = 3 turn pruning on (blocks of 62: each
    # ends in a short group); group 0 turns it off.
    rng = np.random.default_rng(7)
    q = np.ones((3, 1), np.float32) * np.array([[1], [2], [-1]], np.float32)
    rising = np.arange(512, dtype=np.float32)[:, None] / 512
    galleries = {
        'rising': rising,
        'falling': rising[::-1].copy(),
        'shuffled': rng.permutation(rising),  # later entries just above
        'equal': np.ones((512, 1), np.float32),
        'few values': rng.integers(0, 3, (512, 1)).astype(np.float32),
    }
    exclude = np.array([511, -1, 0], np.int32)
    for name, gallery in galleries.items():
      for penalty in (None, rng.integers(0, 2, (3, 512)).astype(np.float32)):
        scores = q @ gallery.T - (0 if penalty is None else penalty)
        ref = reference_retrieve_scores(scores, 3, exclude)
        for block, group in ((64, 4), (62, 4), (64, 0)):
          ids, got = retrieve(q, gallery, 3, exclude=exclude,
                              block_size=block, group_size=group,
                              penalty=penalty)
          msg = (f'{name}, penalty {penalty is not None}, block {block}, '
                 f'group {group}')
          np.testing.assert_array_equal(ids, ref[0], err_msg=msg)
          np.testing.assert_array_equal(got, ref[1], err_msg=msg)

  def test_first_block_floor(self):
    # floors.kth_floor: at least k values >= t, t not above the k-th
    # largest, and -inf where fewer than k values are finite.
    from recovr_jax.core import floors  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    rows = [rng.standard_normal(64), np.ones(64), np.arange(64.0),
            np.r_[np.full(60, -np.inf), np.ones(4)],  # 4 finite < k
            np.r_[np.full(59, -np.inf), np.arange(5.0)],  # exactly k finite
            np.r_[-3e38, 3e38, np.zeros(62)]]  # a range that overflows
    values = np.stack(rows).astype(np.float32)
    k = 5
    floor = np.asarray(floors.kth_floor(jnp.asarray(values), k))[:, 0]
    kth = -np.sort(-values, axis=1)[:, k - 1]
    for i, (t, v) in enumerate(zip(floor, values)):
      if np.sum(np.isfinite(v)) < k:
        self.assertEqual(t, -np.inf, msg=f'row {i}')
      else:
        self.assertGreaterEqual(np.sum(v >= t), k, msg=f'row {i}')
        self.assertLessEqual(t, kth[i], msg=f'row {i}')
    self.assertGreater(floor[0], np.sort(values[0])[0])  # it did prune
    self.assertEqual(floor[1], 1.0)

  def test_real_embeddings(self):
    for seed in range(4):
      rng = np.random.default_rng(seed)
      gallery = rng.standard_normal((300, 16)).astype(np.float32)
      gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
      queries = gallery[rng.integers(0, 300, 5)] + 0.1 * rng.standard_normal(
          (5, 16)).astype(np.float32)
      ids, scores = retrieve(queries, gallery, 20, block_size=64)
      _, ref_scores = reference_retrieve(queries, gallery, 20)
      np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-5)
      true = np.einsum('bd,bkd->bk', queries, gallery[np.asarray(ids)])
      np.testing.assert_allclose(scores, true, rtol=1e-5, atol=1e-5)

  def test_k_above_n_pads(self):
    gallery = np.eye(3, dtype=np.float32)
    ids, scores = retrieve(gallery[:1], gallery, 5, exclude=np.array([1]))
    np.testing.assert_array_equal(ids, [[0, 2, -1, -1, -1]])
    np.testing.assert_array_equal(scores, [[1, 0, -np.inf, -np.inf, -np.inf]])

  def test_ties_go_to_lower_id_across_blocks(self):
    gallery = np.ones((40, 2), np.float32)
    ids, _ = retrieve(np.ones((1, 2), np.float32), gallery, 12, block_size=7)
    np.testing.assert_array_equal(ids, [np.arange(12)])

  def test_jit_equals_no_jit(self):
    rng = np.random.default_rng(0)
    gallery = integer_embeddings(rng, (50, 3))
    queries = integer_embeddings(rng, (4, 3))
    jitted = jax.jit(retrieve, static_argnames=('k', 'block_size'))
    for a, b in zip(jitted(queries, gallery, k=7, block_size=16),
                    retrieve(queries, gallery, 7, block_size=16)):
      np.testing.assert_array_equal(a, b)

  def test_vmap_equals_loop(self):
    rng = np.random.default_rng(1)
    gallery = integer_embeddings(rng, (45, 3))
    queries = integer_embeddings(rng, (3, 4, 3))  # [S, B, D]
    exclude = rng.integers(-1, 45, (3, 4)).astype(np.int32)
    fn = functools.partial(retrieve, k=6, block_size=16)
    batched = jax.vmap(lambda q, e: fn(q, gallery, exclude=e))
    ids, scores = batched(queries, exclude)
    for s in range(3):
      ref_ids, ref_scores = fn(queries[s], gallery, exclude=exclude[s])
      np.testing.assert_array_equal(ids[s], ref_ids)
      np.testing.assert_array_equal(scores[s], ref_scores)

  def test_no_retrace_on_new_values(self):
    @jax.jit
    @chex.assert_max_traces(n=1)
    def fn(q, g):
      return retrieve(q, g, 5, block_size=8)
    rng = np.random.default_rng(2)
    for _ in range(3):
      fn(rng.standard_normal((2, 3)).astype(np.float32),
         rng.standard_normal((20, 3)).astype(np.float32))


class BackendPathTest(absltest.TestCase):
  """The accelerator's path (one lax.top_k per large block, no pruning) and
  the precision setting, exercised on the CPU."""

  def test_sizes_by_backend(self):
    self.assertEqual(retrieval.sizes('cpu'), (retrieval.DEFAULT_BLOCK_SIZE,
                                              retrieval.DEFAULT_GROUP_SIZE))
    for backend in ('gpu', 'tpu'):
      self.assertEqual(retrieval.sizes(backend),
                       (retrieval.DEVICE_BLOCK_SIZE, 0))
    self.assertEqual(retrieval.sizes(), retrieval.sizes('cpu'))

  def test_the_accelerator_path_matches_the_reference(self):
    block, group = retrieval.sizes('gpu')
    for seed in range(4):
      rng = np.random.default_rng(seed)
      gallery = integer_embeddings(rng, (3000, 5))
      queries = integer_embeddings(rng, (6, 5))
      exclude = rng.integers(-1, 3000, (6,)).astype(np.int32)
      ids, scores = retrieve(queries, gallery, 20, exclude=exclude,
                             block_size=block, group_size=group)
      ref_ids, ref_scores = reference_retrieve(queries, gallery, 20, exclude)
      np.testing.assert_array_equal(ids, ref_ids, err_msg=f'seed {seed}')
      np.testing.assert_array_equal(scores, ref_scores)

  def test_precisions(self):
    rng = np.random.default_rng(0)
    gallery = integer_embeddings(rng, (200, 4))
    queries = integer_embeddings(rng, (3, 4))
    ref_ids, _ = reference_retrieve(queries, gallery, 10)
    backend = jax.default_backend()
    ran = []
    for name in retrieval.PRECISIONS:  # small integers: exact in each
      if name in retrieval.UNSUPPORTED.get(backend, ()):
        # Refused before any work, and refused by XLA itself (the list of
        # refusals is what the backend does, not a guess).
        with self.assertRaisesRegex(ValueError, f'--retrieval_precision='
                                    f'{name}: XLA on {backend} has no'):
          retrieval.check_precision(name)
        with self.assertRaises(Exception):
          np.asarray(retrieve(queries, gallery, 10, precision=name)[0])
        continue
      retrieval.check_precision(name)
      ids, _ = retrieve(queries, gallery, 10, precision=name)
      np.testing.assert_array_equal(ids, ref_ids, err_msg=name)
      ran.append(name)
    self.assertIn('bf16x3', ran)  # every backend accepts it
    normal = np.random.default_rng(1)
    g = normal.normal(size=(500, 64)).astype(np.float32)
    q = normal.normal(size=(4, 64)).astype(np.float32)
    _, exact = retrieve(q, g, 10, precision='highest')
    _, three = retrieve(q, g, 10, precision='bf16x3')
    np.testing.assert_allclose(three, exact, rtol=1e-4, atol=1e-4)
    if backend == 'cpu':
      # What XLA:CPU does with it (measured, jax 0.10.2): it accepts the
      # three-pass algorithm and computes float32, so the scores are
      # highest's exactly (docs/runner.md says so).
      np.testing.assert_array_equal(exact, three)
    with self.assertRaisesRegex(ValueError, "unknown retrieval precision "
                                "'fp8'; valid: highest, bf16x3, tf32"):
      retrieve(queries, gallery, 10, precision='fp8')


class RetrieveBadInputTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.q = np.ones((2, 3), np.float32)
    self.g = np.ones((5, 3), np.float32)

  @parameterized.parameters(0, -1)
  def test_k_must_be_positive(self, k):
    with self.assertRaisesRegex(ValueError, 'k must be >= 1'):
      retrieve(self.q, self.g, k)

  def test_k_must_be_int(self):
    with self.assertRaisesRegex(TypeError, 'k must be an integer'):
      retrieve(self.q, self.g, 2.5)

  def test_dimension_mismatch(self):
    with self.assertRaisesRegex(ValueError, 'queries and gallery .* D'):
      retrieve(self.q, np.ones((5, 4), np.float32), 2)

  def test_wrong_rank(self):
    with self.assertRaisesRegex(ValueError, 'queries must have rank 2'):
      retrieve(np.ones(3, np.float32), self.g, 2)
    with self.assertRaisesRegex(ValueError, 'gallery must have rank 2'):
      retrieve(self.q, np.ones((1, 5, 3), np.float32), 2)

  @parameterized.parameters(np.nan, np.inf, -np.inf)
  def test_non_finite(self, bad):
    g = self.g.copy()
    g[3, 1] = bad
    with self.assertRaisesRegex(ValueError, 'gallery .* row 3'):
      retrieve(self.q, g, 2)
    with self.assertRaisesRegex(ValueError, 'queries .* row 0'):
      retrieve(jnp.asarray(self.q).at[0, 0].set(bad), self.g, 2)

  def test_exclude_shape(self):
    with self.assertRaisesRegex(ValueError, r'exclude must have shape \(2,\)'):
      retrieve(self.q, self.g, 2, exclude=np.array([1, 2, 3]))

  def test_exclude_ids(self):
    # -1 drops nothing; an id outside the gallery dropped nothing silently.
    with self.assertRaisesRegex(ValueError, r'exclude holds id 5; every id '
                                r'must be below the gallery size \(5\)'):
      retrieve(self.q, self.g, 2, exclude=np.array([0, 5]))
    with self.assertRaisesRegex(ValueError, 'exclude holds -2'):
      retrieve(self.q, self.g, 2, exclude=np.array([-2, 1]))

  def test_block_size(self):
    with self.assertRaisesRegex(ValueError, 'block_size must be >= 1'):
      retrieve(self.q, self.g, 2, block_size=0)


class BFloat16GalleryTest(absltest.TestCase):

  def test_bfloat16_gallery_scores_in_float32(self):
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((50, 8)).astype(np.float32)
    queries = rng.standard_normal((3, 8)).astype(np.float32)
    half = jnp.asarray(gallery, jnp.bfloat16)
    got = retrieve(queries, half, 5, block_size=16)
    want = retrieve(queries, np.asarray(half.astype(jnp.float32)), 5,
                    block_size=16)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])

  def test_bfloat16_gallery_is_never_converted_whole(self):
    # Peak memory: only a block at a time exists in float32 (16 blocks, so
    # the loop runs); a whole float32 or 16-bit copy would be 1-2 MiB.
    gallery = jnp.zeros((8192, 64), jnp.bfloat16)
    queries = jnp.zeros((2, 64), jnp.float32)
    compiled = jax.jit(lambda q, g: retrieve(q, g, 5, block_size=512)).lower(
        queries, gallery).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    self.assertLess(temp, gallery.nbytes // 2)


class ApproximateTest(absltest.TestCase):

  def test_recall_target_meets_its_recall(self):
    rng = np.random.default_rng(1)
    gallery = rng.standard_normal((4000, 16)).astype(np.float32)
    queries = rng.standard_normal((8, 16)).astype(np.float32)
    exact, _ = retrieve(queries, gallery, 20, block_size=1024)
    ids, scores = retrieve(queries, gallery, 20, block_size=1024,
                           recall_target=0.9)
    recall = np.mean([len(set(a) & set(b)) / 20
                      for a, b in zip(np.asarray(ids), np.asarray(exact))])
    self.assertGreaterEqual(recall, 0.9)
    true = np.einsum('bd,bkd->bk', queries, gallery[np.asarray(ids)])
    np.testing.assert_allclose(scores, true, rtol=1e-5, atol=1e-5)
    self.assertTrue(np.all(np.diff(np.asarray(scores), axis=1) <= 0))

  def test_recall_target_keeps_exclusion(self):
    gallery = np.eye(40, dtype=np.float32)
    ids, _ = retrieve(gallery[:2], gallery, 3, exclude=np.array([0, -1]),
                      block_size=16, recall_target=0.95)
    self.assertNotIn(0, np.asarray(ids)[0])
    self.assertEqual(int(ids[1, 0]), 1)

  def test_bad_recall_target(self):
    for bad in (0, 1.5, -0.1, True, 'high'):
      with self.assertRaisesRegex(ValueError, 'recall_target'):
        retrieve(np.ones((1, 2), np.float32), np.ones((3, 2), np.float32), 2,
                 recall_target=bad)


if __name__ == '__main__':
  absltest.main()
