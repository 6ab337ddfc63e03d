"""Two reasoning backends behind one interface, chosen per feedback.

``RoutedReasoner(base, other, route)`` answers the Intent Decomposer and the
State Reflector with ``other`` for the feedback ``route`` picks and with
``base`` for the rest, in one batch per backend and the requests' order;
every other module (the Question Asker, the first query, matching
constraints to captions, rewriting) is ``base``'s. On the world,
``grounded_smollm2`` routes to the fine-tuned SmolLM2 only the feedback
holding words that neither the lexicon, the training phrasings nor the
user's frames read (``world.reading.unread_words``): the grounding reader
keeps its precision on the phrases it knows, the model reads the rest.
"""

import collections
from collections.abc import Callable

from recovr_jax.reasoning import schemas

ROUTED_MODULES = ('intent', 'reflect')


class RoutedReasoner:
  """``base`` everywhere but the Intent Decomposer's and the State
  Reflector's requests whose feedback ``route`` picks, which ``other``
  reads."""

  def __init__(self, base, other, route: Callable[[str], bool], name: str):
    self.base, self.other, self.route, self.name = base, other, route, name
    self.routed = collections.Counter()  # module -> requests sent to other

  def call(self, module: str, requests) -> schemas.Outputs:
    requests = list(requests)
    if module not in ROUTED_MODULES:
      return self.base.call(module, requests)
    picks = [bool(self.route(r.feedback)) for r in requests]
    objects, first_pass = [None] * len(requests), [True] * len(requests)
    for backend, picked in ((self.base, False), (self.other, True)):
      where = [i for i, p in enumerate(picks) if p == picked]
      if not where:
        continue
      out = backend.call(module, [requests[i] for i in where])
      for j, i in enumerate(where):
        objects[i] = out.objects[j]
        if out.first_pass is not None:
          first_pass[i] = out.first_pass[j]
    self.routed[module] += sum(picks)
    self.routed[f'{module}_requests'] += len(requests)
    return schemas.Outputs(objects, first_pass)

  def intent(self, requests):
    return self.call('intent', requests).objects

  def reflect(self, requests):
    return self.call('reflect', requests).objects

  def validity(self) -> dict:
    """The routed backend's counts (the base is deterministic)."""
    return self.other.validity()

  def speed(self) -> dict:
    """The routed backend's counters (time, tokens) and how many requests
    of each routed module it read (``routed_<module>``) of how many
    (``routed_<module>_requests``)."""
    speed = getattr(self.other, 'speed', None)
    out = dict(speed()) if speed is not None else {}
    out.update({f'routed_{k}': float(v) for k, v in self.routed.items()})
    return out

  def __getattr__(self, name):
    # Every other module and attribute (question, caption_values, reader,
    # fit, frames, sigma_rule, ...) is the base backend's.
    if name in ('base', 'other', 'route', 'name', 'routed'):
      raise AttributeError(name)
    return getattr(self.base, name)
