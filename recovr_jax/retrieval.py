"""Exact top-K similarity retrieval over a gallery, block by block.

The gallery is scored in blocks of ``block_size`` rows and a running top-K is
merged with each block, so memory stays ``O(B * block_size + N * D)``; a full
``[B, N]`` score matrix is never built. The merge keeps the running list in
front of the new block, and ``lax.top_k`` puts equal values at lower positions
first, so equal scores come out in ascending gallery id, as DESIGN section 2
requires.
"""

import functools

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from recovr_jax import _checks

DEFAULT_BLOCK_SIZE = 16384


def retrieve(queries, gallery, k: int, *, exclude=None,
             block_size: int = DEFAULT_BLOCK_SIZE):
  """Exact top-``k`` gallery items by dot product for each query.

  Args:
    queries: ``[B, D]`` float query embeddings.
    gallery: ``[N, D]`` float gallery embeddings.
    k: list length (static). ``k > N`` is allowed: the tail is padded.
    exclude: ``None`` or ``[B]`` integer gallery ids to drop from each query's
      list (the reference video of a composed query); ``-1`` drops nothing.
    block_size: gallery rows scored at a time (static); bounds peak memory.

  Returns:
    ``(ids, scores)``: ``[B, k]`` int32 gallery ids and ``[B, k]`` float32
    scores, best first, equal scores in ascending id, missing entries
    ``-1`` / ``-inf`` at the end.

  Raises:
    ValueError, TypeError: on bad ranks, mismatched ``D``, non-finite
      embeddings, ``k < 1`` or ``block_size < 1``, naming the argument.
  """
  k = _checks.positive_int('k', k)
  block_size = _checks.positive_int('block_size', block_size)
  queries = _checks.array('queries', queries, 2, 'float')
  gallery = _checks.array('gallery', gallery, 2, 'float')
  b, d = queries.shape
  n, d_gallery = gallery.shape
  _checks.same('queries', d, 'gallery', d_gallery, 'embedding size D')
  if n < 1:
    raise ValueError('gallery must hold at least one row, got shape '
                     f'{tuple(gallery.shape)}')
  if exclude is None:
    exclude = np.full((b,), -1, np.int32)
  else:
    exclude = _checks.array('exclude', exclude, 1, 'int')
    _checks.shape('exclude', exclude, (b,))
  _checks.finite('queries', queries)
  _checks.finite('gallery', gallery)
  return _retrieve(queries, gallery, exclude, k=k,
                   block_size=min(block_size, n))


@functools.partial(jax.jit, static_argnames=('k', 'block_size'))
def _retrieve(queries, gallery, exclude, *, k: int, block_size: int):
  return top_k_blocks(queries, gallery, exclude, k=k, block_size=block_size)


def top_k_blocks(queries, gallery, exclude, *, k: int, block_size: int,
                 id_offset=0, num_valid: int | None = None):
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
                     precision=lax.Precision.HIGHEST)  # [B, blk]
    block_ids = id_offset + start + jnp.arange(blk, dtype=jnp.int32)
    drop = block_ids[None, :] == exclude[:, None]
    if num_valid is not None:
      drop = drop | (block_ids >= num_valid)[None, :]
    scores = jnp.where(drop, -jnp.inf, scores)
    if running is None:
      top_scores, pos = lax.top_k(scores, min(kept, blk))
      return top_scores, block_ids[pos]
    run_scores, run_ids = running
    # Running entries first: they hold lower ids, so ties resolve to them.
    all_scores = jnp.concatenate([run_scores, scores], axis=1)
    all_ids = jnp.concatenate(
        [run_ids, jnp.broadcast_to(block_ids, (b, blk))], axis=1)
    top_scores, pos = lax.top_k(all_scores, kept)
    return top_scores, jnp.take_along_axis(all_ids, pos, axis=1)

  num_full, rest = divmod(n, block_size)
  running = merge(None, gallery[:block_size], 0) if num_full else None
  if running is not None and running[0].shape[1] < kept:
    running = _pad(*running, kept)
  if num_full > 1:
    def body(i, running):
      start = i * block_size
      block = lax.dynamic_slice_in_dim(gallery, start, block_size, axis=0)
      return merge(running, block, start)
    running = lax.fori_loop(1, num_full, body, running)
  if rest:
    running = merge(running, gallery[num_full * block_size:],
                    num_full * block_size)
  scores, ids = running
  ids = jnp.where(scores == -jnp.inf, -1, ids)
  return _pad(ids, scores, k) if ids.shape[1] < k else (ids, scores)


def _pad(a, b, k):
  """Pads ``[B, k']`` (ids, scores) or (scores, ids) pairs to length ``k``."""
  def pad(x):
    fill = -1 if jnp.issubdtype(x.dtype, jnp.integer) else -jnp.inf
    return jnp.pad(x, ((0, 0), (0, k - x.shape[1])), constant_values=fill)
  return pad(a), pad(b)
