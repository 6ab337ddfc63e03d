"""The world's lexicon: reading attribute mentions out of free text, and
writing descriptions, answers and questions.

The rules reasoner and the simulated user share it. Reading is a greedy
longest-match over word n-grams against every phrase of the world's
templates, after a closed-vocabulary spelling fixer (each unknown word is
replaced by the vocabulary word at edit distance 1, or 2 for long words),
so typos from the user's surface noise still parse.
"""

import functools
import re
import sys

import numpy as np

from recovr_jax.envs.world.benchmark import generator

A = generator.ATTRIBUTES
# Attribute index -> name for writing (the layout, index 7, exists only
# in a world whose layout is describable; ``LayoutLexicon`` reads it).
_NAMES = generator.attribute_names(generator.NUM_ATTRIBUTES + 1)


@functools.cache
def phrase_table() -> dict[tuple[str, ...], tuple[int, int]]:
  """Word tuple -> (attribute index, value index) for every phrase."""
  table = {}

  def add(phrase, attribute, value):
    words = tuple(_words(phrase))
    if words:
      table[words] = (A.index(attribute), generator.VALUES[attribute].index(
          value))

  for value, pairs in generator.SHAPE_WORDS.items():
    for single, plural in pairs:
      add(single, 'shape', value)
      add(plural, 'shape', value)
  for attribute, words in (('colour', generator.COLOUR_WORDS),
                           ('size', generator.SIZE_WORDS),
                           ('motion', generator.MOTION_WORDS),
                           ('background', generator.BACKGROUND_WORDS),
                           ('background', generator.BACKGROUND_NOUNS),
                           ('lighting', generator.LIGHTING_WORDS),
                           ('lighting', generator.LIGHTING_NOUNS)):
    for value, phrases in words.items():
      for p in phrases:
        add(p, attribute, value)
        if attribute == 'motion':
          add(p.replace('moving ', 'move '), attribute, value)
  for value, phrases in generator.COUNT_WORDS.items():
    for p in phrases:
      add(p, 'count', value)
  for value in generator.VALUES['count']:
    add(value, 'count', value)
  # Bare direction and place words, for feedback that is shorter than the
  # templates ("left", "beach").
  for value, word in (('left', 'left'), ('right', 'right'), ('up', 'upward'),
                      ('down', 'downward')):
    add(word, 'motion', value)
  for value, words in (('grass', ('lawn', 'field')), ('sand', ('beach',
                                                               'dunes')),
                       ('water', ('lake', 'sea')), ('road', ('street',))):
    for w in words:
      add(w, 'background', value)
  for value, words in (('day', ('daytime', 'sunny')), ('sunset', ('dusk',)),
                       ('cloudy', ('cloudy', 'overcast')),
                       ('night', ('night', 'dark', 'nighttime'))):
    for w in words:
      add(w, 'lighting', value)
  return table


_FUNCTION_WORDS = frozenset(
    'a an the it them they of to on in at over above under instead and also '
    'make change show use put move paint turn into have switch with is are '
    'be should want i no not this that please but almost close quite yes '
    'video scene background colour color shape size direction lighting '
    'objects object shapes things thing there more less than like looks '
    'looking for what which how many where keep same wrong me just one'
    .split())


def _words(text: str) -> list[str]:
  return re.findall(r"[a-z]+(?:-[a-z]+)?", text.lower())


def words(text: str) -> list[str]:
  """``text``'s words as the lexicon splits them (lower case, hyphenated
  words kept whole), before the spelling fixer."""
  return _words(text)


_NOT_A_COUNT = frozenset(('this', 'that', 'the', 'which', 'no', 'any'))


@functools.cache
def vocabulary() -> frozenset:
  return frozenset(w for phrase in phrase_table() for w in phrase) | (
      _FUNCTION_WORDS)


def _distance(a: str, b: str, limit: int) -> int:
  """Edit distance with adjacent transpositions (optimal string alignment),
  or ``limit + 1`` when above ``limit``."""
  if abs(len(a) - len(b)) > limit:
    return limit + 1
  rows = [list(range(len(b) + 1))]
  for i, ca in enumerate(a, 1):
    cur = [i]
    for j, cb in enumerate(b, 1):
      d = min(rows[-1][j] + 1, cur[j - 1] + 1, rows[-1][j - 1] + (ca != cb))
      if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
        d = min(d, rows[-2][j - 2] + 1)
      cur.append(d)
    if min(cur) > limit and (len(rows) < 2 or min(rows[-1]) > limit):
      return limit + 1
    rows.append(cur)
  return min(rows[-1][-1], limit + 1)


