"""When to ask a question (after AskStream): an uncertainty gate.

The system asks only when the normalised entropy of ``softmax(scores / tau)``
over the fused list's valid entries exceeds a threshold, and only while the
session's ask budget lasts. Modes: ``always``, ``never``, ``entropy``.
"""

import dataclasses
import math
import re
from typing import ClassVar

import jax
import jax.numpy as jnp

from recovr_jax import config_pytree
from recovr_jax import config_tree
from recovr_jax.core import checks

ASK_MODES = ('always', 'never', 'entropy')

# Words that are no caption's content (the caption user's and UMIVR's on
# free text).
STOP_WORDS = frozenset("""
a an the and or but of in on at to for from with by into onto over under
is are was were be been being it its this that these those there here as
while then than very some any each one two who whom which what when where
his her their our your my i we you he she they them him me us up down out
off about after before through during not no video clip shows showing
""".split())


def content_words(caption: str) -> list[str]:
  """Lower-cased words of ``caption`` without stop words, first occurrence
  order."""
  words = re.findall(r"[a-z0-9']+", caption.lower())
  return list(dict.fromkeys(w for w in words if w not in STOP_WORDS))


# The question a method asks about one word of the candidates' captions
# (UMIVR on free text), and the caption user's answers to it.
WORD_QUESTION = 'Does the video you want show {}?'
_WORD_QUESTION = re.compile(r'^Does the video you want show ([a-z0-9\']+)\?$')


def asked_word(question) -> str | None:
  """The word ``question`` asks about when it is a ``WORD_QUESTION``."""
  found = _WORD_QUESTION.match(question) if isinstance(question, str) else None
  return found.group(1) if found else None


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class AskPolicy:
  """ReCoVR's Question Asker. The default is the paper's protocol: a
  question with every list after turn 0 (the user may answer or ignore)."""
  HELP_GROUP: ClassVar[str] = 'Methods and the protocol'
  #: When ReCoVR's Question Asker asks (the user may answer or ignore):
  #: always (the paper's protocol), never, or entropy (gated by the
  #: normalised entropy of the fused list, after AskStream).
  mode: str = config_tree.setting('always', flag='ask_mode',
                                  choices=ASK_MODES, sweep=True)
  #: Entropy gate of --ask_mode=entropy (normalised entropy in [0, 1]).
  threshold: float = config_tree.setting(0.8, flag='ask_threshold',
                                         sweep=True, traced=True)
  #: Softmax temperature of the entropy gate over fused scores.
  tau: float = config_tree.setting(0.05, flag='ask_tau', traced=True)
  #: Questions per session (5: one with every list after turn 0 when
  #: T = 5).
  budget: int = config_tree.setting(5, flag='ask_budget', sweep=True,
                               traced=True)

  def __post_init__(self):
    if not config_pytree.concrete(self):
      return  # rebuilt from a pytree's leaves: checked when made
    if self.mode not in ASK_MODES:
      raise ValueError(f'unknown ask mode {self.mode!r}; valid choices: '
                       f'{", ".join(ASK_MODES)}')
    if not 0.0 <= self.threshold <= 1.0:
      raise ValueError(f'ask threshold must be in [0, 1], got '
                       f'{self.threshold}')
    if not (math.isfinite(self.tau) and self.tau > 0):
      raise ValueError(f'ask tau must be a finite number > 0, got {self.tau}')
    checks.at_least_int('ask budget', self.budget, 0)


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


def expected_split_entropy(scores, values, tau):
  """UMIVR's question rule (docs/definitions.md §5): for each candidate question
  (an attribute), the expected normalised entropy of the softmax of the
  top-K scores after the answer.

  The answer keeps the candidates whose caption has the answered value; a
  group of ``n`` candidates with softmax mass ``P`` has normalised entropy
  ``H = -sum (p / P) log(p / P) / log(n)`` (0 for ``n <= 1``), and the
  expectation weighs each group by ``P``. Candidates whose caption states
  no value form one group. Ask the attribute with the lowest value.

  Args:
    scores: ``[K]`` float scores of the current top candidates, ``-inf``
      padding (padding takes no part).
    values: ``[A, K]`` int each candidate's caption value of each attribute
      (``-1``: none stated).
    tau: softmax temperature ``> 0``.

  Returns:
    ``[A]`` float32 in ``[0, 1]``. Pure and jit-able; vmap it over sessions.
  """
  scores = jnp.asarray(scores, jnp.float32)
  valid = jnp.isfinite(scores)
  logits = jnp.where(valid, scores / tau, -jnp.inf)
  p = jnp.where(valid, jax.nn.softmax(jnp.where(jnp.any(valid), logits, 0.0)),
                0.0)

  def one(vals):  # [K] -> []
    same = (vals[:, None] == vals[None, :]) & valid[:, None] & valid[None, :]
    n = jnp.sum(same, axis=1)                      # group size per candidate
    mass = jnp.sum(jnp.where(same, p[None, :], 0.0), axis=1)  # group mass
    q = jnp.where(same, p[None, :] / jnp.maximum(mass[:, None], 1e-30), 0.0)
    h = -jnp.sum(jnp.where(q > 0, q * jnp.log(jnp.maximum(q, 1e-30)), 0.0),
                 axis=1)
    h = jnp.where(n > 1, h / jnp.log(jnp.maximum(n, 2).astype(jnp.float32)),
                  0.0)
    return jnp.sum(p * h)   # sum over groups of P(g) H(g), per candidate

  return jax.vmap(one)(jnp.asarray(values))
