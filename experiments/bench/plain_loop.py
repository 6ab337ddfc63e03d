"""Plain Python/NumPy versions of the ranking rules, shared by the
benchmarks as the straightforward implementations they are compared with."""

import collections

import numpy as np

RRF_K = 60


def python_session(ids, demote, caps, weights, k):
  """One session's rank-cap + TW-RRF + rank-cap with dicts and sorted()."""
  cap_of = {}
  for d, cap in zip(demote, caps):
    if d >= 0 and cap > cap_of.get(d, 0):
      cap_of[d] = cap

  def capped(lst):
    # recovr_jax's rank-cap rule (see recovr_jax/core/demotion.py): non-demoted
    # ids keep their order; a demoted id follows max(q, cap - 1) of them.
    kept = [d for d in lst if d not in cap_of]
    demoted = []
    ahead = 0
    for p, d in enumerate(lst):
      if d in cap_of:
        demoted.append((min(max(ahead, cap_of[d] - 1), len(kept)), p, d))
      else:
        ahead += 1
    demoted.sort()
    out, j = [], 0
    for s_idx in range(len(kept) + 1):
      while j < len(demoted) and demoted[j][0] == s_idx:
        out.append(demoted[j][2])
        j += 1
      if s_idx < len(kept):
        out.append(kept[s_idx])
    return out

  fused = collections.defaultdict(float)
  for a, turn in enumerate(ids):
    for lst in turn:
      for p, d in enumerate(capped(lst), start=1):
        fused[d] += weights[a] / (RRF_K + p)
  best = sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:k]
  return capped([d for d, _ in best])


def numpy_rank_cap(ids, demote, caps):
  """recovr_jax's rank-cap rule on many lists at once, vectorised in NumPy.

  Args:
    ids: ``[..., L, K]`` ids, each at most once per list, ``-1`` padding at
      the end.
    demote, caps: ``[..., M]`` the demotion set of each leading index
      (broadcast over the ``L`` lists); ``-1`` ids ignored.

  Returns:
    ``[..., L, K]`` the rank-capped lists.
  """
  match = (ids[..., :, :, None] == demote[..., None, None, :]) & (
      demote[..., None, None, :] >= 0)
  cap = np.max(np.where(match, caps[..., None, None, :], 0), axis=-1)
  valid = ids >= 0
  demoted = (cap > 0) & valid
  kept = valid & ~demoted
  ahead = np.cumsum(kept, axis=-1) - kept  # non-demoted entries before
  n_kept = np.sum(kept, axis=-1, keepdims=True)
  need = np.minimum(np.maximum(ahead, cap - 1), n_kept)
  k = ids.shape[-1]
  # Slot s: the demoted ids that follow s kept ones (in list order), then
  # the s-th kept one; padding last.
  slot = np.where(demoted, 2 * need, 2 * ahead + 1)
  slot = np.where(valid, slot, 2 * k + 2)
  key = slot * k + np.arange(k)
  return np.take_along_axis(ids, np.argsort(key, axis=-1), axis=-1)


def numpy_sessions(ids, demote, caps, weights, k):
  """Every session's rank-cap + TW-RRF + rank-cap, vectorised in NumPy.

  The same rule as ``python_session`` (and ``fusion.fuse_with_rank_cap``)
  with no per-session Python: rank-cap on all lists at once, the fused
  score of each (session, id) by ``np.unique`` + ``np.bincount``, one
  ``np.lexsort`` for every session's order (score down, id up), the first
  ``k`` of each session, rank-cap on those.

  Args:
    ids: ``[S, W, C, K]`` int ids (``-1`` padding), age-indexed.
    demote, caps: ``[S, M]``.
    weights: ``[W]`` turn weights.
    k: fused list length.

  Returns:
    ``[S, k]`` int64 ids, ``-1`` padded.
  """
  s, w, c, kk = ids.shape
  capped = numpy_rank_cap(ids.reshape(s, w * c, kk), demote, caps)
  contrib = (np.asarray(weights, np.float64)[:, None, None]
             / (RRF_K + np.arange(1, kk + 1)))  # [W, 1, K]
  contrib = np.broadcast_to(contrib, (w, c, kk)).reshape(1, w * c * kk)
  contrib = np.broadcast_to(contrib, (s, w * c * kk))
  flat = capped.reshape(s, w * c * kk).astype(np.int64)
  ok = flat >= 0
  num = int(flat.max()) + 1 if flat.size else 1
  keys = (np.arange(s, dtype=np.int64)[:, None] * num + flat)[ok]
  uniq, inverse = np.unique(keys, return_inverse=True)
  fused = np.bincount(inverse, weights=contrib[ok], minlength=len(uniq))
  session, gid = np.divmod(uniq, num)
  order = np.lexsort((gid, -fused, session))
  session, gid = session[order], gid[order]
  start = np.searchsorted(session, np.arange(s))
  end = np.searchsorted(session, np.arange(s), side='right')
  pos = start[:, None] + np.arange(k)
  top = np.where(pos < end[:, None], gid[np.minimum(pos, len(gid) - 1)], -1)
  return numpy_rank_cap(top[:, None, :], demote, caps)[:, 0, :]
