"""Deterministic reasoning backends (the offline default and the fallback of
every model backend).

* ``RulesReasoner(lexicon)``: reads attribute mentions with a lexicon (the
  world's, ``envs.world.benchmark.lexicon``, injected: this module knows no vocabulary) and
  writes canonical descriptions, edits and constraints.
* ``FreeTextReasoner``: for real data, where no lexicon applies: the user's
  words pass through unchanged (search = running query + feedback, edit =
  feedback), so no real text is rewritten into another vocabulary.

A lexicon is any object with ``A`` (attribute names), ``QUESTIONS``
(attribute name -> questions), ``parse(text) -> {attribute: value}``,
``canonical_description(attrs)``, ``canonical_edit(changes)``,
``constraint(attribute, value)``, ``parse_constraint(text)`` and
``question_attribute(question)``.

``RulesReasoner(lexicon, reader=...)`` reads the user's words (feedback,
dialogues) with another reader (any object with ``parse``; e.g.
``reasoning.grounding.GroundingReader``) while captions and modification
texts, which are in the lexicon's words, are still read by the lexicon.
``sigma='paper'``: the Reflector labels a turn as docs/definitions.md §10 maps
the user's decisions (an edit of the shown video ``pos``, an answer to the
question shown ``neu``, a rejection or fresh description ``neg``) instead of
the rules' own rule (``pos`` only for a one-value edit), telling them apart
by rule (relative feedback; an answer names exactly the attribute asked);
``sigma='frames'``: the same mapping of the decision a
``frames.FrameClassifier`` reads off the words around the values.
"""


import numpy as np

from recovr_jax.reasoning import frames
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import rules_core
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


def has_negative_marker(feedback: str) -> bool:
  """Whether ``feedback`` rejects the shown video (a marker of
  ``schemas.NEGATIVE_MARKERS``, as a whole phrase)."""
  text = ' ' + feedback.lower() + ' '
  return any(m in text for m in schemas.NEGATIVE_MARKERS)


def _constraint_pairs(lexicon, items) -> list[tuple[int, int]]:
  """The readable ``(attribute, value)`` pairs of ``items``, in order."""
  out = []
  for item in items:
    parsed = lexicon.parse_constraint(item)
    if parsed is not None and parsed not in out:
      out.append(parsed)
  return out


def _constraints(lexicon, items) -> dict[int, int]:
  """``{attribute: value}`` of ``items`` (a later item wins)."""
  return dict(_constraint_pairs(lexicon, items))


