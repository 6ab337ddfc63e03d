"""Exact top-K similarity retrieval over a gallery, block by block.

The gallery is scored in blocks of ``block_size`` rows and a running top-K is
merged with each block, so memory stays ``O(B * block_size + N * D)``; a full
``[B, N]`` score matrix is never built. The merge keeps the running list in
front of the new block, and ``lax.top_k`` puts equal values at lower positions
first, so equal scores come out in ascending gallery id, as docs/definitions.md
§2 requires.

Selection is most of the cost beside the matmul on a CPU (XLA's top-k there
is a per-row partial sort whose cost grows with every entry that enters its
heap), so each block's candidates are masked before they reach it, with two
per-row floors that no entry of the final list can be below:

* after the first block, the running list's K-th score: an entry of a later
  block that is not above it can never enter (ties go to the running list's
  lower ids), so it is masked with a strict ``>``;
* in the first block, a bound found by bisection over the block's group
  maxima: a value ``t`` with at least K groups whose maximum is ``>= t``
  holds at least K entries ``>= t``, so every entry of the final list is
  ``>= t`` (checked after the bisection; where the check fails the floor is
  ``-inf``).

Masking only removes entries that cannot be in the result, so every path is
exact and there is no capacity to overflow; an adversarial gallery (rows in
rising score order) keeps many entries unmasked and costs what an unmasked
merge costs.
"""

import functools

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import checks
from recovr_jax.core import floors

DEFAULT_BLOCK_SIZE = 16384
DEFAULT_GROUP_SIZE = 16
# On an accelerator (``jax.default_backend()`` not ``'cpu'``) the pruning
# above is not used: each block is one matmul and one ``lax.top_k``, over
# blocks of up to 4M rows (a [128, 4M] float32 score block is 2 GiB).
DEVICE_BLOCK_SIZE = 1 << 22
# --retrieval_precision -> the score matmul's precision for float32 inputs:
# highest (exact float32, the default), bf16x3 (three bfloat16 passes,
# accumulated in float32) and tf32 (one TF32 pass), each named by the
# algorithm itself (``lax.DotAlgorithmPreset``), so the name is what runs
# on every backend (``lax.Precision.HIGH`` is TF32, not bf16x3, on A100 and
# H100: google/jax#18934). XLA:CPU accepts bf16x3 and computes it in
# float32, and refuses TF32 (``check_precision``).
PRECISIONS = {'highest': lax.Precision.HIGHEST,
              'bf16x3': lax.DotAlgorithmPreset.BF16_BF16_F32_X3,
              'tf32': lax.DotAlgorithmPreset.TF32_TF32_F32}
# The precisions a backend's compiler refuses (measured: jax 0.10.2).
UNSUPPORTED = {'cpu': ('tf32',)}


def sizes(backend: str | None = None) -> tuple[int, int]:
  """``(block_size, group_size)`` of ``retrieve`` on ``backend`` (default
  JAX's): the CPU's pruned blocks, or an accelerator's plain large blocks."""
  backend = backend or jax.default_backend()
  return ((DEFAULT_BLOCK_SIZE, DEFAULT_GROUP_SIZE) if backend == 'cpu'
          else (DEVICE_BLOCK_SIZE, 0))


def check_precision(name: str, backend: str | None = None) -> None:
  """Raises ``ValueError`` naming ``--retrieval_precision`` when
  ``backend`` (default JAX's) cannot run the precision ``name``."""
  backend = backend or jax.default_backend()
  if name in UNSUPPORTED.get(backend, ()):
    runs = [p for p in PRECISIONS if p not in UNSUPPORTED[backend]]
    raise ValueError(f'--retrieval_precision={name}: XLA on {backend} has '
                     f'no {name} matmul; use {" or ".join(runs)}')


def precision_of(name: str):
  """The matmul precision (``lax.Precision`` or ``lax.DotAlgorithmPreset``)
  of a ``PRECISIONS`` name."""
  if name not in PRECISIONS:
    raise ValueError(f'unknown retrieval precision {name!r}; valid: '
                     f'{", ".join(PRECISIONS)}')
  return PRECISIONS[name]


