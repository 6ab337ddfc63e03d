"""Tests for rank-cap and the demotion set against plain Python references."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import demotion
from recovr_jax import rank_cap


def reference_rank_cap(ids, scores, demote_ids, caps):
  """The implemented rule (demotion module docstring), written plainly."""
  cap_of = {}
  for d, c in zip(demote_ids, caps):
    if d != -1:
      cap_of[int(d)] = max(cap_of.get(int(d), 0), int(c))
  valid = [j for j in range(len(ids)) if ids[j] != -1]
  kept = [j for j in valid if int(ids[j]) not in cap_of]
  demoted = []
  for j in valid:
    if int(ids[j]) in cap_of:
      ahead = sum(1 for i in kept if i < j)
      need = min(max(ahead, cap_of[int(ids[j])] - 1), len(kept))
      demoted.append((need, j))
  order = []
  for s_idx in range(len(kept) + 1):
    order += [j for need, j in sorted(demoted) if need == s_idx]
    if s_idx < len(kept):
      order.append(kept[s_idx])
  order += [j for j in range(len(ids)) if ids[j] == -1]
  return np.asarray(ids)[order], np.asarray(scores)[order]


def design_letter_rank_cap(ids, demote_ids, caps):
  """docs/definitions.md §3's sort keys, read literally."""
  cap_of = {}
  for d, c in zip(demote_ids, caps):
    if d != -1:
      cap_of[int(d)] = max(cap_of.get(int(d), 0), int(c))
  keys = []
  for p, i in enumerate(ids, start=1):
    if i == -1:
      keys.append(float('inf'))
    elif int(i) in cap_of and p < cap_of[int(i)]:
      keys.append(cap_of[int(i)] + 0.5)
    else:
      keys.append(float(p))
  return [ids[j] for j in sorted(range(len(ids)), key=lambda j: keys[j])]


def random_list(rng, k, pool):
  n_valid = rng.integers(0, k + 1)
  ids = np.full((k,), -1, np.int32)
  ids[:n_valid] = rng.choice(pool, n_valid, replace=False)
  scores = np.where(ids >= 0, -np.arange(k, dtype=np.float32), -np.inf)
  return ids, scores.astype(np.float32)


class RankCapTest(parameterized.TestCase):

  @parameterized.parameters((1, 1), (5, 3), (12, 6), (30, 8))
  def test_matches_reference(self, k, m):
    for seed in range(40):
      rng = np.random.default_rng(seed)
      ids, scores = random_list(rng, k, pool=max(k + 3, 8))
      # Demote a mix of listed ids, absent ids, duplicates and -1.
      demote = rng.choice(np.concatenate([ids, [-1, 99, 100]]), m)
      caps = rng.integers(1, k + 4, m).astype(np.int32)
      got_ids, got_scores = rank_cap(ids, scores, demote, caps)
      ref_ids, ref_scores = reference_rank_cap(ids, scores, demote, caps)
      np.testing.assert_array_equal(got_ids, ref_ids, err_msg=f'seed {seed}')
      np.testing.assert_array_equal(got_scores, ref_scores)

  def test_single_demoted_id_lands_exactly_at_its_cap(self):
    ids = np.arange(10, 20)
    for p in range(10):
      for cap in range(p + 2, 11):
        got, _ = rank_cap(ids, np.zeros(10, np.float32), [ids[p]], [cap])
        self.assertEqual(int(got[cap - 1]), ids[p])

  def test_cap_beyond_valid_entries_stays_before_padding(self):
    ids = np.array([5, 6, 7, -1, -1])
    got, got_scores = rank_cap(ids, np.array([3, 2, 1, -np.inf, -np.inf],
                                             np.float32), [5], [11])
    np.testing.assert_array_equal(got, [6, 7, 5, -1, -1])
    np.testing.assert_array_equal(got_scores, [2, 1, 3, -np.inf, -np.inf])

  def test_duplicate_demote_id_uses_larger_cap(self):
    ids = np.arange(8)
    got, _ = rank_cap(ids, np.zeros(8, np.float32), [0, 0, 0], [2, 6, 3])
    self.assertEqual(int(got[5]), 0)

  def test_agrees_with_design_letter_for_one_demoted_id(self):
    rng = np.random.default_rng(5)
    for _ in range(200):
      ids, scores = random_list(rng, 10, 15)
      d = [int(rng.choice(ids))] if rng.random() < 0.8 else [99]
      c = [int(rng.integers(1, 14))]
      got, _ = rank_cap(ids, scores, d, c)
      np.testing.assert_array_equal(got, design_letter_rank_cap(ids, d, c))

  def test_rejected_top1_never_returns_to_the_top(self):
    # the letter of docs/definitions.md: 20 (cap 4) moves behind 30, and 30 (the
    # top-1 just rejected with sigma pos, cap 2) rises back to position 1.
    ids = np.array([20, 30, 40, 50, 60])
    self.assertEqual(design_letter_rank_cap(ids, [20, 30], [4, 2])[0], 30)
    got, _ = rank_cap(ids, np.zeros(5, np.float32), [20, 30], [4, 2])
    np.testing.assert_array_equal(got, [40, 30, 50, 60, 20])  # 20 after 3 kept
    rng = np.random.default_rng(7)
    for _ in range(300):
      ids, scores = random_list(rng, 12, 20)
      demote = rng.choice(np.concatenate([ids, [-1, 77]]), 5)
      caps = rng.integers(2, 14, 5)
      got, _ = rank_cap(ids, scores, demote, caps)
      listed = set(int(x) for x in demote) - {-1}
      if any(int(i) >= 0 and int(i) not in listed for i in ids):
        self.assertNotIn(int(got[0]), listed)

  def test_entry_at_or_below_cap_does_not_move(self):
    ids = np.arange(8)
    got, _ = rank_cap(ids, np.zeros(8, np.float32), [4], [3])
    np.testing.assert_array_equal(got, ids)

  def test_jit_vmap_and_no_retrace(self):
    rng = np.random.default_rng(3)
    batch = [random_list(rng, 12, 20) for _ in range(5)]
    ids = np.stack([b[0] for b in batch])
    scores = np.stack([b[1] for b in batch])
    demote = rng.integers(-1, 20, (5, 4)).astype(np.int32)
    caps = rng.integers(1, 14, (5, 4)).astype(np.int32)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def batched(*args):
      return jax.vmap(rank_cap)(*args)

    got_ids, got_scores = batched(ids, scores, demote, caps)
    batched(ids[::-1], scores[::-1], demote, caps)  # new values, same shapes
    for s in range(5):
      ref_ids, ref_scores = rank_cap(ids[s], scores[s], demote[s], caps[s])
      np.testing.assert_array_equal(got_ids[s], ref_ids)
      np.testing.assert_array_equal(got_scores[s], ref_scores)

  def test_bad_input(self):
    ids, scores = np.arange(4), np.zeros(4, np.float32)
    with self.assertRaisesRegex(ValueError, 'caps must be >= 1'):
      rank_cap(ids, scores, [1], [0])
    with self.assertRaisesRegex(ValueError, 'ids must have rank 1'):
      rank_cap(ids[None], scores, [1], [2])
    with self.assertRaisesRegex(ValueError, r'caps must have shape \(2,\)'):
      rank_cap(ids, scores, [1, 2], [2])
    with self.assertRaisesRegex(ValueError, 'repeats a gallery id'):
      rank_cap(np.array([1, 2, 1, 3]), scores, [1], [2])
    with self.assertRaisesRegex(ValueError, 'padding before a gallery id'):
      rank_cap(np.array([1, -1, 2, -1]), scores, [1], [2])
    with self.assertRaisesRegex(ValueError, r'scores holds NaN \(first at '
                                r'index \(2,\)\)'):
      rank_cap(ids, np.array([1, 0, np.nan, 0], np.float32), [1], [2])
    with self.assertRaisesRegex(TypeError, 'demote_ids must hold integers'):
      rank_cap(ids, scores, np.array([1.0]), [2])
    with self.assertRaisesRegex(ValueError, 'ids holds -3'):
      rank_cap(np.array([1, 2, -3, -1]), scores, [1], [2])
    with self.assertRaisesRegex(ValueError, 'demote_ids holds -2'):
      rank_cap(ids, scores, [-2], [2])


