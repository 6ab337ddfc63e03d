"""The reasoning modules and their backends (DESIGN section 1).

Each module reads text and writes a small JSON object with a fixed schema;
none scores videos or sees the target:

* Intent Decomposer -> ``{"search": str, "edit": str}``: a standalone target
  description for the T2V channel and the change to the shown video for the
  CoVR channel (either may be empty);
* State Reflector -> ``{"sigma": "neg"|"neu"|"pos", "keep": [str],
  "avoid": [str]}``;
* Question Asker -> ``{"question": str}``;
* T2V initializer -> ``{"search": str}`` from the reference caption and the
  modification text.

Backends take a batch of requests (one per session) and return one object
per request. ``RulesReasoner`` is deterministic and driven by the world's
lexicon; it is the offline default and the fallback of every other backend.
"""

import collections
import dataclasses
import math
import pathlib

from recovr_jax import lexicon

MODULES = ('intent', 'reflect', 'question', 't2v_init')
SIGMAS = ('neg', 'neu', 'pos')
_NEGATIVE_MARKERS = ('no ', 'no.', 'wrong', 'not it', "not what", 'not this',
                     'try again')


@dataclasses.dataclass(frozen=True)
class SessionMemory:
  """Progress Memory, short-term part: one session's running query and
  accumulated constraints (``'attribute: value'`` strings)."""
  search: str = ''
  keep: tuple[str, ...] = ()
  avoid: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class IntentRequest:
  feedback: str
  shown_caption: str
  memory: SessionMemory


@dataclasses.dataclass(frozen=True)
class ReflectRequest:
  feedback: str
  shown_caption: str
  memory: SessionMemory


@dataclasses.dataclass(frozen=True)
class QuestionRequest:
  candidate_captions: tuple[str, ...]  # captions of the current top results
  memory: SessionMemory


@dataclasses.dataclass(frozen=True)
class T2VInitRequest:
  reference_caption: str
  modification: str


class SchemaError(ValueError):
  """An output that does not follow its module's schema."""


def validate(module: str, obj) -> dict:
  """Returns ``obj`` if it follows ``module``'s schema, else raises."""
  if not isinstance(obj, dict):
    raise SchemaError(f'{module}: expected a JSON object, got {type(obj)}')
  fields = {'intent': {'search': str, 'edit': str},
            'reflect': {'sigma': str, 'keep': list, 'avoid': list},
            'question': {'question': str},
            't2v_init': {'search': str}}[module]
  if set(obj) != set(fields):
    raise SchemaError(f'{module}: expected keys {sorted(fields)}, got '
                      f'{sorted(obj)}')
  for key, kind in fields.items():
    if not isinstance(obj[key], kind):
      raise SchemaError(f'{module}: {key!r} must be {kind.__name__}')
  if module == 'reflect':
    if obj['sigma'] not in SIGMAS:
      raise SchemaError(f'reflect: sigma must be one of {SIGMAS}, got '
                        f'{obj["sigma"]!r}')
    for key in ('keep', 'avoid'):
      if not all(isinstance(x, str) for x in obj[key]):
        raise SchemaError(f'reflect: {key!r} must be a list of strings')
  if module == 'question' and not obj['question'].strip():
    raise SchemaError('question: empty question')
  return obj


def update_memory(memory: SessionMemory, intent: dict,
                  reflection: dict) -> SessionMemory:
  """The next turn's short-term memory from this turn's module outputs."""
  return SessionMemory(search=intent['search'] or memory.search,
                       keep=tuple(reflection['keep']),
                       avoid=tuple(reflection['avoid']))


def _constraints(items) -> dict[int, int]:
  out = {}
  for item in items:
    parsed = lexicon.parse_constraint(item)
    if parsed is not None:
      out[parsed[0]] = parsed[1]
  return out


