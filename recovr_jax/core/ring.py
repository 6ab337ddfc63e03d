"""Result Memory: the ring of the last ``W`` turns' ranked lists.

Lists are age-indexed: index 0 is the current turn and index ``a`` is ``a``
turns ago, so fusion reads recency straight from the index. ``push`` shifts
every list one step older and drops the oldest.
"""

import dataclasses

import jax
import jax.numpy as jnp

from recovr_jax.core import checks


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ResultMemory:
  """The ring of the last ``W`` turns' lists of ``C`` channels."""
  ids: jax.Array     # [W, C, K] int32 gallery ids, -1 padding
  scores: jax.Array  # [W, C, K] float32, -inf padding
  valid: jax.Array   # [W, C] bool, lists that exist


def init_result_memory(window: int, num_channels: int,
                       list_length: int) -> ResultMemory:
  """An empty ring: every list invalid and fully padded.

  Args:
    window: ``W >= 1``, turns kept.
    num_channels: ``C >= 1``, lists per turn.
    list_length: ``K >= 1``, entries per list.
  """
  w = checks.positive_int('window', window)
  c = checks.positive_int('num_channels', num_channels)
  k = checks.positive_int('list_length', list_length)
  return ResultMemory(ids=jnp.full((w, c, k), -1, jnp.int32),
                      scores=jnp.full((w, c, k), -jnp.inf, jnp.float32),
                      valid=jnp.zeros((w, c), bool))


def push(memory: ResultMemory, ids, scores, valid) -> ResultMemory:
  """Adds this turn's lists at age 0; the oldest turn falls out.

  Args:
    memory: the ring, ``[W, C, K]``.
    ids: ``[C, K]`` integer ids of this turn.
    scores: ``[C, K]`` float scores.
    valid: ``[C]`` bool, which of this turn's lists exist.

  Returns:
    The new ``ResultMemory``.
  """
  _, c, k = memory.ids.shape
  checks.shape('ids', ids, (c, k))
  checks.shape('scores', scores, (c, k))
  checks.shape('valid', valid, (c,))

  def shift(old, new):
    return jnp.concatenate([new[None].astype(old.dtype), old[:-1]], axis=0)

  return ResultMemory(ids=shift(memory.ids, jnp.asarray(ids)),
                      scores=shift(memory.scores, jnp.asarray(scores)),
                      valid=shift(memory.valid, jnp.asarray(valid)))
