"""The simulated user's own words (``UserConfig.language`` 'own' and
'own_v3').

The user's phrase bank holds the world's caption words (which the rules
reasoner's lexicon knows) and as many paraphrases, templates and word
orders that the lexicon and its spelling fixer have never seen ("cobalt",
"plunging", "in a meadow", "by moonlight", "the scene: ..."). Every phrase
is drawn uniformly from the bank, so a description naming several
attributes is rarely read back exactly; what a reasoner makes of the rest
(a wrong spelling fix, a missed mention) is its real error.
``held_out_vocabulary`` lists the words no lexicon phrase contains.

Splits (docs/reading.md, "The phrasing splits"): the user's own phrases
fall into three splits.

* ``train`` and ``dev``: benchmark v2's own phrases, split once by
  ``PHRASING_SEED`` (half of each value's own phrases, rounded down, at
  least one, are ``dev``; until benchmark v3 they were called held out).
* ``test``: phrases written for benchmark v3 (``_TEST``), at least three
  per value, none of them in the lexicon or in v2's bank. They are in the
  bank only under ``language='own_v3'`` and never in any training set.

``bank(name, widest)`` draws from the caption words and the splits up to
``widest`` (``SPLITS``: 'train', 'dev', 'test'); ``widest_split`` maps a
user's language and phrasings to it. ``phrasing_of`` says which kind of
phrase (``KINDS``) stated a named value.
"""

import functools
import re

import numpy as np

from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon

A = generator.ATTRIBUTES
# Index -> name over eight attributes (the layout, index 7, is named only in
# a world whose layout is describable).
_NAMES = generator.attribute_names(generator.NUM_ATTRIBUTES + 1)

# Held-out phrases per value (never in the world's captions or lexicon).
_SHAPES = {
    'circle': (('orb', 'orbs'), ('sphere', 'spheres')),
    'square': (('cube', 'cubes'), ('tile', 'tiles')),
    'triangle': (('pyramid', 'pyramids'), ('arrowhead', 'arrowheads')),
    'cross': (('x mark', 'x marks'), ('plus', 'pluses')),
}
_COLOURS = {
    'red': ('ruby', 'cherry', 'rose-red'),
    'blue': ('cobalt', 'sapphire', 'sky-blue'),
    'yellow': ('amber', 'mustard', 'canary'),
    'white': ('pearl', 'milky', 'chalk-white'),
}
_COUNTS = {
    'one': ('a solitary', 'an individual'),
    'two': ('a couple of', 'twin'),
    'three': ('a threesome of', 'a triad of'),
    'four': ('a quartet of', 'a foursome of'),
}
_MOTIONS = {
    'left': ('going westward', 'sliding leftward'),
    'right': ('going eastward', 'sliding rightward'),
    'up': ('climbing', 'ascending', 'floating skyward'),
    'down': ('dropping', 'descending', 'plunging'),
}
_PLACES = {
    'grass': ('in a meadow', 'on the turf', 'in a park'),
    'sand': ('in the desert', 'on the shore'),
    'water': ('on the ocean', 'over a pond', 'on a river'),
    'road': ('on tarmac', 'on a highway', 'on pavement'),
}
_LIGHTS = {
    'day': ('at midday', 'at noon', 'in bright sunshine'),
    'sunset': ('at golden hour', 'at twilight'),
    'cloudy': ('on a gloomy day', 'under heavy clouds'),
    'night': ('by moonlight', 'at midnight'),
}
_SIZES = {
    'small': ('miniature', 'minuscule', 'teeny'),
    'medium': ('moderate-sized', 'regular-sized'),
    'large': ('giant', 'enormous', 'massive'),
}

_LAYOUTS = {
    'fence': ('behind a railing', 'along a barrier', 'by some palings'),
    'pole': ('beside a pillar', 'next to a column', 'by a mast'),
    'arch': ('through a gateway', 'under a portal', 'below a vault'),
    'open': ('in a clearing', 'against an empty backdrop',
             'in wide-open space'),
}