@functools.lru_cache(maxsize=65536)
def fix_spelling(word: str, extra_vocabulary: frozenset = frozenset()
                 ) -> str:
  """The closest vocabulary word (distance 1; 2 for words of 6+ letters);
  ``extra_vocabulary``: more words a reader knows (kept, and fixed to)."""
  vocab = vocabulary() | extra_vocabulary if extra_vocabulary else (
      vocabulary())
  if word in vocab:
    return word
  limit = 2 if len(word) >= 6 else 1
  best, best_d = word, limit + 1
  for v in sorted(vocab):
    d = _distance(word, v, limit)
    if d < best_d:
      best, best_d = v, d
  return best


def parse(text: str) -> dict[int, int]:
  """Attribute mentions in ``text``: {attribute index: value index}.

  Later mentions of the same attribute win.
  """
  return {a: v for a, v, _, _ in parse_spans(text)[0]}


def parse_spans(text: str, extra=None, keep: frozenset = frozenset()):
  """``(mentions, words)``: ``words`` are ``text``'s words as read (after
  the spelling fixer) and ``mentions`` the ``(attribute, value, start,
  end)`` of each phrase read, in order (``words[start:end]``); the words
  outside every span are what the lexicon could not read.

  ``extra``: an ``ExtraPhrases`` a reader learnt (its phrases read like the
  lexicon's, its words known to the spelling fixer); ``keep``: words the
  spelling fixer leaves alone (a reader's dictionary of real words, so
  "descending" is not fixed to "ascending")."""
  known = extra.vocabulary if extra is not None else frozenset()
  words = [w if w in keep else fix_spelling(w, known) for w in _words(text)]
  table = phrase_table()
  longest = max(len(k) for k in table)
  if extra is not None:
    longest = max(longest, extra.longest)
  found = []
  i = 0
  while i < len(words):
    for n in range(min(longest, len(words) - i), 0, -1):
      key = tuple(words[i:i + n])
      hit = table.get(key)
      if extra is not None and key in extra.table:
        hit = extra.table[key]
      if hit is not None and n == 1 and words[i] == 'one' and i and (
          words[i - 1] in _NOT_A_COUNT):
        hit = None  # "not this one" names no count
      if hit is not None:
        found.append((hit[0], hit[1], i, i + n))
        i += n
        break
    else:
      i += 1
  return found, words


class ExtraPhrases:
  """Phrases a reader knows beyond the lexicon: ``{word tuple: (attribute,
  value)}``, each also under its content words ("at golden hour" and
  "golden hour"); they win over a lexicon phrase of the same words."""

  def __init__(self, phrases):
    self.phrases = tuple(phrases)
    self.table = {}
    for text, attribute, value in self.phrases:
      words = tuple(_words(text))
      for key in (words, tuple(w for w in words
                               if w not in _FUNCTION_WORDS)):
        if key:
          self.table[key] = (int(attribute), int(value))
    self.longest = max((len(k) for k in self.table), default=1)
    self.vocabulary = frozenset(w for k in self.table for w in k)


def is_function_word(word: str) -> bool:
  """Whether ``word`` is one of the lexicon's function words (frames,
  determiners, the attribute names themselves), which name no value."""
  return word in _FUNCTION_WORDS


def describe(rng: np.random.Generator, attrs, subset) -> str:
  """A description naming exactly the attributes in ``subset``."""
  subset = set(int(a) for a in subset)
  values = {a: generator.VALUES[a][int(v)] for a, v in zip(_NAMES, attrs)}
  idx = {a: i for i, a in enumerate(_NAMES)}
  one = values['count'] == 'one'
  words = []
  if idx['count'] in subset:
    words.append(generator._pick(rng, generator.COUNT_WORDS[values['count']]))  # pylint: disable=protected-access
  if idx['size'] in subset:
    words.append(generator._pick(rng, generator.SIZE_WORDS[values['size']]))  # pylint: disable=protected-access
  if idx['colour'] in subset:
    words.append(generator._pick(rng, generator.COLOUR_WORDS[values['colour']]))  # pylint: disable=protected-access
  if idx['shape'] in subset:
    pair = generator._pick(rng, generator.SHAPE_WORDS[values['shape']])  # pylint: disable=protected-access
    words.append(pair[0] if one and idx['count'] in subset else pair[1])
  else:
    words.append('object' if one and idx['count'] in subset else 'objects')
  tail = []
  for attribute, table in (('motion', generator.MOTION_WORDS),
                           ('background', generator.BACKGROUND_WORDS),
                           ('lighting', generator.LIGHTING_WORDS),
                           (generator.LAYOUT, generator.LAYOUT_WORDS)):
    if idx[attribute] in subset and attribute in values:
      tail.append(generator._pick(rng, table[values[attribute]]))  # pylint: disable=protected-access
  rng.shuffle(tail)
  return ' '.join(words + tail)


