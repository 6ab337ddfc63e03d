"""MERLIN, adapted (DESIGN section 5): the running query moves towards each
answer's text embedding by spherical interpolation (its eq. 6), keeping
``alpha`` (0.8) of the previous query; it starts at turn 0's composed
query."""

import numpy as np

from recovr_jax.core import slerp
from recovr_jax.methods import base
from recovr_jax.methods import ivr
from recovr_jax.protocol import plan as plan_lib


class MERLIN(base.Method):

  name = 'merlin'

  def init(self, ctx, start):
    del ctx
    s, _ = start.covr_query.shape
    return {'query': start.covr_query.copy()}, plan_lib.covr_plan(
        start.covr_query, [plan_lib.SIGMA['neu']] * s)

  def step(self, ctx, state, obs):
    query = state['query'].copy()
    answers = ctx.encode_text(list(obs.feedback))
    for j, i in enumerate(obs.sessions):
      query[i] = np.asarray(slerp.slerp(query[i], answers[j],
                                        self.settings.merlin_alpha))
    return {'query': query}, plan_lib.covr_plan(query[obs.sessions],
                                                ivr.action_sigma(obs.action))
