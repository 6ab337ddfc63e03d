"""A zero-shot grounding reader: the lexicon first, a sentence encoder for
the words it cannot read.

The rules reasoner reads the user with a lexicon (a closed phrase table and a
spelling fixer); a user who says "cobalt" or "at twilight" names values the
lexicon does not know. ``GroundingReader.parse`` keeps every phrase the
lexicon reads and grounds the rest: each run of unread words that are not
function words yields candidate spans (1 to ``max_span`` words), each span
is embedded (the shipped MiniLM, ``encode``) and scored against prototype
phrases of every attribute value (cosine similarity, the best prototype per
value); spans are taken greedily from the best score down while the score
reaches ``threshold``, one value per attribute, spans never overlapping,
none of an attribute the lexicon read (it is precise by construction; among
its own readings the later in the text wins).

The threshold is chosen on training utterances only (``fit_threshold``),
scoring each span with the prototypes of its own phrase left out, so the
threshold is the one a phrase never seen would need.

**Abstention.** An unread span whose best value scores below the threshold
but at least ``abstain`` is a value the reader could not read of an
attribute it can place: ``abstained(text)`` names those attributes (none
that a value was read for). The rules reasoner then leaves each unnamed in
its search (``rules_core.ABSTAIN``) instead of keeping the shown video's
or a kept value there. ``fit_abstain`` chooses ``abstain`` on the same kind
of training utterances: abstentions on attributes the utterance names
minus abstentions on attributes it does not (None: abstaining never pays). This module knows no
vocabulary: the lexicon (``parse_spans``, ``is_function_word``,
``constraint``...) and the prototypes are injected.
"""

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from recovr_jax.reasoning import registry

# The score of a span a lexical resource relates to a value (above every
# similarity, so always read).
RELATED = 2.0
# The score of a span ``confirm`` reads (below every lexical relation,
# above every similarity).
CONFIRMED = RELATED - 0.5
CONFIRM_MODES = ('read', 'agree', 'veto')
# What ``relate`` answers for a span the resource knows but relates to no
# value.
UNRELATED = 'unrelated'


@dataclasses.dataclass(frozen=True)
class Prototype:
  """A phrase known to state ``attribute = value``."""
  attribute: int
  value: int
  phrase: str


def content(lexicon, words: Sequence[str]) -> str:
  """The content words of ``words`` joined: how spans and prototypes are
  compared ("in a meadow" -> "meadow")."""
  return ' '.join(w for w in words if not lexicon.is_function_word(w))


