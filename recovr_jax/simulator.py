"""The simulated user (paper appendix D.2 and D.4).

Target-conditioned: it sees the target, the displayed top-1 and an optional
system question, never a method's internals. Its policy:

* stop when the displayed top-1 is the target ("found it");
* Answer when a question is available and the discrepancy is major (more than
  ``modify_threshold`` attributes differ);
* Modify when at most ``modify_threshold`` attributes differ: a relative edit
  naming a random non-empty subset of the differing attributes;
* Rewrite otherwise: a fresh description of the target naming a random
  subset of its attributes, never all of them.

Each session's draws come from its own generator, seeded by
``(seed, session, turn)``, so they do not depend on the method under test.
Degradations: surface noise (character and word perturbations at a rate),
constraint dropping (each mentioned attribute dropped with a probability),
and modify-only / rewrite-only policies.
"""

import dataclasses

import numpy as np

from recovr_jax import lexicon
from recovr_jax import world as world_lib

ACTIONS = ('stop', 'modify', 'rewrite', 'answer')
POLICIES = ('mixed', 'modify_only', 'rewrite_only')


@dataclasses.dataclass(frozen=True)
class UserConfig:
  """The simulated user's policy and degradations."""
  modify_threshold: int = 2    # m: Modify when at most m attributes differ
  policy: str = 'mixed'        # one of POLICIES
  noise_rate: float = 0.0      # share of words perturbed
  drop_rate: float = 0.0       # probability of dropping each mention
  min_described: int = 2       # a Rewrite names between these many
  max_described: int = 5       # attributes (never all of them)

  def __post_init__(self):
    if self.policy not in POLICIES:
      raise ValueError(f'unknown user policy {self.policy!r}; valid choices: '
                       f'{", ".join(POLICIES)}')
    if self.modify_threshold < 0:
      raise ValueError('modify_threshold must be >= 0, got '
                       f'{self.modify_threshold}')
    for name in ('noise_rate', 'drop_rate'):
      if not 0.0 <= getattr(self, name) <= 1.0:
        raise ValueError(f'{name} must be in [0, 1], got '
                         f'{getattr(self, name)}')
    num = world_lib.NUM_ATTRIBUTES
    if not 1 <= self.min_described <= self.max_described <= num - 1:
      raise ValueError(
          f'need 1 <= min_described <= max_described <= {num - 1}, got '
          f'{self.min_described} and {self.max_described}')


@dataclasses.dataclass(frozen=True)
class Feedback:
  """One turn of user feedback."""
  action: str                 # one of ACTIONS
  text: str                   # what the user says ('' when stopping)
  mentioned: dict[int, int]   # attribute -> value the text names (pre-noise)


_MODIFY_PREFIX = ('', 'Close, but ', 'Almost. ', 'Not quite: ', 'Good start; ')
_REWRITE_PREFIX = ('', 'No. I want ', 'Wrong video. Show me ',
                   "That's not it. I'm looking for ", 'Try ')
_ANSWER_TEMPLATES = ('{}', 'I want {}', 'It should be {}', '{}, please')
_GENERIC = ('not this one', 'no, try again', 'that is not what I want')


