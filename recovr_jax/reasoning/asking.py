"""When to ask a question (after AskStream): an uncertainty gate.

The system asks only when the normalised entropy of ``softmax(scores / tau)``
over the fused list's valid entries exceeds a threshold, and only while the
session's ask budget lasts. Modes: ``always``, ``never``, ``entropy``.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

ASK_MODES = ('always', 'never', 'entropy')


@dataclasses.dataclass(frozen=True)
class AskPolicy:
  mode: str = 'never'
  threshold: float = 0.8   # normalised entropy in [0, 1]
  tau: float = 0.05        # softmax temperature over fused scores
  budget: int = 2          # questions per session

  def __post_init__(self):
    if self.mode not in ASK_MODES:
      raise ValueError(f'unknown ask mode {self.mode!r}; valid choices: '
                       f'{", ".join(ASK_MODES)}')
    if not 0.0 <= self.threshold <= 1.0:
      raise ValueError(f'ask threshold must be in [0, 1], got '
                       f'{self.threshold}')
    if not (math.isfinite(self.tau) and self.tau > 0):
      raise ValueError(f'ask tau must be a finite number > 0, got {self.tau}')
    if self.budget < 0:
      raise ValueError(f'ask budget must be >= 0, got {self.budget}')


def normalized_entropy(scores, tau):
  """Entropy of ``softmax(scores / tau)`` over finite entries, divided by
  ``log(number of finite entries)``; 0 for one entry or none.

  Args:
    scores: ``[K]`` float fused scores, ``-inf`` padding.
    tau: temperature ``> 0``.

  Returns:
    ``[]`` float32 in ``[0, 1]``. Pure and jit-able; vmap it over sessions.
  """
  scores = jnp.asarray(scores, jnp.float32)
  valid = jnp.isfinite(scores)
  n = jnp.sum(valid)
  logits = jnp.where(valid, scores / tau, -jnp.inf)
  logp = jax.nn.log_softmax(jnp.where(n > 0, logits, 0.0))
  p = jnp.exp(logp)
  h = -jnp.sum(jnp.where(valid, p * logp, 0.0))
  return jnp.where(n > 1, h / jnp.log(jnp.maximum(n, 2).astype(jnp.float32)),
                   0.0)


def should_ask(policy: AskPolicy, entropy, asked_so_far: int) -> bool:
  """Host-side decision for one session."""
  if policy.mode == 'never' or asked_so_far >= policy.budget:
    return False
  if policy.mode == 'always':
    return True
  return bool(entropy > policy.threshold)