class GroundingReader:
  """``parse(text) -> {attribute: value}``: the lexicon's reading plus the
  values grounded from the words it left unread.

  Args:
    lexicon: the world's lexicon (``parse_spans``, ``is_function_word``,
      ``words``).
    encode: ``list[str] -> [n, D]`` L2-normalised embeddings (cached by the
      caller or not; spans are cached here).
    prototypes: the phrases the reader may ground to.
    threshold: the least similarity a grounded span needs.
    max_span: the longest span, in words.
    exact: phrases read exactly like the lexicon's (the lexicon's
      ``parse_spans(text, exact)``), e.g. the training phrasings; the
      threshold fit reads without them.
    abstain: the least score of an unread span below ``threshold`` that
      makes the reader abstain on its attribute (None: never).
    relate: a lexical resource, ``relate(span, leave_out) -> ((attribute,
      value), depth)`` or None (``wordnet.Relater.relate``): a span it
      relates to a value takes that value, ahead of any similarity
      (``RELATED`` minus a hundredth per step of depth); ``UNRELATED``: a
      span it knows but relates to nothing.
    unrelated_penalty: taken off the similarity of an ``UNRELATED`` span.
    agree: a span ``relate`` relates to a value is read only when that value
      is also the span's nearest by similarity (two sources agree); a
      disagreement reads nothing.
    confirm: a second resource, ``confirm(spans) -> [(attribute, value) or
      None]`` (``span_lm.SpanLM``, frame words left out by the caller),
      used as ``confirm_mode`` says: ``'read'``, a span ``relate`` does not
      relate (None or ``UNRELATED``) takes its value (score
      ``CONFIRMED``); ``'agree'``, the same only when the value is also the
      span's nearest by similarity; ``'veto'``, a span ``relate`` relates
      to a value reads nothing when ``confirm`` names another.
    template: how a span or prototype is embedded (``'{}'``: alone).
    dictionary: words the lexicon's spelling fixer leaves as they are (the
      encoder tokenizer's whole words: real words are not typos).
  """

  def __init__(self, lexicon, encode: Callable[[list[str]], np.ndarray],
               prototypes: Sequence[Prototype], threshold: float,
               max_span: int = 3, exact=None, template: str = '{}',
               dictionary: frozenset = frozenset(),
               abstain: float | None = None, relate=None,
               unrelated_penalty: float = 0.0, agree: bool = False,
               confirm=None, confirm_mode: str = 'read'):
    if not prototypes:
      raise ValueError('GroundingReader needs at least one prototype')
    if max_span < 1:
      raise ValueError(f'max_span must be >= 1, got {max_span}')
    self.lexicon = lexicon
    self.threshold = float(threshold)
    self.abstain = abstain  # None: never abstains
    self.relate = relate
    self.unrelated_penalty = unrelated_penalty
    self.agree = agree
    if confirm_mode not in CONFIRM_MODES:
      raise ValueError(f'confirm_mode must be one of {CONFIRM_MODES}, got '
                       f'{confirm_mode!r}')
    self.confirm = confirm
    self.confirm_mode = confirm_mode
    self.max_span = max_span
    self.exact = exact
    self.dictionary = frozenset(dictionary)
    self.template = template
    self._encode = lambda texts: encode([template.format(t) for t in texts])
    keys = [content(lexicon, lexicon.words(p.phrase)) or p.phrase.lower()
            for p in prototypes]
    self._keys = np.asarray(keys, object)
    self._labels = np.asarray([(p.attribute, p.value) for p in prototypes],
                              np.int32)
    self._values = sorted({(int(a), int(v)) for a, v in self._labels})
    self._value_index = {av: i for i, av in enumerate(self._values)}
    self._proto_value = np.asarray([self._value_index[(int(a), int(v))]
                                    for a, v in self._labels], np.int32)
    unique = sorted(set(keys))
    vectors = np.asarray(self._encode(unique), np.float32)
    row = {k: i for i, k in enumerate(unique)}
    self._proto = vectors[[row[k] for k in keys]]
    self._span_cache: dict[str, np.ndarray] = {}
    self._read_cache: dict = {}
    self.calls = 0
    self.grounded = 0  # values grounded (not read by the lexicon)

  def _similarities(self, spans: list[str]) -> np.ndarray:
    """``[n, P]`` cosine similarities of ``spans`` to every prototype."""
    new = [s for s in dict.fromkeys(spans) if s not in self._span_cache]
    if new:
      vectors = np.asarray(self._encode(new), np.float32)
      for s, v in zip(new, vectors):
        self._span_cache[s] = self._proto @ v
    return np.stack([self._span_cache[s] for s in spans]) if spans else (
        np.zeros((0, len(self._keys)), np.float32))

  def candidates(self, text: str, leave_out: bool = False):
    """``(lexicon mentions, candidates)`` of ``text``: the lexicon's
    ``(attribute, value, start, end)`` and, per unread span, ``(score,
    attribute, value, start, end)`` of its best value. ``leave_out``: a
    prototype whose content words equal the span's does not count (the
    threshold fit's leave-one-phrase-out)."""
    return self._candidates(text, leave_out)[:2]

  def _candidates(self, text: str, leave_out: bool):
    """``candidates`` and the words as read."""
    mentions, words = self.lexicon.parse_spans(
        text, None if leave_out else self.exact, self.dictionary)
    read = np.zeros(len(words), bool)
    for _, _, start, end in mentions:
      read[start:end] = True
    spans, where = [], []
    i = 0
    while i < len(words):
      if read[i] or self.lexicon.is_function_word(words[i]) or len(
          words[i]) < 2:
        i += 1
        continue
      j = i
      while j < len(words) and not read[j] and not (
          self.lexicon.is_function_word(words[j])) and len(words[j]) >= 2:
        j += 1
      for start in range(i, j):
        for end in range(start + 1, min(j, start + self.max_span) + 1):
          spans.append(' '.join(words[start:end]))
          where.append((start, end))
      i = j
    if not spans:
      return mentions, [], words
    sims = self._similarities(spans)
    if leave_out:
      sims = np.where(self._keys[None, :] == np.asarray(spans, object)[:, None],
                      -np.inf, sims)
    # The best prototype per value, then the best value per span.
    per_value = np.full((len(spans), len(self._values)), -np.inf, np.float32)
    np.maximum.at(per_value.T, self._proto_value, sims.T)
    best = np.argmax(per_value, axis=1)
    related_all = [None if self.relate is None else
                   self.relate(s, s if leave_out else None) for s in spans]
    confirmed = [None] * len(spans)
    if self.confirm is not None:
      veto = self.confirm_mode == 'veto'
      ask = [k for k, r in enumerate(related_all)
             if (r not in (None, UNRELATED)) == veto]
      for k, label in zip(ask, self.confirm([spans[k] for k in ask])):
        confirmed[k] = label
    out = []
    for k, (start, end) in enumerate(where):
      a, v = self._values[int(best[k])]
      score = float(per_value[k, best[k]])
      related = related_all[k]
      if confirmed[k] is not None and self.confirm_mode == 'veto':
        if tuple(confirmed[k]) != tuple(related[0]):
          continue  # the two sources disagree: nothing read
      elif confirmed[k] is not None and (
          self.confirm_mode == 'read' or tuple(confirmed[k]) == (a, v)):
        (a, v), score = confirmed[k], CONFIRMED
        related = None
      if related == UNRELATED:
        score -= self.unrelated_penalty
      elif related is not None:
        if self.agree and related[0] != (a, v):  # the sources disagree
          continue
        (a, v), depth = related
        score = RELATED - 0.01 * depth
      out.append((score, a, v, start, end))
    return mentions, out, words

  def select(self, mentions, candidates, threshold: float,
             spans: bool = False):
    """``{attribute: value}`` from the lexicon's mentions and the candidate
    spans that reach ``threshold`` (greedy from the best score; one value
    per attribute, none of an attribute the lexicon read: it is precise by
    construction; no overlapping spans; among the lexicon's, later wins).
    ``spans``: also the ``(start, end)`` of every span read."""
    taken, used = [], set()
    grounded = {m[0] for m in mentions}  # the lexicon's attributes
    for score, a, v, start, end in sorted(candidates, key=lambda c: (
        -c[0], c[3])):
      if score < threshold:
        break
      if a in grounded or used.intersection(range(start, end)):
        continue
      taken.append((a, v, start, end))
      grounded.add(a)
      used.update(range(start, end))
    found = {}
    read = sorted(list(mentions) + taken, key=lambda m: m[2])
    for a, v, _, _ in read:
      found[a] = v
    if spans:
      return found, [(start, end) for _, _, start, end in read]
    return found

  def _read(self, text: str):
    """``(values, frame words, values grounded, attributes abstained)`` of
    ``text``, read once per text and thresholds (the Intent Decomposer, the
    Reflector and its frame classifier read the same words, and every
    method the same user)."""
    key = (text, self.threshold, self.abstain)
    if key not in self._read_cache:
      mentions, candidates, words = self._candidates(text, False)
      found, read = self.select(mentions, candidates, self.threshold,
                                spans=True)
      inside = {i for start, end in read for i in range(start, end)}
      lexical = {(m[0], m[1]) for m in mentions}
      self._read_cache[key] = (
          found, [w for i, w in enumerate(words) if i not in inside],
          sum((a, v) not in lexical for a, v in found.items()),
          abstentions(found, read, candidates, self.abstain))
    return self._read_cache[key]

  def abstained(self, text: str) -> frozenset:
    """The attributes ``text`` names in words the reader cannot read (see
    the module docstring); empty when ``abstain`` is None."""
    return self._read(text)[3]

  def frame(self, text: str) -> tuple[dict, list[str]]:
    """``(values, frame words)``: what ``parse`` reads and the words of
    ``text`` outside every span it read (the user's frame: "swap the
    colour for", "I think", "No. I want")."""
    found, frame, _, _ = self._read(text)
    return dict(found), list(frame)

  def lexical(self, text: str) -> dict[int, int]:
    """The values the lexicon (with the exact phrases) reads in ``text``,
    nothing grounded."""
    mentions, _ = self.lexicon.parse_spans(text, self.exact, self.dictionary)
    return self.select(mentions, [], self.threshold)

  def parse(self, text: str) -> dict[int, int]:
    """The values ``text`` names: ``{attribute index: value index}``."""
    found, _, grounded, _ = self._read(text)
    self.calls += 1
    self.grounded += grounded
    return dict(found)


