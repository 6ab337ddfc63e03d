"""IVR, adapted (DESIGN section 5): the modification text and every piece
of feedback so far joined with ``" [SEP] "``, re-encoded and composed with
``v_ref`` each turn; the CoVR list is shown as retrieved."""

from recovr_jax.methods import base
from recovr_jax.protocol import plan as plan_lib

SEPARATOR = ' [SEP] '
# The sigma a single-list method reports, from the user's action (paper
# appendix A.2); only a rank-cap transplant (``rank_cap_transplant``) uses it.
ACTION_SIGMA = {'rewrite': plan_lib.SIGMA['neg'],
                'modify': plan_lib.SIGMA['neu'],
                'answer': plan_lib.SIGMA['neu'],
                'stop': plan_lib.SIGMA['neu']}


def action_sigma(actions):
  return [ACTION_SIGMA[a] for a in actions]


class IVR(base.Method):
  """The dialogue so far as one query text, composed with ``v_ref``."""

  name = 'ivr'

  def init(self, ctx, start):
    del ctx
    s, _ = start.covr_query.shape
    state = {'reference': start.reference,
             'texts': [[m] for m in start.modification]}
    return state, plan_lib.covr_plan(start.covr_query,
                                     [plan_lib.SIGMA['neu']] * s)

  def step(self, ctx, state, obs):
    texts = list(state['texts'])
    for i, f in zip(obs.sessions, obs.feedback):
      texts[i] = texts[i] + [f]
    joined = [SEPARATOR.join(texts[i]) for i in obs.sessions]
    references = ctx.gallery[state['reference'][obs.sessions]]
    queries = ctx.compose(references, ctx.encode_text(joined))
    return dict(state, texts=texts), plan_lib.covr_plan(
        queries, action_sigma(obs.action))
