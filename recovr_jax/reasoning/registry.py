"""The reasoner backends by name, and what a data source offers them.

A backend is one object in its own module (``Backend``): its checks before
any model loads (``problems``), the files that make a run's identity
(``inputs``) and its reasoner (``make``). It is made from its config (its
``CONFIG``: a ``ReasonerConfig``, or a subclass declared in the backend's
module whose fields are settings, ``config_tree.setting``, so their flags
follow) and a ``vocabulary.Vocabulary``, which the data source offers (the
lexicon, the grounding reader, few-shot examples, the Reflector's literal
sets, the spelling fixer), so no backend asks which source it runs on and no
caller branches on a backend's name.

Adding a backend takes its module and one line of ``REGISTRY``
(``registered`` adds one for the length of a ``with`` block, as the tests
do)::

  class _Echo(registry.Backend):
    NAME = 'echo'
    def make(self, config, vocab, encode_text=None, **kwargs):
      return EchoReasoner(vocab.rules())
  BACKEND = _Echo()
"""

import abc
import contextlib
import dataclasses
import importlib
from typing import ClassVar

from recovr_jax import config_tree
from recovr_jax.reasoning import vocabulary

# name -> 'module:attribute' of its Backend (imported when first asked for).
REGISTRY = {
    'rules': 'recovr_jax.reasoning.rules:BACKEND',
    'grounded': 'recovr_jax.reasoning.grounding:BACKEND',
    'flax_lm': 'recovr_jax.reasoning.flax_lm:BACKEND',
    'smollm2': 'recovr_jax.reasoning.chat_lm:SMOLLM2',
    'smollm2_world': 'recovr_jax.reasoning.chat_lm:SMOLLM2_WORLD',
    'grounded_smollm2': 'recovr_jax.reasoning.routed:GROUNDED_SMOLLM2',
    # An upper bound on reading (the simulator's meanings), not a reader.
    'upper_bound': 'recovr_jax.reasoning.upper_bound:BACKEND',
}
_LOADED = {}


@dataclasses.dataclass(frozen=True)
class ReasonerConfig:
  """One run's reasoner: its backend's name; a backend that reads settings
  has a subclass of its own (``Backend.CONFIG``)."""
  NAME: ClassVar[str] = 'reasoner'  # the config's kind (``--help``)
  HELP_GROUP: ClassVar[str] = 'Reasoner (docs/reasoning.md)'
  name: str = 'rules'


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(ReasonerConfig):
  """A backend that reads a model directory."""
  NAME: ClassVar[str] = 'checkpoint'
  #: flax_lm: a local Flax causal LM directory (default: the shipped one).
  #: smollm2*: a converted Llama chat directory (default: the conversion in
  #: $RECOVR_JAX_CACHE or ~/.cache/recovr_jax).
  checkpoint: str | None = config_tree.setting(None,
                                               flag='reasoner_checkpoint')


class Backend(abc.ABC):
  """One reasoner backend (subclasses set ``NAME`` and ``make``)."""
  NAME = ''
  JITTED = False    # the jitted world face reproduces its reading
  LEXICAL = False   # it reads the source's lexicon only (so: any layout)
  CONFIG: type = ReasonerConfig  # its config: the settings it reads

  def offered(self, vocab: vocabulary.Vocabulary) -> bool:
    """Whether the source of ``vocab`` can run it."""
    del vocab
    return True

  def problems(self, config: ReasonerConfig, vocab: vocabulary.Vocabulary
               ) -> list[str]:
    """What keeps ``config`` from running, before any model loads."""
    del config, vocab
    return []

  def inputs(self, config: ReasonerConfig, vocab: vocabulary.Vocabulary
             ) -> dict[str, str]:
    """Name -> path of the files that can change its numbers."""
    del config, vocab
    return {}

  @abc.abstractmethod
  def make(self, config: ReasonerConfig, vocab: vocabulary.Vocabulary,
           encode_text=None, **kwargs):
    """The reasoner (``encode_text``: the source's text encoder; ``kwargs``:
    a model backend's constructor options, e.g. ``batch_size``)."""