def reference_demotion_set(top1_history, turn, sigma, kappa, window=None):
  out = {}
  for t in range(turn):
    if top1_history[t] < 0 or (window is not None and turn - 1 - t >= window):
      continue
    out[t] = kappa[sigma] if t == turn - 1 else kappa[1]
  ids = [top1_history[t] if t in out else -1 for t in range(len(top1_history))]
  caps = [out.get(t, 0) for t in range(len(top1_history))]
  return ids, caps


class DemotionSetTest(parameterized.TestCase):

  def test_matches_reference(self):
    rng = np.random.default_rng(0)
    for _ in range(60):
      history = rng.integers(-1, 6, 6).astype(np.int32)
      turn = int(rng.integers(0, 7))
      sigma = int(rng.integers(0, 3))
      window = [None, 1, 2, 5][rng.integers(0, 4)]
      ids, caps = demotion.demotion_set(history, turn, sigma, window=window)
      ref_ids, ref_caps = reference_demotion_set(history, turn, sigma,
                                                 demotion.DEFAULT_KAPPA, window)
      np.testing.assert_array_equal(ids, ref_ids)
      np.testing.assert_array_equal(caps, ref_caps)

  def test_paper_caps(self):
    history = np.array([7, 8, 9, -1, -1, -1])
    ids, caps = demotion.demotion_set(history, 3, demotion.SIGMA_NEG)
    np.testing.assert_array_equal(ids, [7, 8, 9, -1, -1, -1])
    np.testing.assert_array_equal(caps, [4, 4, 11, 0, 0, 0])
    _, caps = demotion.demotion_set(history, 3, demotion.SIGMA_POS)
    np.testing.assert_array_equal(caps, [4, 4, 2, 0, 0, 0])

  def test_turn_zero_is_empty(self):
    ids, caps = demotion.demotion_set(np.array([3, -1]), 0, 0)
    np.testing.assert_array_equal(ids, [-1, -1])
    np.testing.assert_array_equal(caps, [0, 0])

  def test_traced_turn_and_sigma(self):
    fn = jax.jit(jax.vmap(demotion.demotion_set, in_axes=(None, 0, 0)))
    ids, caps = fn(jnp.array([1, 2, 3]), jnp.array([1, 3]), jnp.array([0, 2]))
    np.testing.assert_array_equal(ids, [[1, -1, -1], [1, 2, 3]])
    np.testing.assert_array_equal(caps, [[11, 0, 0], [4, 4, 2]])

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, 'window must be >= 1'):
      demotion.demotion_set(np.array([1]), 1, 0, window=0)
    with self.assertRaisesRegex(ValueError, 'unknown sigma 3'):
      demotion.demotion_set(np.array([1]), 1, 3)
    with self.assertRaisesRegex(ValueError, r'kappa must have shape \(3,\)'):
      demotion.demotion_set(np.array([1]), 1, 0, kappa=(1, 2))


if __name__ == '__main__':
  absltest.main()