def canonical_description(attrs: dict[int, int]) -> str:
  """A fixed-order description of the attributes in ``attrs``."""
  values = {_NAMES[a]: generator.VALUES[_NAMES[a]][v]
            for a, v in attrs.items()}
  words = []
  if 'count' in values:
    words.append(values['count'])
  if 'size' in values:
    words.append(generator.SIZE_WORDS[values['size']][0])
  if 'colour' in values:
    words.append(values['colour'])
  if 'shape' in values:
    single, plural = generator.SHAPE_WORDS[values['shape']][0]
    words.append(single if values.get('count') == 'one' else plural)
  else:
    words.append('object' if values.get('count') == 'one' else 'objects')
  if 'motion' in values:
    words.append(generator.MOTION_WORDS[values['motion']][0])
  if 'background' in values:
    words.append(generator.BACKGROUND_WORDS[values['background']][0])
  if 'lighting' in values:
    words.append(generator.LIGHTING_WORDS[values['lighting']][0])
  if generator.LAYOUT in values:
    words.append(generator.LAYOUT_WORDS[values[generator.LAYOUT]][0])
  return ' '.join(words)


def constraint(attribute: int, value: int) -> str:
  """``'colour: blue'``, the form of ``keep`` / ``avoid`` entries."""
  return f'{_NAMES[attribute]}: {generator.VALUES[_NAMES[attribute]][value]}'


def parse_constraint(text: str, names=A) -> tuple[int, int] | None:
  """Inverse of ``constraint``; ``None`` if ``text`` is not one of the
  attributes ``names``."""
  name, _, value = text.partition(':')
  name, value = name.strip().lower(), value.strip().lower()
  if name in names and value in generator.VALUES[name]:
    return names.index(name), generator.VALUES[name].index(value)
  return None


QUESTIONS = {
    'shape': ('What shape should the objects be?', 'Which shape are you after?'),
    'colour': ('What colour should they be?', 'Which colour do you want?'),
    'count': ('How many objects should there be?',
              'How many of them do you want?'),
    'motion': ('Which direction should they move?',
               'What direction of motion do you want?'),
    'background': ('What background should the scene have?',
                   'Where should the scene take place, which background?'),
    'lighting': ('What lighting or time of day should it be?',
                 'Which lighting do you want?'),
    'size': ('What size should the objects be?', 'How big should they be?'),
}
_ALL_QUESTIONS = {**QUESTIONS, generator.LAYOUT: (
    'What layout should the scene have?', 'Which layout do you want?')}
_QUESTION_KEYS = (('how many', 'count'), ('colour', 'colour'),
                  ('color', 'colour'), ('shape', 'shape'),
                  ('direction', 'motion'), ('move', 'motion'),
                  ('background', 'background'), ('where', 'background'),
                  ('lighting', 'lighting'), ('time of day', 'lighting'),
                  ('size', 'size'), ('how big', 'size'))


def question_text(rng: np.random.Generator, attribute: int) -> str:
  return generator._pick(rng, _ALL_QUESTIONS[_NAMES[attribute]])  # pylint: disable=protected-access


def question_attribute(question: str) -> int | None:
  """The attribute a question asks about, or ``None``."""
  q = question.lower()
  for key, attribute in _QUESTION_KEYS:
    if key in q:
      return A.index(attribute)
  return None


_CANONICAL_EDIT = {
    'shape': 'change the shape to {}', 'colour': 'change the colour to {}',
    'count': 'show {} of them', 'motion': 'have them move {}',
    'background': 'change the background to {}',
    'lighting': 'change the lighting to {}', 'size': 'make them {}',
    generator.LAYOUT: 'change the layout to {}',
}