class RulesReasoner(_Backend):
  """Deterministic reasoning over a lexicon's attribute mentions.

  Both pathways read the same snapshot: the latest feedback, the shown
  video's caption (Progress Memory) and the constraints in short-term
  Progress Memory. Feedback is *relative* (an edit of the shown video) when
  it names something, carries no rejection marker and changes at most two
  of the shown video's values; otherwise it rejects the shown video (the
  Reflector's sigma is ``neg`` exactly then).
  """

  name = 'rules'
  SIGMA_RULES = rules_core.SIGMA_RULES

  def __init__(self, lexicon, reader=None, sigma: str = 'rules',
               name: str | None = None, frame_classifier=None):
    if sigma not in self.SIGMA_RULES:
      raise ValueError(f'sigma must be one of {self.SIGMA_RULES}, got '
                       f'{sigma!r}')
    if (sigma == 'frames') != (frame_classifier is not None):
      raise ValueError("sigma='frames' needs a frames classifier (and only "
                       'it does)')
    if frame_classifier is not None and not hasattr(reader, 'frame'):
      raise ValueError("sigma='frames' needs a reader with frame(text)")
    self.lexicon = lexicon
    self.reader = reader if reader is not None else lexicon
    self.sigma_rule = sigma
    self.frames = frame_classifier
    if name is not None:
      self.name = name
    self._parsed = {}

  def _abstained(self, text: str) -> frozenset:
    """The attributes ``text`` names in words this reasoner's reader could
    not read (its ``abstained``; a lexicon abstains on nothing)."""
    abstained = getattr(self.reader, 'abstained', None)
    return frozenset() if abstained is None else abstained(text)

  def feedback_values(self, text: str) -> dict[int, int]:
    """``{attribute: value}`` the user's ``text`` names as this reasoner
    reads it, ``rules_core.ABSTAIN`` for the attributes it abstains on:
    the jitted driver's word table holds this."""
    values = dict(self.reader.parse(text))
    for a in self._abstained(text):
      values.setdefault(a, rules_core.ABSTAIN)
    return values

  def _row(self, values: dict[int, int]) -> np.ndarray:
    """``[A]`` int of ``{attribute: value}`` (-1: none)."""
    row = np.full(len(self.lexicon.A), -1, np.int64)
    for a, v in values.items():
      row[a] = v
    return row

  def _read(self, r, mentions=None):
    """``(mentions, shown, their rows, changes [A], num_changes, relative)``
    of one request (``rules_core.read``); ``mentions``: the values the
    feedback names when another reader read them (default: this reasoner's
    reader)."""
    abstained = ()
    if mentions is None:
      mentions = self.reader.parse(r.feedback)
      abstained = self._abstained(r.feedback)
    shown = self.lexicon.parse(r.shown_caption)
    m, s = self._row(mentions), self._row(shown)
    for a in abstained:
      m[a] = rules_core.ABSTAIN
    named, changes, num_changes, relative = rules_core.read(
        m, s, has_negative_marker(r.feedback))
    del named
    return mentions, m, s, changes, int(num_changes), bool(relative)

  def intent(self, requests, mentions=None) -> list[dict]:
    """``search``: ``rules_core.wanted`` (the shown video's caption values
    when the feedback is relative, minus avoided values, then the kept
    constraints, then what the feedback names); ``edit``: the named values
    that differ from the shown video. Earlier feedback reaches it only
    through the Reflector's constraints. ``mentions``: per request, the
    values its feedback names as another reader read them, or ``None``
    (this reasoner's reader)."""
    out = []
    for r, named in zip(requests, mentions or [None] * len(requests)):
      _, m, s, changes, _, relative = self._read(r, named)
      avoid = set(_constraint_pairs(self.lexicon, r.memory.avoid))
      shown_avoided = np.array([(a, int(v)) in avoid for a, v in enumerate(s)])
      wanted = rules_core.wanted(
          m, s, self._row(_constraints(self.lexicon, r.memory.keep)),
          shown_avoided, relative)
      wanted = {a: int(v) for a, v in enumerate(wanted) if v >= 0}
      out.append({'search': self.lexicon.canonical_description(wanted)
                            if wanted else '',
                  'edit': self.lexicon.canonical_edit(
                      {a: int(v) for a, v in enumerate(changes) if v >= 0})})
    return out

  def reflect(self, requests, mentions=None) -> list[dict]:
    """sigma: ``rules_core.sigma`` of the reasoner's rule. ``keep``: earlier
    kept values updated by what the feedback names; ``avoid``: earlier
    avoided values not kept since, plus the shown video's values the
    feedback changes (``rules_core.reflect``), in the order they came.
    ``mentions``: as ``intent``'s (the frame classifier still reads the
    words)."""
    out = []
    for r, named in zip(requests, mentions or [None] * len(requests)):
      mentions_, m, s, changes, num_changes, relative = self._read(r, named)
      if self.sigma_rule == 'frames':
        label = self.frame_label(r.feedback)
        if label == 'answer' and not getattr(r, 'question', None):
          label = 'modify'  # no question shown: nothing to answer
        sigma = rules_core.sigma('frames', relative, num_changes,
                                 label=frames.LABELS.index(label))
      else:
        sigma = rules_core.sigma(self.sigma_rule, relative, num_changes,
                                 answers=self._answers(r, m))
      keep, rejected = rules_core.reflect(
          m, s, changes, self._row(_constraints(self.lexicon,
                                                r.memory.keep)))
      avoid = [(a, v) for a, v in _constraint_pairs(self.lexicon,
                                                     r.memory.avoid)
               if keep[a] != v]
      for a in mentions_:  # in the order the feedback names them
        if rejected[a] >= 0 and (a, int(rejected[a])) not in avoid:
          avoid.append((a, int(rejected[a])))
      out.append({'sigma': rules_core.SIGMA_NAMES[int(sigma)],
                  'keep': [self.lexicon.constraint(a, int(v))
                           for a, v in enumerate(keep) if v >= 0],
                  'avoid': [self.lexicon.constraint(a, v) for a, v in avoid]})
    return out

  def frame_label(self, feedback: str) -> str:
    """The frame classifier's reading of the user's decision
    (``frames.LABELS``), from the words alone."""
    values, frame = self.reader.frame(feedback)
    return self.frames.label(frame, len(values))

  def _answers(self, r, mentions) -> bool:
    """Whether the feedback answers the question shown
    (``rules_core.answers``: it names exactly the attribute asked)."""
    question = getattr(r, 'question', None)
    asked = self.lexicon.question_attribute(question) if question else None
    return bool(rules_core.answers(mentions >= 0,
                                   -1 if asked is None else asked))

  def caption_values(self, captions) -> np.ndarray:
    """``[N, A]`` int32 attribute values each caption states (-1: none);
    parsed once per captions tuple (long-term Progress Memory)."""
    key = id(captions)
    if key not in self._parsed or self._parsed[key][0] is not captions:
      values = np.full((len(captions), len(self.lexicon.A)), -1, np.int32)
      for i, caption in enumerate(captions):
        for a, v in self.lexicon.parse(caption).items():
          values[i, a] = v
      self._parsed[key] = (captions, values)
    return self._parsed[key][1]

  def attribute_question(self, attribute: int, value: int | None = None
                         ) -> str:
    """The question about ``attribute``; with ``value``, it also says what
    the video it is about shows (IVR-QA's heuristic questions)."""
    question = self.lexicon.QUESTIONS[self.lexicon.A[attribute]][0]
    if value is None:
      return question
    return (f'{question} Currently: '
            f'{self.lexicon.canonical_description({attribute: value})}.')

  def constraint_hits(self, constraints, captions) -> np.ndarray:
    """``[N]`` int32: how many of ``constraints`` (``'attribute: value'``)
    each caption states; unreadable constraints match nothing."""
    values = self.caption_values(captions)
    hits = np.zeros(len(captions), np.int32)
    for a, v in _constraint_pairs(self.lexicon, constraints):
      hits += values[:, a] == v
    return hits

  def question(self, requests) -> list[dict]:
    """Asks about the attribute most uncertain among the top candidates
    (highest entropy of its values), skipping attributes already kept."""
    out = []
    for r in requests:
      fixed = self._row(_constraints(self.lexicon, r.memory.keep)) >= 0
      values = np.array([self._row(self.lexicon.parse(c))
                         for c in r.candidate_captions], np.int64).reshape(
                             -1, len(self.lexicon.A))
      best = rules_core.most_uncertain(
          values, fixed, int(values.max(initial=0)) + 1)
      name = self.lexicon.A[int(best)]
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
    session's dialogue (the modification text first, then the user's
    feedback; later mentions win); '' when none names anything."""
    out = []
    for utterances in dialogue:
      mentions = {}
      for k, utterance in enumerate(utterances):
        # The first is the modification text (the dataset's, in the
        # lexicon's words); the rest are the user's.
        reader = self.lexicon if k == 0 else self.reader
        mentions.update(reader.parse(utterance))
      out.append(self.lexicon.canonical_edit(mentions))
    return out


class FreeTextReasoner(_Backend):
  """Deterministic reasoning that keeps the user's words (real data).

  Intent: ``search`` is the kept feedback followed by the latest feedback,
  ``edit`` the latest feedback. Reflection: ``neg`` on a rejection marker,
  else ``neu``; it keeps each feedback without a rejection marker as a
  free-text constraint (it cannot tell attributes apart, so nothing is
  avoided). Question: a fixed open question. T2V initializer: the reference
  caption followed by the modification text.
  """

  name = 'rules'
  QUESTION = 'What should be different in the video you are looking for?'

  @staticmethod
  def _negative(feedback):
    text = ' ' + feedback.lower() + ' '
    return any(m in text for m in schemas.NEGATIVE_MARKERS)

  def intent(self, requests) -> list[dict]:
    out = []
    for r in requests:
      feedback = r.feedback.strip()
      search = ' '.join(t for t in (*r.memory.keep, feedback) if t)
      out.append({'search': search, 'edit': feedback})
    return out

  def reflect(self, requests) -> list[dict]:
    out = []
    for r in requests:
      feedback = r.feedback.strip()
      negative = self._negative(feedback)
      keep = list(r.memory.keep)
      if feedback and not negative and feedback not in keep:
        keep.append(feedback)
      out.append({'sigma': 'neg' if negative else 'neu', 'keep': keep,
                  'avoid': []})
    return out

  def constraint_hits(self, constraints, captions) -> np.ndarray:
    """Free-text constraints match no caption (no attributes to compare)."""
    del constraints
    return np.zeros(len(captions), np.int32)

  def caption_values(self, captions) -> np.ndarray:
    """No attributes on free text: ``[N, 0]``."""
    return np.zeros((len(captions), 0), np.int32)

  def question(self, requests) -> list[dict]:
    return [{'question': self.QUESTION} for _ in requests]

  def t2v_init(self, requests) -> list[dict]:
    return [{'search': (r.reference_caption + ' ' + r.modification).strip()}
            for r in requests]

  def rewrite(self, dialogue) -> list[str]:
    return [' '.join(u.strip() for u in utterances if u.strip())
            for utterances in dialogue]


class _Rules(registry.Backend):
  """``rules``: the source's lexicon-only reasoner (on real data the user's
  words pass through, ``FreeTextReasoner``)."""
  NAME = 'rules'
  JITTED = True
  LEXICAL = True

  def make(self, config, vocab, encode_text=None, **kwargs):
    del config, encode_text, kwargs
    return vocab.rules()


BACKEND = _Rules()