class RulesReasoner:
  """Deterministic reasoning over the world's lexicon.

  With ``free_text=True`` (real data, where the lexicon knows few words),
  feedback that names no known attribute is used verbatim as both the search
  and the edit.
  """

  name = 'rules'

  def __init__(self, free_text: bool = False):
    self.free_text = free_text

  def intent(self, requests) -> list[dict]:
    out = []
    for r in requests:
      mentions = lexicon.parse(r.feedback)
      shown = lexicon.parse(r.shown_caption)
      # The running query, then the accumulated constraints, then what the
      # user just said: later sources win.
      wanted = lexicon.parse(r.memory.search)
      wanted.update(_constraints(r.memory.keep))
      wanted.update(mentions)
      search = lexicon.canonical_description(wanted) if wanted else (
          r.memory.search)
      changes = {a: v for a, v in mentions.items() if shown.get(a) != v}
      if self.free_text and not mentions and r.feedback.strip():
        out.append({'search': r.feedback.strip(), 'edit': r.feedback.strip()})
        continue
      out.append({'search': search, 'edit': lexicon.canonical_edit(changes)})
    return out

  def reflect(self, requests) -> list[dict]:
    out = []
    for r in requests:
      mentions = lexicon.parse(r.feedback)
      shown = lexicon.parse(r.shown_caption)
      changes = {a: v for a, v in mentions.items() if shown.get(a) != v}
      text = ' ' + r.feedback.lower() + ' '
      negative = any(m in text for m in _NEGATIVE_MARKERS)
      if not mentions or negative or len(changes) >= 3:
        sigma = 'neg'
      elif len(changes) <= 1:
        sigma = 'pos'
      else:
        sigma = 'neu'
      keep = _constraints(r.memory.keep)
      keep.update(mentions)
      avoid = _constraints(r.memory.avoid)
      avoid_items = [lexicon.constraint(a, v) for a, v in avoid.items()
                     if keep.get(a) != v]
      for a in changes:
        if a in shown:
          item = lexicon.constraint(a, shown[a])
          if item not in avoid_items:
            avoid_items.append(item)
      out.append({'sigma': sigma,
                  'keep': [lexicon.constraint(a, v)
                           for a, v in sorted(keep.items())],
                  'avoid': avoid_items})
    return out

  def question(self, requests) -> list[dict]:
    """Asks about the attribute most uncertain among the top candidates
    (highest entropy of its values), skipping attributes already kept."""
    out = []
    for r in requests:
      fixed = _constraints(r.memory.keep)
      counts = collections.defaultdict(collections.Counter)
      for caption in r.candidate_captions:
        for a, v in lexicon.parse(caption).items():
          counts[a][v] += 1
      best, best_h = None, -1.0
      for a in range(len(lexicon.A)):
        if a in fixed:
          continue
        total = sum(counts[a].values())
        h = 0.0 if not total else -sum(
            c / total * math.log(c / total) for c in counts[a].values())
        if h > best_h:
          best, best_h = a, h
      if best is None:
        best = 0
      out.append({'question': lexicon.QUESTIONS[lexicon.A[best]][0]})
    return out

  def t2v_init(self, requests) -> list[dict]:
    out = []
    for r in requests:
      wanted = lexicon.parse(r.reference_caption)
      wanted.update(lexicon.parse(r.modification))
      out.append({'search': lexicon.canonical_description(wanted)
                  if wanted else (r.reference_caption + ' ' +
                                  r.modification).strip()})
    return out


BACKENDS = ('rules', 'flax_lm')
DEFAULT_REASONER_DIR = str(pathlib.Path(__file__).parent / 'checkpoints' /
                           'reasoner')


def make_reasoner(backend: str, checkpoint: str | None = None, **kwargs):
  """The reasoner of a backend name.

  ``flax_lm`` loads ``checkpoint`` (default: the shipped world reasoner); a
  checkpoint trained by ``experiments.train_reasoner`` gets the lexicon's
  spelling fixer in front of the model, as in its training.
  """
  if backend == 'rules':
    return RulesReasoner()
  if backend == 'flax_lm':
    import json  # pylint: disable=g-import-not-at-top
    from recovr_jax import flax_lm  # pylint: disable=g-import-not-at-top
    from recovr_jax import reasoner_training  # pylint: disable=g-import-not-at-top
    directory = pathlib.Path(checkpoint or DEFAULT_REASONER_DIR)
    marker = directory / reasoner_training.MARKER
    if marker.is_file() and json.loads(marker.read_text()).get(
        'spelling_fixer'):
      kwargs.setdefault('preprocess', reasoner_training.preprocess)
    return flax_lm.FlaxLMReasoner(str(directory), **kwargs)
  raise ValueError(f'unknown reasoner {backend!r}; valid choices: '
                   f'{", ".join(BACKENDS)}')
