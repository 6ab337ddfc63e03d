"""UMIVR, adapted (docs/definitions.md §5): asks every turn the question that
most reduces uncertainty over the current top candidates, and the answer
extends the IVR query text.

For each attribute the top ``Settings.question_candidates`` results are
split by their caption's value of it, and the split is scored by the
expected normalised entropy of the softmax (temperature
``Settings.question_tau``) of their scores after the answer
(``asking.expected_split_entropy``); the lowest is asked, ties to the first
attribute. Without attributes (free text, ``--data=files``) the questions
are the content words of the top candidates' captions (``ctx.captions``,
the data's or a captioner's): each splits them into the captions that hold
the word and those that do not, scored the same way, and the lowest is
asked as ``asking.WORD_QUESTION`` (ties to the word met first, in
rank order, each caption's words sorted). Where no word splits
the candidates (their captions name the same words) the reasoner's open
question is asked.
"""

import jax
import numpy as np

from recovr_jax.methods import base
from recovr_jax.methods import ivr
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import schemas

_split_entropy = jax.jit(jax.vmap(asking.expected_split_entropy,
                                  in_axes=(0, 0, None)))


MAX_WORDS = 64  # caption words weighed per question (padded to it)


def choose_words(ids, scores, captions, tau):
  """``[B]`` words of the top candidates' captions to ask about (None:
  none splits them).

  Args:
    ids: ``[B, K]`` top candidates (``-1`` padding).
    scores: ``[B, K]`` their scores.
    captions: ``[N]`` the gallery's captions.
    tau: softmax temperature.
  """
  b, k = ids.shape
  words = [[] for _ in range(b)]
  present = np.zeros((b, MAX_WORDS, k), np.int32)
  for i in range(b):
    held = [set(asking.content_words(captions[g])) if g >= 0 else set()
            for g in ids[i]]
    shown = [c for c in range(k) if ids[i, c] >= 0]
    for w in dict.fromkeys(w for h in held for w in sorted(h)):
      inside = sum(w in held[c] for c in shown)
      if not 0 < inside < len(shown):
        continue  # no split
      if len(words[i]) == MAX_WORDS:
        break
      present[i, len(words[i])] = [w in h for h in held]
      words[i].append(w)
  scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
  h = np.asarray(_split_entropy(scores, present, tau))
  return [w[int(np.argmin(h[i, :len(w)]))] if w else None
          for i, w in enumerate(words)]


def choose_attributes(ids, scores, values, tau):
  """``[B]`` attributes to ask about.

  Args:
    ids: ``[B, K]`` top candidates (``-1`` padding).
    scores: ``[B, K]`` their scores.
    values: ``[N, A]`` caption values of the gallery (``-1``: none).
    tau: softmax temperature.
  """
  per_candidate = np.where(ids[:, :, None] >= 0, values[np.maximum(ids, 0)],
                           -1)                                 # [B, K, A]
  scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
  h = np.asarray(_split_entropy(scores, np.swapaxes(per_candidate, 1, 2),
                                tau))
  return np.argmin(h, axis=1)


class UMIVR(ivr.IVR):

  name = 'umivr'

  def __init__(self, settings: base.Settings = base.Settings()):
    super().__init__(settings)
    self.jax_form = ivr.JaxForm(question='split',
                                candidates=settings.question_candidates,
                                tau=settings.question_tau)

  def question(self, ctx, state, shown):
    values = ctx.reasoner.caption_values(ctx.captions)
    k = self.settings.question_candidates
    if not values.shape[1]:
      return self._word_questions(ctx, state, shown, k)
    best = choose_attributes(shown.ids[:, :k], shown.scores[:, :k], values,
                             self.settings.question_tau)
    return [ctx.reasoner.attribute_question(int(a)) for a in best]

  def _word_questions(self, ctx, state, shown, k):
    """Free text: a word of the candidates' captions per session
    (``choose_words``), else the reasoner's open question."""
    del state
    words = choose_words(shown.ids[:, :k], shown.scores[:, :k], ctx.captions,
                         self.settings.question_tau)
    out = []
    for ids, w in zip(shown.ids[:, :k], words):
      out.append(asking.WORD_QUESTION.format(w) if w is not None else
                 ctx.reasoner.question([schemas.QuestionRequest(
                     tuple(ctx.captions[g] for g in ids if g >= 0),
                     schemas.SessionMemory())])[0]['question'])
    return out