def fit_threshold(reader: GroundingReader, texts: Sequence[str],
                  truths: Sequence[dict], grid=None) -> dict:
  """The threshold that maximises values read right minus values read
  wrong on training utterances ``texts`` with ground truth ``truths``
  (``{attribute: value}`` each names), spans scored leave-one-phrase-out.

  Returns ``{'threshold', 'right', 'wrong', 'named', 'curve'}``; ties go to
  the higher threshold.
  """
  if len(texts) != len(truths) or not texts:
    raise ValueError('fit_threshold needs as many truths as texts (>= 1), '
                     f'got {len(texts)} and {len(truths)}')
  grid = np.round(np.arange(0.30, 0.96, 0.01), 2) if grid is None else grid
  parsed = [reader.candidates(t, leave_out=True) for t in texts]
  named = sum(len(t) for t in truths)
  curve, best = [], None
  for threshold in sorted(grid, reverse=True):
    right = wrong = 0
    for (mentions, candidates), truth in zip(parsed, truths):
      found = reader.select(mentions, candidates, float(threshold))
      right += sum(found.get(a) == v for a, v in truth.items())
      wrong += sum(truth.get(a) != v for a, v in found.items())
    curve.append({'threshold': float(threshold), 'right': right,
                  'wrong': wrong})
    if best is None or right - wrong > best['right'] - best['wrong']:
      best = curve[-1]
  return {**best, 'named': named, 'utterances': len(texts),
          'curve': curve[::-1]}