def retrieve(queries, gallery, k: int, *, exclude=None, penalty=None,
             block_size: int | None = None, group_size: int | None = None,
             recall_target: float | None = None,
             precision: str = 'highest'):
  """Exact top-``k`` gallery items by dot product for each query
  (approximate, opt-in, with ``recall_target``).

  Args:
    queries: ``[B, D]`` float query embeddings.
    gallery: ``[N, D]`` float gallery embeddings.
    k: list length (static). ``k > N`` is allowed: the tail is padded.
    exclude: ``None`` or ``[B]`` integer gallery ids to drop from each query's
      list (the reference video of a composed query), each ``-1`` (drops
      nothing) or a row of ``gallery`` (``< N``; a reference stored outside
      the searched rows is passed as ``-1``).
    penalty: ``None`` or ``[B, N]`` float, subtracted from each query's
      scores before ranking (ReCoVR's avoid constraints); returned scores
      are the penalised ones.
    block_size: gallery rows scored at a time (static); bounds peak memory.
      Default ``sizes()``'s for JAX's backend.
    group_size: exact candidate pruning before each block's top-k (static;
      0 disables it): only the ``k`` column groups of this size with the
      largest maxima can hold the block's top-k. Default ``sizes()``'s: on
      a CPU 16, on an accelerator 0.
    precision: a ``PRECISIONS`` name, the score matmul's precision.
    recall_target: ``None`` (exact, the default) or a float in ``(0, 1]``:
      each block's candidates come from ``lax.approx_max_k`` with this
      recall target, which is fast on TPUs; the running list is still
      merged exactly. The result may miss items and equal scores need not
      come out in ascending id (on CPU and GPU XLA computes it exactly;
      ``experiments/bench/bench_retrieval.py`` reports the measured recall@K).

  Returns:
    ``(ids, scores)``: ``[B, k]`` int32 gallery ids and ``[B, k]`` float32
    scores, best first, equal scores in ascending id, missing entries
    ``-1`` / ``-inf`` at the end.

  Raises:
    ValueError, TypeError: on bad ranks, mismatched ``D``, non-finite
      embeddings, ``k < 1`` or ``block_size < 1``, naming the argument.
  """
  k = checks.positive_int('k', k)
  default_block, default_group = sizes()
  block_size = checks.positive_int(
      'block_size', default_block if block_size is None else block_size)
  group_size = default_group if group_size is None else group_size
  matmul_precision = precision_of(precision)
  queries = checks.array('queries', queries, 2, 'float')
  gallery = checks.array('gallery', gallery, 2, 'float')
  b, d = queries.shape
  n, d_gallery = gallery.shape
  checks.same('queries', d, 'gallery', d_gallery, 'embedding size D')
  if n < 1:
    raise ValueError('gallery must hold at least one row, got shape '
                     f'{tuple(gallery.shape)}')
  if exclude is None:
    exclude = np.full((b,), -1, np.int32)
  else:
    exclude = checks.array('exclude', exclude, 1, 'int')
    checks.shape('exclude', exclude, (b,))
    checks.gallery_ids('exclude', exclude, n)
  if penalty is not None:
    penalty = checks.array('penalty', penalty, 2, 'float')
    checks.shape('penalty', penalty, (b, n))
    checks.finite('penalty', penalty, 'penalties')
  checks.finite('queries', queries)
  checks.finite('gallery', gallery)
  if isinstance(group_size, bool) or not isinstance(group_size, int) or (
      group_size < 0):
    raise ValueError(f'group_size must be an integer >= 0, got {group_size!r}')
  if recall_target is not None:
    if isinstance(recall_target, bool) or not isinstance(
        recall_target, (int, float)) or not 0 < recall_target <= 1:
      raise ValueError('recall_target must be None (exact) or a number in '
                       f'(0, 1], got {recall_target!r}')
    recall_target = float(recall_target)
  return _retrieve(queries, gallery, exclude, penalty, k=k,
                   block_size=min(block_size, n), group_size=group_size,
                   recall_target=recall_target, precision=matmul_precision)


@functools.partial(jax.jit, static_argnames=('k', 'block_size', 'group_size',
                                             'recall_target', 'precision'))
