"""UMIVR, adapted (DESIGN section 5): asks every turn about the attribute
most uncertain among the top candidates' captions (the reasoner's Question
Asker over ``Settings.question_candidates`` results); the answer extends the
IVR query text."""

from recovr_jax.methods import ivr


class UMIVR(ivr.IVR):

  name = 'umivr'
  asks_every_turn = True
