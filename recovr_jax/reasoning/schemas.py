"""The reasoning modules' schemas (docs/definitions.md §1).

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

Backends (``reasoning.rules``, ``reasoning.flax_lm``) take a batch of requests
(one per session) and return one object per request; every backend's
``call(module, requests) -> Outputs`` also says which outputs were valid on a
model's first pass (``None`` for a deterministic backend).
"""

import dataclasses

MODULES = ('intent', 'reflect', 'question', 't2v_init')
SIGMAS = ('neg', 'neu', 'pos')
NEGATIVE_MARKERS = ('no ', 'no.', 'wrong', 'not it', "not what", 'not this',
                     'try again')


@dataclasses.dataclass(frozen=True)
class SessionMemory:
  """Progress Memory, short-term part: one session's constraints, written
  only by the State Reflector (``'attribute: value'`` strings, or free text
  where no attributes apply). ``keep``: values the target has (they enter
  the next T2V query); ``avoid``: values it does not have (candidates whose
  caption states one are penalised). Empty with reflection off."""
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
  # The system's question shown with the list this feedback answers (None:
  # none was asked): an answer to it is neither a rejection nor an edit.
  question: str | None = None


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


def update_memory(reflection: dict) -> SessionMemory:
  """The next turn's short-term memory: the Reflector's constraints."""
  return SessionMemory(keep=tuple(reflection['keep']),
                       avoid=tuple(reflection['avoid']))


@dataclasses.dataclass(frozen=True)
class Outputs:
  """A backend's answer to a batch of requests of one module."""
  objects: list          # [B] dicts following the module's schema
  first_pass: list | None = None  # [B] bool, a model's first-pass validity