def _retrieve(queries, gallery, exclude, penalty, *, k: int, block_size: int,
              group_size: int, recall_target: float | None, precision):
  return top_k_blocks(queries, gallery, exclude, k=k, block_size=block_size,
                      group_size=group_size, penalty=penalty,
                      recall_target=recall_target, precision=precision)


def top_k_blocks(queries, gallery, exclude, *, k: int, block_size: int,
                 id_offset=0, num_valid: int | None = None,
                 group_size: int = DEFAULT_GROUP_SIZE, penalty=None,
                 recall_target: float | None = None,
                 precision=lax.Precision.HIGHEST):
  """The blocked exact top-k; un-jitted so sharded callers can reuse it.

  Args:
    queries: ``[B, D]``.
    gallery: ``[N, D]`` (float32 or bfloat16; blocks are scored in float32).
    exclude: ``[B]`` int32 global ids to drop, ``-1`` none.
    k: list length.
    block_size: rows per block, ``<= N``.
    id_offset: global id of ``gallery[0]`` (a shard's offset; may be traced).
    num_valid: global ids ``>= num_valid`` are padding rows and never
      returned; ``None`` for no padding.
    group_size: candidate pruning (``_candidate_groups``) on blocks of at
      least ``4 * k * group_size`` rows; 0 disables it.
    penalty: ``None`` or ``[B, N]`` float subtracted from the scores.
    recall_target: ``None`` (exact) or ``lax.approx_max_k``'s recall
      target for each block's candidates.
    precision: the score matmul's ``lax.Precision``.

  Returns:
    ``(ids [B, k] int32, scores [B, k] float32)``.
  """
  b, _ = queries.shape
  n, _ = gallery.shape
  queries = queries.astype(jnp.float32)
  exclude = exclude.astype(jnp.int32)
  kept = min(k, n)  # the running list never needs more than N entries

  def merge(running, block, start):
    """Merges one gallery block ``[blk, D]`` whose first row is ``start``."""
    blk, _ = block.shape
    scores = jnp.dot(queries, block.astype(jnp.float32).T,
                     precision=precision)  # [B, blk]
    if penalty is not None:
      scores = scores - lax.dynamic_slice_in_dim(
          penalty, start, blk, axis=1).astype(jnp.float32)
    block_ids = id_offset + start + jnp.arange(blk, dtype=jnp.int32)

    def dropped(ids):  # [B, X] or [X] ids -> [B, X]: excluded or padding
      ids = jnp.broadcast_to(ids, (b,) + ids.shape[-1:])
      drop = ids == exclude[:, None]
      return drop if num_valid is None else drop | (ids >= num_valid)

    if running is None:
      can_enter = None  # the first block: floors come from the block itself
    else:
      floor = running[0][:, kept - 1:kept]  # the running K-th score
      can_enter = lambda x: x > floor
    if group_size and blk >= 4 * kept * group_size and (
        recall_target is None):
      # The drop is applied inside the group maxima and to the kept
      # candidates, so the block's scores are not written a second time.
      scores, block_ids = _candidate_groups(scores, block_ids, kept,
                                            group_size, can_enter, dropped)
      blk = scores.shape[1]
    else:
      scores = jnp.where(dropped(block_ids), -jnp.inf, scores)
      if recall_target is not None and blk > kept:
        scores, pos = lax.approx_max_k(scores, kept,
                                       recall_target=recall_target)
        block_ids, blk = block_ids[pos], kept
      elif can_enter is not None:
        scores = jnp.where(can_enter(scores), scores, -jnp.inf)
    block_ids = jnp.broadcast_to(block_ids, (b, blk))
    if running is None:
      top_scores, pos = lax.top_k(scores, min(kept, blk))
      return top_scores, jnp.take_along_axis(block_ids, pos, axis=1)
    run_scores, run_ids = running
    # Running entries first: they hold lower ids, so ties resolve to them.
    all_scores = jnp.concatenate([run_scores, scores], axis=1)
    all_ids = jnp.concatenate([run_ids, block_ids], axis=1)
    top_scores, pos = lax.top_k(all_scores, kept)
    return top_scores, jnp.take_along_axis(all_ids, pos, axis=1)

  num_full, rest = divmod(n, block_size)
  running = merge(None, gallery[:block_size], 0) if num_full else None
  if running is not None and running[0].shape[1] < kept:
    running = _pad(*running, kept)
  if num_full > 1:
    def body(i, running):
      start = i * block_size
      # The barrier makes the gallery loop-variant: XLA:CPU would otherwise
      # hoist a narrow gallery's float32 conversion out of the loop (a
      # whole float32 copy: peak 3.1x a bfloat16 gallery); this way the
      # conversion fuses into each block's slice.
      rows, running = lax.optimization_barrier((gallery, running))
      block = lax.dynamic_slice_in_dim(rows, start, block_size, axis=0)
      return merge(running, block, start)
    running = lax.fori_loop(1, num_full, body, running)
  if rest:
    if running is not None:
      # Without the barrier, XLA:CPU turns a first block's top-k of its
      # candidates into a full sort of them when a short block follows
      # (a gallery of 16,384 to 32,767 rows: 2.5x slower).
      running = lax.optimization_barrier(running)
    running = merge(running, gallery[num_full * block_size:],
                    num_full * block_size)
  scores, ids = running
  ids = jnp.where(scores == -jnp.inf, -1, ids)
  return _pad(ids, scores, k) if ids.shape[1] < k else (ids, scores)


