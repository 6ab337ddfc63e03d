"""Full-history rewriting (docs/definitions.md §5): one edit regenerated from
the whole dialogue each turn by the reasoning backend (``rewrite``), composed
with ``v_ref``; the modification text stands in when the rewrite is empty."""

import dataclasses

import jax.numpy as jnp

from recovr_jax.methods import base
from recovr_jax.methods import ivr
from recovr_jax.protocol import plan


@dataclasses.dataclass(frozen=True)
class JaxForm(plan.JaxForm):
  """Full-history rewriting with the rules reasoner over attribute vectors.

  State: ``mentions [A]`` int32, every value the dialogue has named so far
  (later mentions win), starting from the modification text's: the rules
  ``rewrite`` of the whole dialogue is its canonical edit. The edit is
  composed with ``v_ref``; sigma comes from the action (``ivr.ACTION_SIGMA``).
  """
  t2v: bool = False
  covr: bool = True

  def init(self, start):
    return ({'mentions': start.modification_attrs},
            jnp.full_like(start.init_search, -1))

  def step(self, state, obs):
    named = obs.info.mentions
    mentions = jnp.where(named >= 0, named, state['mentions'])
    sigma = ivr.jax_action_sigma(obs.action)
    turn_plan = plan.JaxPlan(
        search=jnp.full_like(mentions, -1), edit=mentions, use_search=False,
        use_edit=True, sigma=sigma, anchor=obs.reference,
        avoid=jnp.zeros((mentions.shape[0], obs.num_values), bool))
    return {'mentions': mentions}, turn_plan


class HistoryRewrite(ivr.IVR):
  """IVR's dialogue, rewritten into one edit; it asks nothing."""

  name = 'history_rewrite'
  asks_every_turn = False
  joins_dialogue = False  # the dialogue is rewritten, not encoded
  question = base.Method.question

  def __init__(self, settings: base.Settings = base.Settings()):
    super().__init__(settings)
    self.jax_form = JaxForm()

  def step(self, ctx, state, obs):
    texts = list(state['texts'])
    for i, f in zip(obs.sessions, obs.feedback):
      texts[i] = texts[i] + [f]
    dialogue = [texts[i] for i in obs.sessions]
    rewritten = [edit or utterances[0] for edit, utterances in zip(
        ctx.reasoner.rewrite(dialogue), dialogue)]
    queries = plan.anchored(ctx.gallery, ctx.compose,
                                state['reference'][obs.sessions],
                                ctx.encode_text(rewritten))
    turn_plan = plan.covr_plan(queries, ivr.action_sigma(obs.action))
    return dict(state, texts=texts), dataclasses.replace(
        turn_plan, records=tuple({'edit': e} for e in rewritten))

