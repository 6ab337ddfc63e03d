"""Deterministic reasoning backends (the offline default and the fallback of
every model backend).

* ``RulesReasoner(lexicon)``: reads attribute mentions with a lexicon (the
  world's, ``world.lexicon``, injected: this module knows no vocabulary) and
  writes canonical descriptions, edits and constraints.
* ``FreeTextReasoner``: for real data, where no lexicon applies: the user's
  words pass through unchanged (search = running query + feedback, edit =
  feedback), so no real text is rewritten into another vocabulary.

A lexicon is any object with ``A`` (attribute names), ``QUESTIONS``
(attribute name -> questions), ``parse(text) -> {attribute: value}``,
``canonical_description(attrs)``, ``canonical_edit(changes)``,
``constraint(attribute, value)`` and ``parse_constraint(text)``.
"""

import collections
import math

from recovr_jax.reasoning import schemas


class _Backend:
  """``call(module, requests)`` over the per-module methods."""

  def call(self, module: str, requests) -> schemas.Outputs:
    if module not in schemas.MODULES:
      raise ValueError(f'unknown reasoning module {module!r}; valid: '
                       f'{", ".join(schemas.MODULES)}')
    return schemas.Outputs(getattr(self, module)(requests))

  def validity(self) -> dict:
    """A deterministic backend's outputs are always valid: no counts."""
    return {}


def _constraints(lexicon, items) -> dict[int, int]:
  out = {}
  for item in items:
    parsed = lexicon.parse_constraint(item)
    if parsed is not None:
      out[parsed[0]] = parsed[1]
  return out


class RulesReasoner(_Backend):
  """Deterministic reasoning over a lexicon's attribute mentions."""

  name = 'rules'

  def __init__(self, lexicon):
    self.lexicon = lexicon

  def intent(self, requests) -> list[dict]:
    out = []
    for r in requests:
      mentions = self.lexicon.parse(r.feedback)
      shown = self.lexicon.parse(r.shown_caption)
      # The running query, then the accumulated constraints, then what the
      # user just said: later sources win.
      wanted = self.lexicon.parse(r.memory.search)
      wanted.update(_constraints(self.lexicon, r.memory.keep))
      wanted.update(mentions)
      search = self.lexicon.canonical_description(wanted) if wanted else (
          r.memory.search)
      changes = {a: v for a, v in mentions.items() if shown.get(a) != v}
      out.append({'search': search,
                  'edit': self.lexicon.canonical_edit(changes)})
    return out

  def reflect(self, requests) -> list[dict]:
    out = []
    for r in requests:
      mentions = self.lexicon.parse(r.feedback)
      shown = self.lexicon.parse(r.shown_caption)
      changes = {a: v for a, v in mentions.items() if shown.get(a) != v}
      text = ' ' + r.feedback.lower() + ' '
      negative = any(m in text for m in schemas.NEGATIVE_MARKERS)
      if not mentions or negative or len(changes) >= 3:
        sigma = 'neg'
      elif len(changes) <= 1:
        sigma = 'pos'
      else:
        sigma = 'neu'
      keep = _constraints(self.lexicon, r.memory.keep)
      keep.update(mentions)
      avoid = _constraints(self.lexicon, r.memory.avoid)
      avoid_items = [self.lexicon.constraint(a, v) for a, v in avoid.items()
                     if keep.get(a) != v]
      for a in changes:
        if a in shown:
          item = self.lexicon.constraint(a, shown[a])
          if item not in avoid_items:
            avoid_items.append(item)
      out.append({'sigma': sigma,
                  'keep': [self.lexicon.constraint(a, v)
                           for a, v in sorted(keep.items())],
                  'avoid': avoid_items})
    return out

  def question(self, requests) -> list[dict]:
    """Asks about the attribute most uncertain among the top candidates
    (highest entropy of its values), skipping attributes already kept."""
    out = []
    for r in requests:
      fixed = _constraints(self.lexicon, r.memory.keep)
      counts = collections.defaultdict(collections.Counter)
      for caption in r.candidate_captions:
        for a, v in self.lexicon.parse(caption).items():
          counts[a][v] += 1
      best, best_h = None, -1.0
      for a in range(len(self.lexicon.A)):
        if a in fixed:
          continue
        total = sum(counts[a].values())
        h = 0.0 if not total else -sum(
            c / total * math.log(c / total) for c in counts[a].values())
        if h > best_h:
          best, best_h = a, h
      if best is None:
        best = 0
      name = self.lexicon.A[best]
      out.append({'question': self.lexicon.QUESTIONS[name][0]})
    return out

  def t2v_init(self, requests) -> list[dict]:
    out = []
    for r in requests:
      wanted = self.lexicon.parse(r.reference_caption)
      wanted.update(self.lexicon.parse(r.modification))
      out.append({'search': self.lexicon.canonical_description(wanted)
                  if wanted else (r.reference_caption + ' ' +
                                  r.modification).strip()})
    return out

  def rewrite(self, dialogue) -> list[str]:
    """Full-history rewriting: one edit from every utterance of each
    session's dialogue (later mentions win); '' when none names anything."""
    out = []
    for utterances in dialogue:
      mentions = {}
      for utterance in utterances:
        mentions.update(self.lexicon.parse(utterance))
      out.append(self.lexicon.canonical_edit(mentions))
    return out


class FreeTextReasoner(_Backend):
  """Deterministic reasoning that keeps the user's words (real data).

  Intent: ``search`` is the running query followed by the feedback, ``edit``
  the feedback. Reflection: ``neg`` on a rejection marker, else ``neu``; no
  constraints (it cannot tell attributes apart). Question: a fixed open
  question. T2V initializer: the reference caption followed by the
  modification text.
  """

  name = 'rules'
  QUESTION = 'What should be different in the video you are looking for?'

  def intent(self, requests) -> list[dict]:
    out = []
    for r in requests:
      feedback = r.feedback.strip()
      search = ' '.join(t for t in (r.memory.search, feedback) if t)
      out.append({'search': search, 'edit': feedback})
    return out

  def reflect(self, requests) -> list[dict]:
    out = []
    for r in requests:
      text = ' ' + r.feedback.lower() + ' '
      negative = any(m in text for m in schemas.NEGATIVE_MARKERS)
      out.append({'sigma': 'neg' if negative else 'neu', 'keep': [],
                  'avoid': []})
    return out

  def question(self, requests) -> list[dict]:
    return [{'question': self.QUESTION} for _ in requests]

  def t2v_init(self, requests) -> list[dict]:
    return [{'search': (r.reference_caption + ' ' + r.modification).strip()}
            for r in requests]

  def rewrite(self, dialogue) -> list[str]:
    return [' '.join(u.strip() for u in utterances if u.strip())
            for utterances in dialogue]