def _candidate_groups(scores, block_ids, k: int, group: int, can_enter,
                      dropped):
  """The block's entries that can still be in its top-k, in id order.

  Columns form groups of ``group``; an entry of the top ``k`` has at most
  ``k - 1`` larger entries, so at most ``k - 1`` groups have a larger maximum
  and its group is among the ``k`` groups with the largest maxima (equal
  maxima go to lower groups, which hold the lower ids that win ties anyway).
  Keeping those groups, re-sorted into id order, leaves the exact top-k and
  its tie order unchanged while ``lax.top_k`` sees ``k * group`` entries
  instead of the whole block.

  Before each ``lax.top_k``, entries that cannot be in the merged list are
  masked to ``-inf`` (the module docstring's floors): ``can_enter`` says
  which entries can (``None`` for the first block, whose floor is
  ``floors.kth_floor`` of its group maxima). The argument above holds for the
  masked maxima too: a group whose maximum was masked holds no entry that
  can enter. ``dropped(ids)`` marks excluded and padding entries, which
  never count in a maximum and are ``-inf`` among the candidates.

  Returns:
    ``(scores [B, k * group], ids [B, k * group])``.
  """
  b, blk = scores.shape
  full = blk // group * group  # the last group may be short: its maximum
  masked = jnp.where(dropped(block_ids), -jnp.inf, scores)  # taken alone
  maxima = jnp.max(masked[:, :full].reshape(b, blk // group, group), axis=2)
  if full < blk:
    maxima = jnp.concatenate(
        [maxima, jnp.max(masked[:, full:], axis=1, keepdims=True)], axis=1)
  if can_enter is None:
    floor = floors.kth_floor(maxima, k)
    can_enter = lambda x: x >= floor
  _, best = lax.top_k(jnp.where(can_enter(maxima), maxima, -jnp.inf), k)
  best = jnp.sort(best, axis=1)  # id order, so ties still favour lower ids
  columns = (best[:, :, None] * group + jnp.arange(group)).reshape(b, -1)
  inside = True
  if full < blk:  # a short last group's columns past the block: never kept
    inside = columns < blk
    columns = jnp.minimum(columns, blk - 1)
  kept_scores = jnp.take_along_axis(scores, columns, axis=1)
  kept_ids = block_ids[columns]
  kept_scores = jnp.where(inside & can_enter(kept_scores) &
                          ~dropped(kept_ids), kept_scores, -jnp.inf)
  return kept_scores, kept_ids


def _pad(a, b, k):
  """Pads ``[B, k']`` (ids, scores) or (scores, ids) pairs to length ``k``."""
  def pad(x):
    fill = -1 if jnp.issubdtype(x.dtype, jnp.integer) else -jnp.inf
    return jnp.pad(x, ((0, 0), (0, k - x.shape[1])), constant_values=fill)
  return pad(a), pad(b)
