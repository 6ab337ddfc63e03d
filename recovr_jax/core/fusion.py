"""Fusion of the ring's ranked lists (docs/definitions.md §4), TW-RRF by
default.

One session's ring holds ``P = W * C * K`` entries. Fusion has to sum the
contributions of each gallery id across lists, which needs equal ids next to
each other. XLA's CPU sort is slow for multi-operand or float keys but fast for
a single integer operand, so the ids are sorted as packed ``uint32`` keys
``id << bits(P) | entry index`` (an LSD radix sort in one or two such passes):
the entry index in the low bits makes the sort stable and tells where each
sorted entry came from. Each id then occupies at most ``W * C`` consecutive
slots (an id appears at most once per list), so its fused score is a short
window reduction in list order; ``lax.top_k`` on those scores, whose candidates
are already in ascending id, gives the best ``out_k`` with ties to the lower id.
Scores below ``floors.kth_floor`` of the fused scores cannot be in the best
``out_k`` and are masked first (fewer entries enter top-k's heap).
"""

import functools

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import checks
from recovr_jax.core import demotion
from recovr_jax.core import floors

METHODS = ('tw_rrf', 'static_rrf', 'uniform_rrf', 'penalty_rrf', 'sim_max',
           'sim_sum')
RECENCIES = ('linear', 'exp', 'uniform')
_ID_BITS = 31  # non-negative int32 ids
_FLOOR_STEPS = 8  # measured: 8 steps save as much top-k time as 12


def fuse(ids, scores, valid, *, method: str = 'tw_rrf', k=60,
         recency: str = 'linear', gamma=0.5, channel_weights=None,
         out_k: int | None = None, penalty_rank=None,
         num_ids: int | None = None):
  """Fuses one session's ring of ranked lists into one list.

  Args:
    ids: ``[W, C, K]`` integer gallery ids, age-indexed (0 = current turn),
      best first, ``-1`` padding; an id appears at most once per list.
    scores: ``[W, C, K]`` float similarities (used by ``sim_*`` only).
    valid: ``[W, C]`` bool, lists that exist.
    method: one of ``METHODS`` (static), or its index in ``METHODS``
      traced (a config's ``config_pytree.choice``: the variants then share one
      compiled program, each selected by value, each giving what its
      static name gives).
    k: RRF constant, ``>= 0``.
    recency: turn weights ``w_a`` of ``tw_rrf`` and ``penalty_rrf``:
      ``'linear'`` ``(W - a) / W``, ``'exp'`` ``gamma ** a``, ``'uniform'`` 1.
    gamma: decay of ``'exp'`` recency, ``> 0``.
    channel_weights: ``None`` (all 1) or ``[C]`` float ``lambda_c``.
    out_k: length of the fused list (static); default ``K``.
    penalty_rank: ``r_pen`` of ``penalty_rrf``; default ``K``.
    num_ids: optional gallery size (static); every id must be below it. With
      small galleries it lets the id sort run in one pass instead of two.

  Returns:
    ``(ids, scores)``: ``[out_k]`` int32 and ``[out_k]`` float32 fused
    scores, best first, ties by lower id, padded with ``-1`` / ``-inf``.
  """
  if isinstance(method, str):
    method, method_index = checks.choice('fusion method', method,
                                         METHODS), 0
  else:  # an index, traced: read by value
    if checks.is_concrete(method) and int(method) not in range(len(METHODS)):
      raise ValueError(f'fusion method index must be in [0, {len(METHODS)})'
                       f', got {method!r}')
    method, method_index = None, method
  recency = checks.choice('recency', recency, RECENCIES)
  ids = checks.array('ids', ids, 3, 'int')
  scores = checks.array('scores', scores, 3, 'float')
  valid = checks.array('valid', valid, 2, 'bool')
  w, c, kk = ids.shape
  checks.shape('scores', scores, (w, c, kk))
  checks.shape('valid', valid, (w, c))
  out_k = kk if out_k is None else checks.positive_int('out_k', out_k)
  penalty_rank = kk if penalty_rank is None else penalty_rank
  channel_weights = (np.ones((c,), np.float32) if channel_weights is None
                     else channel_weights)
  checks.shape('channel_weights', channel_weights, (c,))
  if checks.is_concrete(channel_weights):
    weights = np.asarray(channel_weights, np.float64)
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
      raise ValueError('channel_weights must be finite and >= 0, got '
                       f'{weights.tolist()}')
  for name, value, low in (('k', k, 0.0), ('gamma', gamma, None),
                           ('penalty_rank', penalty_rank, None)):
    if checks.is_concrete(value):
      v = float(value)
      if not np.isfinite(v) or (v < low if low is not None else v <= 0):
        raise ValueError(f'{name} must be {"> 0" if low is None else ">= 0"}'
                         f' and finite, got {value!r}')
  checks.unique_ids_per_list('ids', ids)
  checks.no_nan('scores', scores)
  if num_ids is None:
    key_bits = _ID_BITS
  else:
    num_ids = checks.positive_int('num_ids', num_ids)
    key_bits = num_ids.bit_length()
  checks.gallery_ids('ids', ids, num_ids, 'num_ids')
  return _fuse(ids, scores, valid, k, gamma, channel_weights, penalty_rank,
               method_index, method=method, recency=recency, out_k=out_k,
               key_bits=key_bits)


