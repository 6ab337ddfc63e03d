"""The interface every method implements (optax's ``init`` / ``update`` pair
is the model) and the settings they share.

A method is an object with

* ``ranking(base) -> LoopConfig``: the ranking core it runs on (fusion or a
  single list, rank-cap on or off, window);
* ``init(ctx, start) -> (state, plan)``: turn 0 for a batch of sessions;
* ``step(ctx, state, observation) -> (state, plan)``: a feedback turn for the
  sessions still searching;
* ``question(ctx, state, shown) -> [question or None]``: what to ask with the
  list just ranked (the question is part of the turn's plan, but it reads the
  list it is shown with, so the protocol asks for it after ranking);
* optionally ``jax_form``: a pure-JAX form of ``init`` / ``step`` that the
  jitted driver (``drivers.jit_runner``) runs inside ``lax.scan``: a
  ``plan.JaxForm`` (and a ``plan.JaxAsker`` when it asks).

``state`` is the method's own, for the whole batch (a list, an array): the
protocol never reads it. Methods never see the target.
"""

import abc
import dataclasses
import math
from typing import ClassVar


from recovr_jax import config_tree
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import schemas

MERLIN_ALPHA = 0.8
# Score lowered per avoided value a candidate's caption states (cosine
# units; the project's choice, set before any run; swept in sensitivity).
AVOID_PENALTY = 0.1
# Softmax temperature of UMIVR's question rule over top-K similarities.
QUESTION_TAU = 0.05
UNREFLECTED_RANK_CAPS = ('neutral', 'stagnation')


@dataclasses.dataclass(frozen=True)
class Settings:
  """Settings shared by the methods beyond the ranking core's."""
  HELP_GROUP: ClassVar[str] = 'Methods and the protocol'
  #: MERLIN's slerp alpha.
  merlin_alpha: float = config_tree.setting(MERLIN_ALPHA, sweep=True)
  ask: asking.AskPolicy = asking.AskPolicy()
  question_candidates: int = 10   # top results the Question Asker reads
  #: ReCoVR: score subtracted per avoided value a candidate's Progress
  #: Memory caption states (the project's choice; swept in sensitivity).
  avoid_penalty: float = config_tree.setting(AVOID_PENALTY, sweep=True)
  #: UMIVR: softmax temperature of its question rule over the top
  #: candidates' similarities.
  question_tau: float = config_tree.setting(QUESTION_TAU, sweep=True)
  #: Rank-cap of the ReCoVR variants without State Reflection
  #: (no_reflection, ...): neutral caps the top-1 just rejected at kappa_neu
  #: (sigma neutral); stagnation, the paper's reading ("can only react to
  #: stagnation"), gives it no cap of its own, so only top-1s shown before
  #: it are demoted (docs/definitions.md §3).
  unreflected_rank_cap: str = config_tree.setting(
      'neutral', choices=UNREFLECTED_RANK_CAPS, sweep=True)

  def __post_init__(self):
    if not (math.isfinite(self.avoid_penalty) and self.avoid_penalty >= 0):
      raise ValueError('avoid_penalty must be a finite number >= 0, got '
                       f'{self.avoid_penalty}')
    if not (math.isfinite(self.question_tau) and self.question_tau > 0):
      raise ValueError('question_tau must be a finite number > 0, got '
                       f'{self.question_tau}')
    if not 0.0 <= self.merlin_alpha <= 1.0:  # NaN fails too
      raise ValueError('merlin_alpha must be in [0, 1], got '
                       f'{self.merlin_alpha}')
    if self.unreflected_rank_cap not in UNREFLECTED_RANK_CAPS:
      raise ValueError('unreflected_rank_cap must be one of '
                       f'{", ".join(UNREFLECTED_RANK_CAPS)}, got '
                       f'{self.unreflected_rank_cap!r}')
    if self.question_candidates < 1:
      raise ValueError('question_candidates must be >= 1, got '
                       f'{self.question_candidates}')


Shown = plan.Shown  # the protocol's; methods read it


class Method(abc.ABC):
  """Defaults shared by every method: a single CoVR list shown as
  retrieved, and no questions."""

  name: str = 'method'
  fusion: str | None = None       # None: the CoVR list is shown
  rank_cap: bool = False
  asks_every_turn: bool = False   # IVR-style: a question every turn
  # Its query text is the dialogue so far, joined (``protocol.dialogue``).
  joins_dialogue: bool = False
  jax_form: plan.JaxForm | None = None  # None: host only

  def __init__(self, settings: Settings = Settings()):
    self.settings = settings

  def ranking(self, base: ranking.LoopConfig) -> ranking.LoopConfig:
    return dataclasses.replace(
        base, fusion_method=self.fusion, rank_cap=self.rank_cap,
        window=base.window if self.fusion else 1)

  @abc.abstractmethod
  def init(self, ctx: plan.Context, start: plan.Start):
    """``(state, plan)`` of turn 0 for the ``S`` sessions of ``start``."""

  @abc.abstractmethod
  def step(self, ctx: plan.Context, state, obs: plan.Observation):
    """``(state, plan)`` of a feedback turn for ``obs.sessions``."""

  def memory(self, state, row: int) -> schemas.SessionMemory:
    """The short-term Progress Memory the Question Asker reads."""
    del state, row
    return schemas.SessionMemory()

  def question(self, ctx: plan.Context, state, shown: Shown):
    """``[B]`` questions (``None``: none asked) for the lists in ``shown``;
    by default none."""
    del ctx, state
    return [None] * len(shown.sessions)
