"""MERLIN, adapted (docs/definitions.md §5): asks every turn about the anchor's
caption (the reference video's: the anchor is fixed), and moves its running
query text embedding towards each answer's text embedding by spherical
interpolation (its eq. 6), keeping ``alpha`` (0.8) of the previous one; the
refined text embedding is composed with ``v_ref``, so the answer and the
query it refines live in the same (text) space. It starts at the
modification text's embedding, so turn 0 is the shared composed query."""

import dataclasses

import jax.numpy as jnp
import numpy as np

from recovr_jax import config_pytree
from recovr_jax.core import slerp
from recovr_jax.methods import base
from recovr_jax.methods import ivr
from recovr_jax.protocol import plan


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class JaxForm(plan.JaxForm, plan.JaxAsker):
  """MERLIN in the jitted mode: the running text embedding moves towards
  each utterance's embedding (the driver's word table holds them); asks
  about the reference video's caption."""
  alpha: float = config_pytree.number(base.MERLIN_ALPHA)
  question: str = 'reference'
  t2v: bool = False
  covr: bool = True
  needs: tuple[str, ...] = ('utterances',)

  def init(self, start):
    return {'text': start.modification}, jnp.full_like(start.init_search, -1)

  def step(self, state, obs):
    text = slerp.slerp(state['text'], obs.info.utterance, self.alpha)
    return {'text': text}, ivr.single_list_plan(obs, text)

  def jax_question(self, state, shown_ids, shown_scores, asked, reference,
                   memory, active):
    """About the reference video's caption (IVR-QA's question)."""
    del state, shown_ids, shown_scores
    question = ivr.jax_caption_question(memory, reference, asked)
    return (jnp.where(active, question, -1).astype(jnp.int32),
            active.astype(jnp.int32))


class MERLIN(base.Method):

  name = 'merlin'
  asks_every_turn = True

  def __init__(self, settings: base.Settings = base.Settings()):
    super().__init__(settings)
    self.jax_form = JaxForm(alpha=settings.merlin_alpha)

  def init(self, ctx, start):
    s, _ = start.covr_query.shape
    text = np.asarray(ctx.encode_text(list(start.modification)), np.float32)
    state = {'text': text, 'reference': start.reference}
    return state, plan.covr_plan(start.covr_query,
                                     [plan.SIGMA['neu']] * s)

  def step(self, ctx, state, obs):
    text = state['text'].copy()
    answers = ctx.encode_text(list(obs.feedback))
    for j, i in enumerate(obs.sessions):
      text[i] = np.asarray(slerp.slerp(text[i], answers[j],
                                       self.settings.merlin_alpha))
    queries = plan.anchored(ctx.gallery, ctx.compose,
                                state['reference'][obs.sessions],
                                text[obs.sessions])
    return dict(state, text=text), plan.covr_plan(
        queries, ivr.action_sigma(obs.action))

  def question(self, ctx, state, shown):
    """About the anchor (the reference video); in a session that started
    from text, about the shown top result, as MERLIN asks in its own
    setting."""
    reference = state['reference'][shown.sessions]
    return ivr.caption_questions(
        ctx, np.where(reference >= 0, reference, shown.ids[:, 0]),
        shown.asked)
