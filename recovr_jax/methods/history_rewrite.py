"""Full-history rewriting (DESIGN section 5): one edit regenerated from the
whole dialogue each turn by the reasoning backend (``rewrite``), composed with
``v_ref``; the modification text stands in when the rewrite is empty."""

from recovr_jax.methods import base
from recovr_jax.methods import ivr
from recovr_jax.protocol import plan as plan_lib


class HistoryRewrite(ivr.IVR):
  """IVR's dialogue, rewritten into one edit; it asks nothing."""

  name = 'history_rewrite'
  asks_every_turn = False
  question = base.Method.question

  def step(self, ctx, state, obs):
    texts = list(state['texts'])
    for i, f in zip(obs.sessions, obs.feedback):
      texts[i] = texts[i] + [f]
    dialogue = [texts[i] for i in obs.sessions]
    rewritten = [edit or utterances[0] for edit, utterances in zip(
        ctx.reasoner.rewrite(dialogue), dialogue)]
    references = ctx.gallery[state['reference'][obs.sessions]]
    queries = ctx.compose(references, ctx.encode_text(rewritten))
    return dict(state, texts=texts), plan_lib.covr_plan(
        queries, ivr.action_sigma(obs.action))

