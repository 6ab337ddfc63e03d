"""A model for the words the grounding reader does not know.

``RoutedReasoner(base, other, route, read_reply, lexical)`` is ``base`` (a
``rules.RulesReasoner`` over a reader, e.g. ``grounded``) in every module
but two (the Intent Decomposer and the State Reflector), for the feedback
``route`` picks:

* both read the feedback as ``base``'s rules over a reading in which the
  model's values (``read_reply(reply, request)``: the values its Intent
  Decomposer's reply says the feedback names) stand for the attributes
  that ``lexical(feedback)`` (the lexicon and its exact phrases, precise by
  construction) does not read, each accepted only where it changes the
  shown video's value (a model that cannot read a word writes the shown
  video's value of its attribute: that is refused, and the attribute is
  abstained on, ``rules_core.ABSTAIN``, unless ``base``'s reader read it);
  ``base``'s reader reads the rest. The search, the edit and the memory
  are thus written by the rules (one value per attribute, keep and avoid
  disjoint), the sigma is ``base``'s own (on the world, the frame
  classifier), and a turn costs one model call.

On the world, ``grounded_smollm2`` picks the feedback holding words that
neither the lexicon, the training phrasings nor the user's frames read
(``envs.world.models.reader_fit.unread_words``) and reads it with the fine-tuned SmolLM2.
This module knows no vocabulary: the route, the reply's reading and the
lexical reading are injected.
"""

import collections
from collections.abc import Callable
import dataclasses

from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import rules_core
from recovr_jax.reasoning import schemas

ROUTED_MODULES = ('intent', 'reflect')


class RoutedReasoner:
  """``base`` everywhere but the picked feedback's Intent Decomposer and
  State Reflector (``base``'s rules over ``other``'s reading where the
  lexicon reads nothing, copies of the shown video refused)."""

  def __init__(self, base, other, route: Callable[[str], bool],
               read_reply: Callable[[dict, schemas.IntentRequest], dict],
               lexical: Callable[[str], dict], name: str):
    self.base, self.other, self.route, self.name = base, other, route, name
    self.read_reply, self.lexical = read_reply, lexical
    self.routed = collections.Counter()  # module -> requests read by other
    self._replies = {}  # the last turn's model replies, by request

  @staticmethod
  def _key(r):
    return (r.feedback, r.shown_caption, r.memory)

  def _model_replies(self, requests) -> list[tuple[dict, dict, bool]]:
    """``other``'s Intent Decomposer reply to each request, the values it
    says the feedback names, and its first-pass validity; one model call
    per request not read yet this turn (the Reflector's request of a turn
    reuses the Intent Decomposer's)."""
    missing = list(dict.fromkeys(self._key(r) for r in requests
                                 if self._key(r) not in self._replies))
    if missing:
      asked = [schemas.IntentRequest(f, c, m) for f, c, m in missing]
      out = self.other.call('intent', asked)
      for j, (key, request) in enumerate(zip(missing, asked)):
        valid = True if out.first_pass is None else bool(out.first_pass[j])
        self._replies[key] = (out.objects[j],
                              dict(self.read_reply(out.objects[j], request)),
                              valid)
    return [self._replies[self._key(r)] for r in requests]

  def call(self, module: str, requests) -> schemas.Outputs:
    requests = list(requests)
    if module not in ROUTED_MODULES:
      return self.base.call(module, requests)
    if module == 'intent':
      self._replies = {}  # a new turn
    where = [i for i, r in enumerate(requests) if self.route(r.feedback)]
    replies = dict(zip(where, self._model_replies(
        [requests[i] for i in where]))) if where else {}
    self.routed[module] += len(where)
    self.routed[f'{module}_requests'] += len(requests)
    mentions = [None] * len(requests)
    for i, (_, model, _) in replies.items():
      mentions[i] = self.mentions(requests[i], model)
    if module == 'intent':
      objects = self.base.intent(requests, mentions=mentions)
      return schemas.Outputs(objects, [replies[i][2] if i in replies
                                       else True
                                       for i in range(len(requests))])
    return schemas.Outputs(self.base.reflect(requests, mentions=mentions))

  def mentions(self, request, model: dict) -> dict:
    """What the feedback names, as the routed reader reads it: ``base``'s
    reading (its abstentions included), with the model's value for each
    attribute the lexicon does not read, accepted only where it changes
    the shown video's value; a model value equal to the shown one (what a
    model that could not read the words copies) is not accepted, and the
    attribute is abstained on unless ``base`` read it."""
    feedback = request.feedback
    known = self.lexical(feedback)
    shown = self.base.lexicon.parse(request.shown_caption)
    named = self.base.feedback_values(feedback)
    for a, v in model.items():
      if a in known:
        continue
      if shown.get(a) == v:
        named.setdefault(a, rules_core.ABSTAIN)
        self.routed['copies_refused'] += 1
      else:
        named[a] = v
    return named

  def intent(self, requests):
    return self.call('intent', requests).objects

  def reflect(self, requests):
    return self.call('reflect', requests).objects

  def validity(self) -> dict:
    """The model's counts (the base is deterministic)."""
    return self.other.validity()

  def speed(self) -> dict:
    """The model's counters (time, tokens) and how many requests of each
    routed module it read (``routed_<module>``) of how many
    (``routed_<module>_requests``)."""
    speed = getattr(self.other, 'speed', None)
    out = dict(speed()) if speed is not None else {}
    out.update({f'routed_{k}': float(v) for k, v in self.routed.items()})
    return out

  def __getattr__(self, name):
    # Every other module and attribute (question, caption_values, reader,
    # fit, frames, sigma_rule, ...) is the base backend's.
    if name in ('base', 'other', 'route', 'name', 'routed', 'read_reply',
                'lexical', '_replies'):
      raise AttributeError(name)
    return getattr(self.base, name)


@dataclasses.dataclass(frozen=True)
class RoutedConfig(chat_lm.AdaptedChatConfig):
  """``grounded_smollm2``'s settings: ``smollm2_world``'s, and the
  grounded reader's option overrides (no flag)."""
  NAME = 'routed'
  options: dict | None = None


class _GroundedSmollm2(registry.Backend):
  """``grounded_smollm2``: ``grounded``, with ``smollm2_world`` for the
  feedback the source's grounding routes to it
  (``Vocabulary.grounding.route``)."""
  NAME = 'grounded_smollm2'
  CONFIG = RoutedConfig

  def offered(self, vocab):
    return vocab.grounding is not None

  def problems(self, config, vocab):
    return (registry.get('grounded').problems(config, vocab) or
            registry.get('smollm2_world').problems(config, vocab))

  def inputs(self, config, vocab):
    return registry.get('smollm2_world').inputs(config, vocab)

  def make(self, config, vocab, encode_text=None, **kwargs):
    grounded = registry.get('grounded').make(config, vocab, encode_text)
    model = registry.get('smollm2_world').make(config, vocab, **kwargs)
    return RoutedReasoner(
        grounded, model, vocab.grounding.route(grounded),
        read_reply=vocab.grounding.model_reading,
        lexical=grounded.reader.lexical, name=self.NAME)


GROUNDED_SMOLLM2 = _GroundedSmollm2()