def abstentions(found: dict, read, candidates, abstain: float | None
                ) -> frozenset:
  """The attributes of candidate spans scoring at least ``abstain`` that
  ``found`` (the values read, from spans ``read``) has no value of and
  that overlap no span read."""
  if abstain is None:
    return frozenset()
  inside = {i for start, end in read for i in range(start, end)}
  return frozenset(
      a for score, a, _, start, end in candidates
      if score >= abstain and a not in found
      and not inside.intersection(range(start, end)))


def fit_abstain(reader: GroundingReader, texts: Sequence[str],
                truths: Sequence[dict], grid=None) -> dict:
  """The abstention threshold (at most ``reader.threshold``) that
  maximises abstentions on named attributes (a value the reader could
  not read, which a search would otherwise fill from the shown video)
  minus abstentions on attributes the utterance does not name, on
  training utterances scored leave-one-phrase-out as ``fit_threshold``
  scores them.

  Returns ``{'abstain', 'named_unread', 'good', 'bad', 'curve'}``;
  ``abstain`` is None when no threshold gains (ties go to the higher
  threshold, then to None).
  """
  if len(texts) != len(truths) or not texts:
    raise ValueError('fit_abstain needs as many truths as texts (>= 1), '
                     f'got {len(texts)} and {len(truths)}')
  top = reader.threshold
  grid = (np.round(np.arange(0.30, top + 1e-9, 0.01), 2) if grid is None
          else [g for g in grid if g <= top])
  read = []
  unread = 0
  for text, truth in zip(texts, truths):
    mentions, candidates = reader.candidates(text, leave_out=True)
    found, spans = reader.select(mentions, candidates, top, spans=True)
    read.append((found, spans, candidates, truth))
    unread += sum(a not in found for a in truth)
  curve, best = [], {'abstain': None, 'good': 0, 'bad': 0}
  for threshold in sorted(grid, reverse=True):
    good = bad = 0
    for found, spans, candidates, truth in read:
      for a in abstentions(found, spans, candidates, float(threshold)):
        good += a in truth
        bad += a not in truth
    curve.append({'abstain': float(threshold), 'good': good, 'bad': bad})
    if good - bad > best['good'] - best['bad']:
      best = curve[-1]
  return {**best, 'named_unread': unread, 'utterances': len(texts),
          'curve': curve[::-1]}


@dataclasses.dataclass(frozen=True)
class GroundedConfig(registry.ReasonerConfig):
  """``grounded``'s settings: overrides of its reader's options (the
  reading benchmark's; no flag)."""
  NAME = 'grounded'
  options: dict | None = None


class _Grounded(registry.Backend):
  """``grounded``: the rules reasoning over the source's grounding reader
  (``Vocabulary.grounding``; on the world ``envs.world.models.reader_fit.Grounding``),
  with ``GroundedConfig.options`` overriding its options."""
  NAME = 'grounded'
  JITTED = True
  CONFIG = GroundedConfig

  def offered(self, vocab):
    return vocab.grounding is not None

  def problems(self, config, vocab):
    try:
      vocab.grounding.check_options(config.options)
    except ValueError as e:
      return [f'--{e}']
    return []

  def make(self, config, vocab, encode_text=None, **kwargs):
    del kwargs
    if encode_text is None:
      raise ValueError("--reasoner=grounded needs the source's text "
                       'encoder (encode_text)')
    return vocab.grounding.reasoner(encode_text, config.options)


BACKEND = _Grounded()
