"""Unit vectors: the one L2 normalisation, and the training-free composer.

Both are pure ``jax.numpy`` (jit-able, on host arrays too), shared by the
encoders, the real-data environment, slerp and the jitted driver.
"""

import jax.numpy as jnp

EPS = 1e-12  # a row of norm below this is divided by EPS (stays ~0)


def normalize(x, axis: int = -1):
  """``x`` scaled to unit L2 norm along ``axis``; a zero row stays zero."""
  x = jnp.asarray(x)
  return x / jnp.maximum(jnp.linalg.norm(x, axis=axis, keepdims=True), EPS)


def sum_composer(reference, edit):
  """The training-free composer: the normalised sum ``[..., D]``."""
  return normalize(jnp.asarray(reference) + jnp.asarray(edit))
