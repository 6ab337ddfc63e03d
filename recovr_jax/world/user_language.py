"""The simulated user's own words (``UserConfig.language='own'``).

The user's phrase bank holds the world's caption words (which the rules
reasoner's lexicon knows) and as many held-out paraphrases, templates and
word orders that the lexicon and its spelling fixer have never seen
("cobalt", "plunging", "in a meadow", "by moonlight", "the scene: ...").
Every phrase is drawn uniformly from the bank, so a description naming
several attributes is rarely read back exactly; what a reasoner makes of the
rest (a wrong spelling fix, a missed mention) is its real error.
``held_out_vocabulary`` lists the words no lexicon phrase contains.
"""

import functools

import numpy as np

from recovr_jax.world import generator as world_lib
from recovr_jax.world import lexicon

A = world_lib.ATTRIBUTES

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


def _bank(known, held_out):
  return {v: tuple(known[v]) + tuple(held_out[v]) for v in known}


SHAPE = _bank(world_lib.SHAPE_WORDS, _SHAPES)
COLOUR = _bank(world_lib.COLOUR_WORDS, _COLOURS)
COUNT = _bank(world_lib.COUNT_WORDS, _COUNTS)
MOTION = _bank(world_lib.MOTION_WORDS, _MOTIONS)
PLACE = _bank(world_lib.BACKGROUND_WORDS, _PLACES)
LIGHT = _bank(world_lib.LIGHTING_WORDS, _LIGHTS)
SIZE = _bank(world_lib.SIZE_WORDS, _SIZES)


def _pick(rng, options):
  return options[rng.integers(len(options))]


def _value(attribute: int, attrs) -> str:
  return world_lib.VALUES[A[attribute]][int(attrs[attribute])]


def describe(rng: np.random.Generator, attrs, subset) -> str:
  """A description of ``attrs`` naming the attributes in ``subset``, in the
  user's words and one of the user's word orders."""
  names = {A[a] for a in subset}
  v = {A[a]: _value(a, attrs) for a in range(len(A))}
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


def edit_phrase(rng: np.random.Generator, attribute: int, value: int) -> str:
  """A relative edit setting ``attribute`` to ``value``, in the user's words."""
  name = A[attribute]
  v = world_lib.VALUES[name][value]
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


def edit_text(rng: np.random.Generator, attrs, named) -> str:
  """A relative edit naming ``named`` attributes' values in ``attrs``."""
  phrases = [edit_phrase(rng, int(a), int(attrs[a]))
             for a in rng.permutation(np.flatnonzero(named))]
  if len(phrases) == 1:
    return phrases[0]
  return _pick(rng, (' and ', ', ', '; also ', ', plus ')).join(phrases)


def answer(rng: np.random.Generator, attrs, named) -> str:
  """An answer to a question, naming ``named`` in the user's words."""
  return _pick(rng, ('{}', 'I want {}', 'it should be {}', '{}, please',
                     'I think {}')).format(describe(rng, attrs, named))


@functools.cache
def held_out_vocabulary() -> frozenset:
  """Words of the user's bank that no lexicon phrase contains."""
  words = set()
  for table in (_SHAPES, _COLOURS, _COUNTS, _MOTIONS, _PLACES, _LIGHTS,
                _SIZES):
    for phrases in table.values():
      for phrase in phrases:
        for p in (phrase if isinstance(phrase, tuple) else (phrase,)):
          words.update(p.replace('-', ' ').split())
  return frozenset(words - lexicon.vocabulary())