class SimulatedUser:
  """A target-conditioned user over the generated world."""

  def __init__(self, config: UserConfig = UserConfig(), seed: int = 0):
    self.config = config
    self.seed = seed

  def rng(self, session: int, turn: int) -> np.random.Generator:
    return np.random.default_rng([self.seed, session, turn])

  def respond(self, session: int, turn: int, target_id, shown_id, target_attrs,
              shown_attrs, question: str | None = None) -> Feedback:
    """The user's feedback on the displayed top-1.

    Args:
      session: session index (seeds the draws with ``turn``).
      turn: the turn about to be executed (>= 1).
      target_id, shown_id: gallery ids of the target and the displayed top-1.
      target_attrs, shown_attrs: ``[A]`` attribute values of both.
      question: the system's question shown with the list, if any.
    """
    if int(shown_id) == int(target_id):
      return Feedback('stop', '', {})
    rng = self.rng(session, turn)
    cfg = self.config
    target = np.asarray(target_attrs)
    diff = np.flatnonzero(target != np.asarray(shown_attrs))
    asked = None if question is None else lexicon.question_attribute(question)
    major = len(diff) > cfg.modify_threshold
    if cfg.policy == 'mixed' and asked is not None and major:
      action = 'answer'
    elif cfg.policy == 'modify_only' and len(diff):
      action = 'modify'
    elif cfg.policy == 'rewrite_only' or major or not len(diff):
      action = 'rewrite'
    else:
      action = 'modify'

    if action == 'answer':
      named = [asked]
    elif action == 'modify':
      named = list(rng.permutation(diff)[:rng.integers(1, len(diff) + 1)])
    else:
      size = int(rng.integers(cfg.min_described, cfg.max_described + 1))
      named = list(rng.permutation(world_lib.NUM_ATTRIBUTES)[:size])
    named = [a for a in named if rng.random() >= cfg.drop_rate]
    mentioned = {int(a): int(target[a]) for a in named}

    if not named:
      text = str(rng.choice(_GENERIC))
    elif action == 'modify':
      mask = np.zeros(world_lib.NUM_ATTRIBUTES, bool)
      mask[named] = True
      text = (str(rng.choice(_MODIFY_PREFIX))
              + world_lib.edit_text(rng, target, mask))
    elif action == 'rewrite':
      text = (str(rng.choice(_REWRITE_PREFIX))
              + lexicon.describe(rng, target, named))
    else:
      text = str(rng.choice(_ANSWER_TEMPLATES)).format(
          lexicon.describe(rng, target, named))
    if cfg.noise_rate:
      text = add_surface_noise(rng, text, cfg.noise_rate)
    return Feedback(action, text, mentioned)


def add_surface_noise(rng: np.random.Generator, text: str, rate: float) -> str:
  """Perturbs each word with probability ``rate``: a character swapped,
  dropped, doubled or replaced, or the word dropped or repeated."""
  out = []
  for word in text.split(' '):
    if not word or rng.random() >= rate:
      out.append(word)
      continue
    kind = rng.integers(6)
    i = int(rng.integers(len(word)))
    if kind == 0 and len(word) > 1:
      i = min(i, len(word) - 2)
      word = word[:i] + word[i + 1] + word[i] + word[i + 2:]
    elif kind == 1 and len(word) > 1:
      word = word[:i] + word[i + 1:]
    elif kind == 2:
      word = word[:i] + word[i] + word[i:]
    elif kind == 3:
      word = word[:i] + chr(ord('a') + int(rng.integers(26))) + word[i + 1:]
    elif kind == 4:
      continue  # the word is dropped
    else:
      out.append(word)  # the word is repeated
    out.append(word)
  return ' '.join(out)


class CaptionUser:
  """A user for real data: compares the target's caption with the caption
  of the shown video. Without a phrasing model it rewrites: it asks for the
  target's caption with words dropped at ``drop_rate``; a ``phrase`` callable
  (for example a reasoning LM) may word the feedback instead."""

  def __init__(self, drop_rate: float = 0.0, seed: int = 0, phrase=None):
    if not 0.0 <= drop_rate < 1.0:
      raise ValueError(f'drop_rate must be in [0, 1), got {drop_rate}')
    self.drop_rate = drop_rate
    self.seed = seed
    self.phrase = phrase

  def respond(self, session: int, turn: int, target_id, shown_id,
              target_caption: str, shown_caption: str) -> Feedback:
    if target_id == shown_id:
      return Feedback('stop', '', {})
    if self.phrase is not None:
      return Feedback('rewrite', str(self.phrase(target_caption,
                                                 shown_caption)), {})
    rng = np.random.default_rng([self.seed, session, turn])
    words = [w for w in target_caption.split()
             if rng.random() >= self.drop_rate]
    return Feedback('rewrite', 'Not this one. I want ' + ' '.join(words), {})
