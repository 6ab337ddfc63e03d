"""The rank-cap transplant (paper appendix A.2): rank-cap applied to any
single-list method's list, with sigma from the user's action (Rewrite neg,
Modify and Answer neu), which single-list methods report in their plans."""

import dataclasses

from recovr_jax.methods import base


class RankCapped(base.Method):
  """``inner`` with rank-cap on its single list."""

  def __init__(self, inner: base.Method, name: str):
    if inner.fusion is not None:
      raise ValueError(f'rank-cap transplant needs a single-list method; '
                       f'{inner.name!r} fuses with {inner.fusion!r}')
    super().__init__(inner.settings)
    self.inner = inner
    self.name = name
    self.asks_every_turn = inner.asks_every_turn
    self.joins_dialogue = inner.joins_dialogue
    self.jax_form = inner.jax_form  # rank-cap is the ranking core's

  def ranking(self, base_config):
    return dataclasses.replace(self.inner.ranking(base_config), rank_cap=True)

  def init(self, ctx, start):
    return self.inner.init(ctx, start)

  def step(self, ctx, state, obs):
    return self.inner.step(ctx, state, obs)

  def memory(self, state, row):
    return self.inner.memory(state, row)

  def question(self, ctx, state, shown):
    return self.inner.question(ctx, state, shown)