def recency_weights(window: int, recency: str, gamma=0.5):
  """``[W]`` float32 turn weights ``w_a`` by age ``a``."""
  age = jnp.arange(window, dtype=jnp.float32)
  if recency == 'linear':
    return (window - age) / jnp.float32(window)
  if recency == 'exp':
    return jnp.asarray(gamma, jnp.float32) ** age
  return jnp.ones((window,), jnp.float32)


def _select(which, a, b):
  """``a`` where ``which`` else ``b``: a Python branch for a static
  ``which``, ``jnp.where`` for a traced one (each value computed as the
  branch computes it, so both give the same bits)."""
  if isinstance(which, bool):
    return a() if which else b()
  return jnp.where(which, a(), b())


@functools.partial(jax.jit,
                   static_argnames=('method', 'recency', 'out_k', 'key_bits'))
def _fuse(ids, scores, valid, k, gamma, channel_weights, penalty_rank,
          method_index, *, method, recency, out_k, key_bits):
  """``fuse`` of ``method`` (static), or where it is None of the traced
  ``method_index``."""
  def is_(name):  # a bool, or a traced one
    return (method == name if method is not None
            else method_index == METHODS.index(name))

  w, c, kk = ids.shape
  num_entries = w * c * kk
  ids = ids.astype(jnp.int32)
  list_valid = _select(is_('static_rrf'),
                       lambda: valid & (jnp.arange(w) == 0)[:, None],
                       lambda: valid)
  entry_ok = list_valid[:, :, None] & (ids >= 0)  # [W, C, K]

  def rrf():  # (contributions, offset) of the RRF variants
    turn_w = _select(is_('uniform_rrf'),
                     lambda: recency_weights(w, 'uniform', gamma),
                     lambda: recency_weights(w, recency, gamma))
    list_w = turn_w[:, None] * jnp.asarray(channel_weights, jnp.float32)
    rank = jnp.arange(1, kk + 1, dtype=jnp.float32)
    contrib = list_w[:, :, None] / (jnp.asarray(k, jnp.float32) + rank)
    # penalty_rrf: every valid list that lacks d costs pen; adding pen back
    # on the lists that hold d turns that into a per-entry sum plus one
    # constant.
    pen = list_w / (jnp.asarray(k, jnp.float32)
                    + jnp.asarray(penalty_rank, jnp.float32))  # [W, C]
    penalty = is_('penalty_rrf')
    contrib = _select(penalty, lambda: contrib + pen[:, :, None],
                      lambda: contrib)
    offset = _select(penalty,
                     lambda: -jnp.sum(jnp.where(list_valid, pen, 0.0)),
                     lambda: jnp.float32(0))
    return jnp.broadcast_to(contrib, (w, c, kk)), offset

  similarity = is_('sim_max') | is_('sim_sum')
  if isinstance(similarity, bool):
    contrib, offset = ((scores.astype(jnp.float32), jnp.float32(0))
                       if similarity else rrf())
  else:
    rrf_contrib, rrf_offset = rrf()
    contrib = jnp.where(similarity, scores.astype(jnp.float32), rrf_contrib)
    offset = jnp.where(similarity, jnp.float32(0), rrf_offset)

  sentinel = (1 << key_bits) - 1  # sorts after every valid id
  keys = jnp.where(entry_ok, ids, sentinel).reshape(num_entries)
  order = _stable_order(keys, key_bits)
  sorted_ids = keys[order]
  ok = entry_ok.reshape(num_entries)[order]
  vals = contrib.reshape(num_entries)[order]

  head = ok & (sorted_ids != jnp.concatenate(
      [jnp.full((1,), -1, jnp.int32), sorted_ids[:-1]]))
  span = w * c  # an id occupies at most one slot per list
  pad_ids = jnp.concatenate([sorted_ids, jnp.full((span - 1,), -1, jnp.int32)])
  pad_vals = jnp.concatenate([vals, jnp.zeros((span - 1,), jnp.float32)])
  pad_ok = jnp.concatenate([ok, jnp.zeros((span - 1,), bool)])
  fused = vals
  maximum = is_('sim_max')
  for j in range(1, span):
    same = pad_ok[j:j + num_entries] & (
        pad_ids[j:j + num_entries] == sorted_ids)
    nxt = pad_vals[j:j + num_entries]
    fused = _select(
        maximum,
        lambda fused=fused, same=same, nxt=nxt: jnp.where(
            same, jnp.maximum(fused, nxt), fused),
        lambda fused=fused, same=same, nxt=nxt: fused + jnp.where(
            same, nxt, 0.0))
  fused = jnp.where(head, fused + offset, -jnp.inf)

  if out_k < num_entries:  # what cannot be in the top out_k skips the heap
    floor = floors.kth_floor(fused[None, :], out_k, _FLOOR_STEPS)[0]
    fused = jnp.where(fused >= floor, fused, -jnp.inf)
  top_scores, pos = lax.top_k(fused, min(out_k, num_entries))
  top_ids = jnp.where(top_scores > -jnp.inf, sorted_ids[pos], -1)
  if out_k > num_entries:
    top_ids = jnp.pad(top_ids, (0, out_k - num_entries), constant_values=-1)
    top_scores = jnp.pad(top_scores, (0, out_k - num_entries),
                         constant_values=-jnp.inf)
  return top_ids, top_scores