def parse_edit(text: str, names=A, parse_part=None) -> dict[int, int]:
  """What an edit states: ``canonical_edit``'s parts read back exactly
  (its bare value names, e.g. "change the lighting to day", are not all
  lexicon phrases), any other part read by ``parse`` (``parse_part``);
  ``names``: the attributes read."""
  found = {}
  for part in text.split(' and '):
    for a, name in enumerate(names):
      head, _, tail = _CANONICAL_EDIT[name].partition('{}')
      if part.startswith(head) and part.endswith(tail):
        word = part[len(head):len(part) - len(tail)]
        if name == 'shape':
          word = next((v for v, pairs in generator.SHAPE_WORDS.items()
                       if pairs[0][0] == word), None)
        if word in generator.VALUES[name]:
          found[a] = generator.VALUES[name].index(word)
          break
    else:
      found.update((parse_part or parse)(part))
  return found


def canonical_edit(changes: dict[int, int]) -> str:
  """A fixed-form edit for ``{attribute: value}``, e.g. 'make them small'."""
  parts = []
  for a in sorted(changes):
    name = _NAMES[a]
    value = generator.VALUES[name][changes[a]]
    if name == 'shape':
      value = generator.SHAPE_WORDS[value][0][0]
    parts.append(_CANONICAL_EDIT[name].format(value))
  return ' and '.join(parts)


def layout_phrases() -> tuple[tuple[str, int, int], ...]:
  """``(phrase, attribute, value)`` of the layout's caption words and bare
  nouns (``LayoutLexicon`` reads them)."""
  a = _NAMES.index(generator.LAYOUT)
  out = []
  for value, phrases in generator.LAYOUT_WORDS.items():
    v = generator.VALUES[generator.LAYOUT].index(value)
    out += [(p, a, v) for p in phrases]
  for value, nouns in (('fence', ('fence',)), ('pole', ('pole', 'post')),
                       ('arch', ('arch', 'archway')), ('open', ('open',))):
    v = generator.VALUES[generator.LAYOUT].index(value)
    out += [(n, a, v) for n in nouns]
  return tuple(out)


class LayoutLexicon:
  """The lexicon of a world whose layout is describable
  (``WorldConfig.describe_layout``): the module's reading and writing over
  eight attributes, the layout's phrases read like the lexicon's (their
  words known to the spelling fixer) and its question. The module's own
  functions (seven attributes) are the lexicon of every other world."""

  A = _NAMES
  QUESTIONS = _ALL_QUESTIONS

  def __init__(self):
    self._layout = ExtraPhrases(layout_phrases())
    self._phrases = layout_phrases()

  def parse_spans(self, text: str, extra=None, keep: frozenset = frozenset()):
    """``parse_spans`` with the layout's phrases (and ``extra``'s)."""
    if extra is None:
      return parse_spans(text, self._layout, keep)
    return parse_spans(text, ExtraPhrases(self._phrases + extra.phrases),
                       keep)

  def parse(self, text: str) -> dict[int, int]:
    return {a: v for a, v, _, _ in self.parse_spans(text)[0]}

  def parse_edit(self, text: str) -> dict[int, int]:
    return parse_edit(text, self.A, self.parse)

  def parse_constraint(self, text: str) -> tuple[int, int] | None:
    return parse_constraint(text, self.A)

  def question_attribute(self, question: str) -> int | None:
    if 'layout' in question.lower():
      return self.A.index(generator.LAYOUT)
    return question_attribute(question)

  # Writing is the module's (it names the layout when given one).
  describe = staticmethod(describe)
  canonical_description = staticmethod(canonical_description)
  canonical_edit = staticmethod(canonical_edit)
  constraint = staticmethod(constraint)
  question_text = staticmethod(question_text)
  words = staticmethod(words)
  is_function_word = staticmethod(is_function_word)


def for_attributes(num_attributes: int):
  """The lexicon of ``[..., num_attributes]`` attribute rows: this module
  (7), or a ``LayoutLexicon`` (8, the layout describable)."""
  generator.attribute_names(num_attributes)  # checks the count
  return (LayoutLexicon() if num_attributes > generator.NUM_ATTRIBUTES
          else sys.modules[__name__])
