"""A floor under the k-th largest value of each row, without a sort.

XLA's CPU top-k is a per-row partial sort whose cost grows with every entry
that enters its heap, so the callers (``retrieval``, ``fusion``) mask what
cannot be in the top k before they call it: an entry below a value ``t``
with at least ``k`` values ``>= t`` in its row has ``k`` entries ahead of it.
"""

from jax import lax
import jax.numpy as jnp

STEPS = 12  # bisection steps: a floor within ~1/4096 of a row's range


def kth_floor(values, k: int, steps: int = STEPS):
  """Per row, a ``t`` with at least ``k`` of ``values >= t``, or ``-inf``.

  Bisection between the row's smallest finite value and its largest, keeping
  the invariant "at least ``k`` values ``>= lo``"; a row where that does not
  hold at the end (fewer than ``k`` finite values) gets ``-inf``. Every step
  is one fused compare-and-count over ``values``: no sort, no top-k.

  Args:
    values: ``[B, G]`` float32 (``-inf`` allowed); leading batch dimensions
      are fine (the count is over the last axis).
    k: how many values must be ``>= t``.
    steps: bisection steps (static).

  Returns:
    ``[B, 1]`` float32 (the input's shape with a last axis of 1).
  """
  finite = values > -jnp.inf
  lo = jnp.min(jnp.where(finite, values, jnp.inf), axis=-1, keepdims=True)
  hi = jnp.max(values, axis=-1, keepdims=True)
  lo = jnp.where(lo < jnp.inf, lo, 0.0)
  hi = jnp.where(hi > -jnp.inf, hi, 0.0)

  def enough(t):
    return jnp.sum(values >= t, axis=-1, keepdims=True, dtype=jnp.int32) >= k

  def step(_, bounds):
    lo, hi = bounds
    mid = lo * 0.5 + hi * 0.5  # no overflow for any finite pair
    ok = enough(mid)
    return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

  lo, _ = lax.fori_loop(0, steps, step, (lo, hi))
  return jnp.where(enough(lo), lo, -jnp.inf)