def _stable_order(keys, key_bits: int):
  """Stable ascending order of ``[P]`` non-negative int32 keys < 2**key_bits.

  An LSD radix sort whose passes are single-operand ``uint32`` sorts of
  ``digit << bits(P) | position``; the position makes each pass stable.
  """
  p, = keys.shape
  pos_bits = max(1, (p - 1).bit_length())
  digit_bits = 32 - pos_bits
  position = jnp.arange(p, dtype=jnp.uint32)
  order = None
  for shift in range(0, key_bits, digit_bits):
    cur = keys if order is None else keys[order]
    digit = (cur.astype(jnp.uint32) >> shift) & jnp.uint32(
        (1 << digit_bits) - 1)
    packed = jnp.sort((digit << pos_bits) | position)
    step = (packed & jnp.uint32((1 << pos_bits) - 1)).astype(jnp.int32)
    order = step if order is None else order[step]
  return order


def fuse_with_rank_cap(ids, scores, valid, demote_ids, caps, *,
                       return_fired: bool = False, **fuse_kwargs):
  """Rank-cap on every ring list, fusion, and rank-cap on the fused list.

  This is the ranking path of one ReCoVR turn (docs/definitions.md §1):
  ``ring -> rank_cap -> fuse -> rank_cap``.

  Args:
    ids, scores: ``[W, C, K]`` the ring's lists (see ``fuse``).
    valid: ``[W, C]`` bool.
    demote_ids: ``[M]`` integer ids to demote, ``-1`` ignored.
    caps: ``[M]`` integer caps.
    return_fired: also return ``[]`` bool, whether rank-cap changed the
      fused list (it fired: a demoted id sat above its cap; paper A.4).
    **fuse_kwargs: passed to ``fuse``.

  Returns:
    ``(ids, scores)`` of the displayed list ``[out_k]`` (and ``fired``).
  """
  ids = checks.array('ids', ids, 3, 'int')
  checks.padding_at_end('ids', ids)
  w, c, kk = ids.shape
  capped = jax.vmap(demotion.rank_cap, in_axes=(0, 0, None, None))
  flat_ids, flat_scores = capped(
      jnp.reshape(ids, (w * c, kk)), jnp.reshape(jnp.asarray(scores),
                                                 (w * c, kk)),
      demote_ids, caps)
  fused_ids, fused_scores = fuse(flat_ids.reshape(w, c, kk),
                                 flat_scores.reshape(w, c, kk), valid,
                                 **fuse_kwargs)
  out_ids, out_scores = demotion.rank_cap(fused_ids, fused_scores, demote_ids,
                                         caps)
  if return_fired:
    return out_ids, out_scores, jnp.any(out_ids != fused_ids)
  return out_ids, out_scores
