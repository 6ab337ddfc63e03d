"""The host driver: the protocol's Python loop (``protocol.host``)."""

from absl import logging
import numpy as np

from recovr_jax.drivers import driver
from recovr_jax.protocol import host


class OnHost(driver.Driver):
  """A batch a turn at a time on the host; a batch whose reasoning raises
  is run again session by session, and the sessions that raise are
  recorded with their error."""

  NAME = 'host'
  STEPWISE = True

  def run_batch(self, run, method, batch, loop, label, errors):
    env, user, ctx = run.env, run.user, run.ctx
    try:
      return host.run_batch(env, method, batch, user, ctx, loop)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('%s raised %r; retrying per session', label, e)
    shape = (len(batch), loop.num_turns + 1, loop.list_length)
    displayed = np.full(shape, -1, np.int32)
    top_scores = np.full(shape[:2], -np.inf, np.float32)
    scores = np.full(shape[:2] + (min(host.SHOWN, shape[2]),), -np.inf,
                     np.float32)
    records = []
    for i, sess in enumerate(batch):
      try:
        r = host.run_batch(env, method, np.array([sess]), user, ctx, loop)
        displayed[i], top_scores[i] = r.displayed[0], r.top_scores[0]
        scores[i] = r.scores[0]
        records.append(r.records[0])
      except Exception as e:  # pylint: disable=broad-except
        errors[str(i)] = f'{type(e).__name__}: {e}'
        records.append([])
    return host.BatchResult(displayed=displayed, top_scores=top_scores,
                            records=records, scores=scores)