def names() -> tuple[str, ...]:
  """Every registered backend's name."""
  return tuple(REGISTRY)


def get(name: str) -> Backend:
  """The backend registered as ``name``; ``ValueError`` naming the valid
  ones otherwise."""
  if name not in REGISTRY:
    raise ValueError(f'unknown reasoner {name!r}; valid: {or_list(names())}')
  if name not in _LOADED:
    target = REGISTRY[name]
    if isinstance(target, Backend):
      _LOADED[name] = target
    else:
      module, attribute = target.split(':')
      _LOADED[name] = getattr(importlib.import_module(module), attribute)
  return _LOADED[name]


def offered(vocab: vocabulary.Vocabulary) -> tuple[str, ...]:
  """The backends the source of ``vocab`` offers."""
  return tuple(n for n in names() if get(n).offered(vocab))


def with_property(attribute: str) -> tuple[str, ...]:
  """The backends whose class sets ``attribute`` (e.g. 'JITTED')."""
  return tuple(n for n in names() if getattr(get(n), attribute))


def reading(setting: str) -> tuple[str, ...]:
  """The backends whose config has the field ``setting`` (e.g. 'adapter'):
  the readers a flag of that setting is for."""
  return tuple(n for n in names() if hasattr(get(n).CONFIG(), setting))


def or_list(items) -> str:
  """'a, b or c'."""
  items = list(items)
  return (', '.join(items[:-1]) + ' or ' + items[-1] if len(items) > 1
          else ''.join(items))


def check_names(backends, flag: str = '--backends') -> None:
  """``ValueError`` naming the first of ``backends`` that is not registered
  or is listed twice."""
  for i, b in enumerate(backends):
    if b not in REGISTRY:
      raise ValueError(f'{flag}: unknown backend {b!r}; valid: '
                       f'{", ".join(names())}')
    if b in backends[:i]:
      raise ValueError(f'{flag} lists {b!r} twice')


def problems(config: ReasonerConfig, vocab: vocabulary.Vocabulary) -> list[str]:
  """Whether ``config`` runs on the source of ``vocab``, then its backend's
  own checks."""
  backend = get(config.name)
  if not backend.offered(vocab):
    return [f'--reasoner={config.name} is not offered on '
            f'--data={vocab.data}; valid there: '
            f'{", ".join(offered(vocab))}']
  if vocab.lexical_only and not backend.LEXICAL:
    return [f'{vocab.lexical_only} with --reasoner='
            f'{or_list(with_property("LEXICAL"))} only (got '
            f'{config.name!r}: its reader knows no such words)']
  return backend.problems(config, vocab)


def config_of(name: str, like: ReasonerConfig | None = None,
              **settings) -> ReasonerConfig:
  """The config of backend ``name`` (``ValueError`` naming the valid ones
  when unknown): ``settings`` (its fields) as given, the others as in
  ``like`` (another backend's config) where it has them, else defaulted."""
  config_type = get(name).CONFIG
  for field in dataclasses.fields(config_type):
    if field.name != 'name' and field.name not in settings and hasattr(
        like, field.name):
      settings[field.name] = getattr(like, field.name)
  return config_type(name=name, **settings)


def make(config: ReasonerConfig, vocab: vocabulary.Vocabulary, encode_text=None,
         **kwargs):
  """The reasoner of ``config`` on the source of ``vocab``."""
  return get(config.name).make(config, vocab, encode_text, **kwargs)


@contextlib.contextmanager
def registered(backend: Backend):
  """``backend`` registered under its ``NAME`` inside the block."""
  if backend.NAME in REGISTRY:
    raise ValueError(f'a reasoner named {backend.NAME!r} is registered')
  REGISTRY[backend.NAME] = backend
  try:
    yield backend
  finally:
    del REGISTRY[backend.NAME]
    _LOADED.pop(backend.NAME, None)
