"""Plain Python/NumPy versions of the ranking rules, shared by the
benchmarks as the straightforward implementations they are compared with."""

import collections

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