# The test split (benchmark v3): phrases written after v2's bank was
# frozen, at least three per value: synonyms, rarer words and short
# descriptions, none of them containing a lexicon phrase or one of v2's
# own phrases (tests/envs/world/user_language_test.py checks both). Fixed before any
# reader was evaluated on them.
_TEST = {
    'shape': {
        'circle': (('globe', 'globes'), ('bubble', 'bubbles'),
                   ('dot', 'dots'), ('round blob', 'round blobs')),
        'square': (('brick', 'bricks'), ('crate', 'crates'),
                   ('quadrilateral', 'quadrilaterals'), ('slab', 'slabs')),
        'triangle': (('delta', 'deltas'), ('spike', 'spikes'),
                     ('trigon', 'trigons'), ('pennant', 'pennants')),
        'cross': (('crucifix', 'crucifixes'), ('saltire', 'saltires'),
                  ('cruciform', 'cruciforms')),
    },
    'colour': {
        'red': ('vermilion', 'maroon', 'carmine', 'blood-coloured'),
        'blue': ('cerulean', 'ultramarine', 'indigo', 'sky-coloured'),
        'yellow': ('saffron', 'citrine', 'buttercup', 'banana-coloured'),
        'white': ('alabaster', 'porcelain', 'ghost-pale', 'cotton-coloured'),
    },
    'count': {
        'one': ('a sole', 'a lonely', 'an isolated'),
        'two': ('a duo of', 'a brace of', 'a twosome of', 'a dyad of'),
        'three': ('a trinity of', 'a triplet of', 'a troika of'),
        'four': ('a tetrad of', 'a quadruplet of', 'a quad of'),
    },
    'motion': {
        'left': ('westbound', 'gliding to the west', 'sweeping leftwards',
                 'scooting to port'),
        'right': ('eastbound', 'gliding to the east', 'sweeping rightwards',
                  'scooting to starboard'),
        'up': ('soaring', 'lifting off', 'heading heavenward', 'going aloft'),
        'down': ('plummeting', 'tumbling earthward', 'dipping lower',
                 'sagging'),
    },
    'background': {
        'grass': ('on a pasture', 'across a prairie', 'on a green',
                  'in a paddock'),
        'sand': ('in the sahara', 'on a sandbank', 'across arid wastes',
                 'on a dusty plain'),
        'water': ('on the waves', 'over a lagoon', 'across a reservoir',
                  'above the surf'),
        'road': ('on a motorway', 'along a boulevard', 'on cobblestones',
                 'over a parking lot'),
    },
    'lighting': {
        'day': ('under a blazing sun', 'at lunchtime', 'in the afternoon',
                'mid-morning'),
        'sunset': ('at sundown', 'in the gloaming', 'at eventide',
                   'in the afterglow'),
        'cloudy': ('under a leaden sky', 'in dreary drizzle',
                   'in a sunless haze', 'beneath brooding nimbus'),
        'night': ('under the stars', 'in the wee hours', 'in pitch blackness',
                  'after nightfall'),
    },
    'size': {
        'small': ('pint-sized', 'petite', 'diminutive', 'itty-bitty'),
        'medium': ('middling', 'standard-sized', 'modest', 'in-between'),
        'large': ('colossal', 'jumbo', 'hulking', 'mammoth'),
    },
    generator.LAYOUT: {
        'fence': ('by a stockade', 'near a palisade', 'against a trellis'),
        'pole': ('beside a lamppost', 'next to a flagstaff', 'by a stake'),
        'arch': ('beneath a keystone', 'through an arcade',
                 'under a curved span'),
        'open': ('with empty surroundings', 'in unobstructed space',
                 'with a clear view'),
    },
}


# The user's words per attribute: the world's caption words, its own.
_KNOWN = {'shape': generator.SHAPE_WORDS, 'colour': generator.COLOUR_WORDS,
          'count': generator.COUNT_WORDS, 'motion': generator.MOTION_WORDS,
          'background': generator.BACKGROUND_WORDS,
          'lighting': generator.LIGHTING_WORDS, 'size': generator.SIZE_WORDS,
          generator.LAYOUT: generator.LAYOUT_WORDS}
_OWN = {'shape': _SHAPES, 'colour': _COLOURS, 'count': _COUNTS,
        'motion': _MOTIONS, 'background': _PLACES, 'lighting': _LIGHTS,
        'size': _SIZES, generator.LAYOUT: _LAYOUTS}
# A user's phrasings: 'all' of its language's bank, or only the phrasings
# a training set may use ('train').
PHRASINGS = ('all', 'train')
SPLITS = ('train', 'dev', 'test')  # the own phrases' splits, widening
PHRASING_SEED = 25  # fixed once, before any result; never tuned
KINDS = ('lexicon',) + SPLITS  # what ``phrasing_of`` returns


