"""UMIVR, adapted (docs/definitions.md §5): asks every turn the question that
most reduces uncertainty over the current top candidates, and the answer
extends the IVR query text.

For each attribute the top ``Settings.question_candidates`` results are
split by their caption's value of it, and the split is scored by the
expected normalised entropy of the softmax (temperature
``Settings.question_tau``) of their scores after the answer
(``asking.expected_split_entropy``); the lowest is asked, ties to the first
attribute. Without attributes (free text) the reasoner's open question is
asked.
"""

import jax
import numpy as np

from recovr_jax.methods import base
from recovr_jax.methods import ivr
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import schemas

_split_entropy = jax.jit(jax.vmap(asking.expected_split_entropy,
                                  in_axes=(0, 0, None)))


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
      return [o['question'] for o in ctx.reasoner.question([
          schemas.QuestionRequest(tuple(ctx.captions[g] for g in ids if g >= 0),
                                  schemas.SessionMemory())
          for ids in shown.ids[:, :k]])]
    best = choose_attributes(shown.ids[:, :k], shown.scores[:, :k], values,
                             self.settings.question_tau)
    return [ctx.reasoner.attribute_question(int(a)) for a in best]
