"""A user for real data: it compares captions instead of attributes."""

import numpy as np

from recovr_jax.protocol.plan import Feedback


class CaptionUser:
  """A user for real data: compares the target's caption with the caption
  of the shown video. Without a phrasing model it rewrites: it asks for the
  target's caption with words dropped at ``drop_rate``; a ``phrase`` callable
  (for example a reasoning LM) may word the feedback instead."""

  def __init__(self, drop_rate: float = 0.0, seed: int = 0, phrase=None):
    if not 0.0 <= drop_rate < 1.0:
      raise ValueError(f'drop_rate must be in [0, 1), got {drop_rate}')
    self.drop_rate = drop_rate
    self.seed = seed
    self.phrase = phrase

  def respond(self, session: int, turn: int, target_id, shown_id,
              target_caption: str, shown_caption: str) -> Feedback:
    if target_id == shown_id:
      return Feedback('stop', '', {})
    if self.phrase is not None:
      return Feedback('rewrite', str(self.phrase(target_caption,
                                                 shown_caption)), {})
    rng = np.random.default_rng([self.seed, session, turn])
    words = [w for w in target_caption.split()
             if rng.random() >= self.drop_rate]
    return Feedback('rewrite', 'Not this one. I want ' + ' '.join(words), {})