@functools.cache
def dev_phrasings() -> frozenset:
  """``(attribute, value, phrase)`` of v2's own phrases in the dev split
  (held out from every training set): per value, ``len // 2`` (at least
  one) of its own phrases, chosen by one permutation seeded by
  ``PHRASING_SEED``. A shape's phrase is its ``(singular, plural)`` pair.
  (The layout's, drawn last, leave the seven attributes' split as it was
  before the layout existed.)"""
  rng = np.random.default_rng(PHRASING_SEED)
  out = set()
  for name in _NAMES:
    for value, phrases in _OWN[name].items():
      order = rng.permutation(len(phrases))
      for i in order[:max(1, len(phrases) // 2)]:
        out.add((name, value, phrases[int(i)]))
  return frozenset(out)


@functools.cache
def test_phrasings() -> frozenset:
  """``(attribute, value, phrase)`` of the test split (benchmark v3)."""
  return frozenset((name, value, phrase) for name in _NAMES
                   for value, phrases in _TEST[name].items()
                   for phrase in phrases)


def held_out_phrasings() -> frozenset:
  """The own phrases no training set may use: dev and test."""
  return dev_phrasings() | test_phrasings()


def widest_split(language: str, phrasings: str) -> str:
  """The widest split (``SPLITS``) a user of ``language`` ('own' is v2's
  bank, 'own_v3' adds the test split) and ``phrasings`` draws from."""
  if phrasings not in PHRASINGS:
    raise ValueError(f'unknown phrasings {phrasings!r}; valid: '
                     f'{", ".join(PHRASINGS)}')
  if phrasings == 'train':
    return 'train'
  if language not in ('own', 'own_v3'):
    raise ValueError(f"language {language!r} has no own phrase bank; "
                     "valid: own, own_v3")
  return 'test' if language == 'own_v3' else 'dev'


def split_of(name: str, value: str, phrase) -> str | None:
  """The split (``SPLITS``) of one of the user's own phrases; ``None``: a
  caption word."""
  if (name, value, phrase) in test_phrasings():
    return 'test'
  if (name, value, phrase) in dev_phrasings():
    return 'dev'
  return 'train' if phrase in _OWN[name][value] else None


@functools.cache
def bank(name: str, widest: str = 'dev') -> dict:
  """``value -> phrases`` the user draws from for attribute ``name``: the
  caption words, then its own phrases of the splits up to ``widest``
  (``SPLITS``; 'dev' is v2's whole bank, 'test' v3's)."""
  if widest not in SPLITS:
    raise ValueError(f'unknown split {widest!r}; valid: '
                     f'{", ".join(SPLITS)}')
  allowed = SPLITS[:SPLITS.index(widest) + 1]
  return {v: tuple(_KNOWN[name][v]) + tuple(
      p for p in _OWN[name][v] + _TEST[name][v]
      if split_of(name, v, p) in allowed) for v in _KNOWN[name]}


SHAPE = bank('shape')
COLOUR = bank('colour')
COUNT = bank('count')
MOTION = bank('motion')
PLACE = bank('background')
LIGHT = bank('lighting')
SIZE = bank('size')


def _surfaces(phrase) -> tuple[str, ...]:
  return phrase if isinstance(phrase, tuple) else (phrase,)


def phrasing_of(attribute: int, value: int, text: str) -> str | None:
  """Which kind of phrase (``KINDS``) states ``attribute = value`` in the
  user's clean ``text``: the longest of the value's bank phrases (every
  split's) found as whole words (so "sky-blue" is not read as "blue");
  ``None``: none."""
  name = _NAMES[attribute]
  v = generator.VALUES[name][value]
  text = text.lower()
  best, kind = '', None
  for phrase in bank(name, 'test')[v]:
    for surface in _surfaces(phrase):
      if len(surface) > len(best) and re.search(
          r'(?<![a-z-])' + re.escape(surface.lower()) + r'(?![a-z-])', text):
        best = surface
        kind = split_of(name, v, phrase) or 'lexicon'
  return kind


def _pick(rng, options):
  return options[rng.integers(len(options))]


def _value(attribute: int, attrs) -> str:
  return generator.VALUES[_NAMES[attribute]][int(attrs[attribute])]


def describe(rng: np.random.Generator, attrs, subset,
             widest: str = 'dev') -> str:
  """A description of ``attrs`` naming the attributes in ``subset``, in the
  user's words (its own phrases of the splits up to ``widest``) and one of
  the user's word orders."""
  SHAPE, COLOUR, COUNT, MOTION, PLACE, LIGHT, SIZE = _banks(widest)  # pylint: disable=invalid-name,redefined-outer-name
  names = {_NAMES[a] for a in subset}
  v = {_NAMES[a]: _value(a, attrs) for a in range(len(attrs))}
  subject = []
  if 'count' in names:
    subject.append(_pick(rng, COUNT[v['count']]))
  if 'size' in names:
    subject.append(_pick(rng, SIZE[v['size']]))
  if 'colour' in names:
    subject.append(_pick(rng, COLOUR[v['colour']]))
  plural = 'count' not in names or v['count'] != 'one'
  if 'shape' in names:
    subject.append(_pick(rng, SHAPE[v['shape']])[1 if plural else 0])
  else:
    subject.append(_pick(rng, ('objects', 'things', 'shapes')) if plural
                   else _pick(rng, ('object', 'thing', 'shape')))
  subject = ' '.join(subject)
  motion = _pick(rng, MOTION[v['motion']]) if 'motion' in names else ''
  place = _pick(rng, PLACE[v['background']]) if 'background' in names else ''
  if generator.LAYOUT in names:  # where the scene's structure stands
    layout = _pick(rng, bank(generator.LAYOUT, widest)[v[generator.LAYOUT]])
    place = f'{place} {layout}'.strip()
  light = _pick(rng, LIGHT[v['lighting']]) if 'lighting' in names else ''
  order = rng.integers(4)
  if order == 0:
    parts = [subject, motion, place, light]
  elif order == 1:
    parts = [f'{place} {light}'.strip() + ',' if place or light else '',
             subject, motion]
  elif order == 2:
    parts = ["I'm picturing", subject, motion, place, light]
  else:
    scene = f'{place} {light}'.strip()
    parts = ([f'the scene: {scene};'] if scene else []) + [subject, motion]
  return ' '.join(p for p in parts if p).strip(' ,;')


def _banks(widest):
  return tuple(bank(name, widest) for name in (
      'shape', 'colour', 'count', 'motion', 'background', 'lighting', 'size'))


def edit_phrase(rng: np.random.Generator, attribute: int, value: int,
                widest: str = 'dev') -> str:
  """A relative edit setting ``attribute`` to ``value``, in the user's words."""
  SHAPE, COLOUR, COUNT, MOTION, PLACE, LIGHT, SIZE = _banks(widest)  # pylint: disable=invalid-name,redefined-outer-name
  name = _NAMES[attribute]
  v = generator.VALUES[name][value]
  if name == generator.LAYOUT:
    word = _pick(rng, bank(name, widest)[v])
    return _pick(rng, (f'put it {word}', f'{word} instead',
                       f'the scene should be {word}'))
  if name == 'shape':
    word = _pick(rng, SHAPE[v])[1]
    return _pick(rng, (f'turn them into {word}', f'{word} instead',
                       f'I wanted {word}', f'should be {word}'))
  if name == 'colour':
    word = _pick(rng, COLOUR[v])
    return _pick(rng, (f'make it {word}', f'I would like them {word}',
                       f'swap the colour for {word}', f'rather {word}'))
  if name == 'count':
    word = _pick(rng, COUNT[v]) + (' object' if v == 'one' else ' objects')
    return _pick(rng, (f'show {word}', f'I need {word}',
                       f'{word} instead'))
  if name == 'motion':
    word = _pick(rng, MOTION[v])
    return _pick(rng, (f'they should be {word}', f'{word} instead',
                       f'change the direction, {word}'))
  if name == 'background':
    word = _pick(rng, PLACE[v])
    return _pick(rng, (f'put it {word}', f'set it {word}',
                       f'{word} instead'))
  if name == 'lighting':
    word = _pick(rng, LIGHT[v])
    return _pick(rng, (f'show it {word}', f'{word} instead',
                       f'the light should be {word}'))
  word = _pick(rng, SIZE[v])
  return _pick(rng, (f'make them {word}', f'{word} instead',
                     f'I want them {word}'))


def edit_text(rng: np.random.Generator, attrs, named,
              widest: str = 'dev') -> str:
  """A relative edit naming ``named`` attributes' values in ``attrs``."""
  phrases = [edit_phrase(rng, int(a), int(attrs[a]), widest)
             for a in rng.permutation(np.flatnonzero(named))]
  if len(phrases) == 1:
    return phrases[0]
  return _pick(rng, (' and ', ', ', '; also ', ', plus ')).join(phrases)


def answer(rng: np.random.Generator, attrs, named,
           widest: str = 'dev') -> str:
  """An answer to a question, naming ``named`` in the user's words."""
  return _pick(rng, ('{}', 'I want {}', 'it should be {}', '{}, please',
                     'I think {}')).format(describe(rng, attrs, named,
                                                    widest))


@functools.cache
def held_out_vocabulary() -> frozenset:
  """Words of the user's bank that no lexicon phrase contains."""
  words = set()
  for table in (_SHAPES, _COLOURS, _COUNTS, _MOTIONS, _PLACES, _LIGHTS,
                _SIZES) + tuple(_TEST[name] for name in _NAMES[:7]):
    for phrases in table.values():
      for phrase in phrases:
        for p in (phrase if isinstance(phrase, tuple) else (phrase,)):
          words.update(p.replace('-', ' ').split())
  return frozenset(words - lexicon.vocabulary())
