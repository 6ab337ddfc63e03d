"""Query updates of the adapted baselines (docs/definitions.md §5)."""

import jax
import jax.numpy as jnp

from recovr_jax.core import checks
from recovr_jax.core import vectors

MERLIN_ALPHA = 0.8
_PARALLEL_EPS = 1e-6  # sin(theta) below this: the inputs are (anti)parallel


def slerp(prev, new, alpha=MERLIN_ALPHA):
  """MERLIN's spherical interpolation of query embeddings (its eq. 6).

  ``e_r = sin((1 - alpha) th) / sin th * new + sin(alpha th) / sin th * prev``
  with ``th = arccos(new . prev)`` after L2-normalising both, so ``prev`` keeps
  the weight of ``alpha`` (80% by default).

  Args:
    prev: ``[D]`` float, the previous query ``e_{r-1}``.
    new: ``[D]`` float, the embedding of the new answer.
    alpha: share kept from ``prev``, in ``[0, 1]``.

  Returns:
    ``[D]`` float32. When the angle is about 0 (or about pi, where the
    interpolation is undefined) it returns the normalised ``prev``.
  """
  prev = checks.array('prev', prev, 1, 'float')
  new = checks.array('new', new, 1, 'float')
  checks.same('prev', prev.shape[0], 'new', new.shape[0], 'embedding size D')
  checks.finite('prev', prev)
  checks.finite('new', new)
  checks.nonzero('prev', prev)
  checks.nonzero('new', new)
  if checks.is_concrete(alpha) and not 0.0 <= float(alpha) <= 1.0:
    raise ValueError(f'alpha must be in [0, 1], got {alpha!r}')
  return _slerp(prev, new, alpha)


@jax.jit
def _slerp(prev, new, alpha):
  prev = vectors.normalize(prev.astype(jnp.float32))
  new = vectors.normalize(new.astype(jnp.float32))
  theta = jnp.arccos(jnp.clip(jnp.dot(new, prev), -1.0, 1.0))
  sin_theta = jnp.sin(theta)
  degenerate = sin_theta < _PARALLEL_EPS
  safe_sin = jnp.where(degenerate, 1.0, sin_theta)
  out = (jnp.sin((1.0 - alpha) * theta) / safe_sin * new
         + jnp.sin(alpha * theta) / safe_sin * prev)
  return jnp.where(degenerate, prev, out)


