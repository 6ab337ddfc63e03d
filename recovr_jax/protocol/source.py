"""A data source: what a run needs from the generated world or real files.

The runner asks its source and never tests which one it is (big_vision's
``DataSource``, looked up by name, is the model). A source is made from its
own typed config (``RunConfig.data``: ``world.source.WorldData`` or
``real.source.RealData``) and answers for

* the run's input checks (``problems``, before anything loads) and the
  files whose contents make the run's identity (``input_paths``);
* the queries, Progress Memory and encoders (``build`` ->
  ``host.Environment``), and what to keep after a run (``save_caches``);
* the simulated user, and what it offers the reasoner backends
  (``user``, ``vocabulary``: ``reasoning.registry.Vocabulary``; the
  registry makes the reasoner of ``run.reasoner`` over it);
* the study's videos (``frames``), what a run's outputs add
  (``extra_outputs``) and the captions of its T2V ceiling
  (``target_captions``).

``run`` below is the run's ``experiment.config.RunConfig``; the protocol
reads only its generic fields (reasoner, user, seeds, cache directory).
"""

import abc
from collections.abc import Callable
import dataclasses

import numpy as np

from recovr_jax.protocol import host
from recovr_jax.reasoning import registry


@dataclasses.dataclass(frozen=True)
class AskTruth:
  """What a source knows about its sessions for scoring when and what a
  method asks (``experiment.asking``); never given to a method."""
  attributes: np.ndarray            # [N, A] int, every gallery video
  query_named: np.ndarray           # [Q, A] bool, named by the modification
  user: Callable                    # (session, turn, target, shown, question)
                                    # -> Feedback with .mentioned {attr: value}
  question_attribute: Callable      # question text -> attribute index | None
  attribute_names: tuple[str, ...]  # [A] names, as the jitted records them
  question_about: Callable          # attribute index -> a question the
                                    # user reads as being about it


class SourceError(ValueError):
  """Inputs of a source that cannot be read; the message names the file,
  row or column and what was expected."""


@dataclasses.dataclass(frozen=True)
class Built:
  """A source's environment with what runs on it (a sweep's runs share it)."""
  env: host.Environment
  sim_env: object = None   # its protocol.jitted.Environment, jit runs only
  extra: object = None     # the source's own (e.g. the generated world)
  source: object = None    # the Source that built it (set by the runner)


class Source(abc.ABC):
  """One data source of a run; subclasses set ``NAME`` and offer the
  reasoners a ``vocabulary``."""

  NAME: str = ''
  # The jitted driver (--simulation=jit) can run on it.
  JITTED: bool = False
  # It renders its own study media (no --frames_dir).
  OWN_MEDIA: bool = False
  # Files ``extra_outputs`` may write (a fresh run removes them).
  OUTPUT_FILES: tuple[str, ...] = ()

  def __init__(self, config):
    self.config = config   # the source's own typed config

  def default_reasoner(self) -> str:
    """The backend a run uses when it names none."""
    return 'rules'

  @abc.abstractmethod
  def problems(self, run, create: bool) -> list[str]:
    """Every problem of the source's settings, a line each, found before any
    model loads (``create``: the run will write, so caches may be made)."""

  @abc.abstractmethod
  def input_paths(self, run) -> dict[str, str]:
    """Name -> path of every file or directory the source reads that can
    change a run's numbers (defaults resolved)."""

  @abc.abstractmethod
  def build(self, run) -> Built:
    """Loads the queries, Progress Memory and encoders (the expensive
    part); ``SourceError`` for inputs that cannot be read."""

  @abc.abstractmethod
  def user(self, run, env: host.Environment):
    """The host driver's user function
    ``respond(session, turn, target, shown, question) -> Feedback``."""

  @abc.abstractmethod
  def vocabulary(self, run) -> registry.Vocabulary:
    """What this source offers the reasoner backends (its lexicon-only
    reasoner, grounding, examples...); cheap: the parts load when used."""

  def reasoner(self, run, env: host.Environment):
    """The reasoner of ``run.reasoner`` on this source."""
    return registry.make(run.reasoner_config(), self.vocabulary(run),
                         env.encode_text)

  def target_captions(self, built: Built) -> dict[str, tuple[str, ...]]:
    """Kind -> ``[N]`` captions of the gallery's videos whose T2V search,
    given the target's caption, is the run's T2V ceiling (a diagnostic
    beside the results; no method reads it)."""
    return {'gallery caption': tuple(built.env.captions)}

  def save_caches(self, built: Built) -> None:
    """Keeps what a later run can reuse (e.g. text embeddings)."""
    del built

  def frames(self, built: Built):
    """``frames_of(index) -> [F, H, W, 3]`` of the gallery's videos when
    the source renders them itself (``OWN_MEDIA``; the study shows them),
    else None."""
    del built
    return None

  def jitted_environment(self, built: Built):
    """The ``protocol.jitted.Environment`` of ``built``. A source without
    a jitted face (``JITTED`` False; the runner refuses --simulation=jit on
    it first) says so."""
    raise SourceError(f'--data={self.NAME} has no jitted face; use '
                      '--simulation=host')

  def run_jitted(self, run, built: Built, method, sessions, loop, user, ctx,
                 log=None, mesh=None) -> host.BatchResult:
    """``method`` on ``sessions`` in the jitted driver (``loop``: the
    run's ``ranking.LoopConfig``; ``user`` and ``ctx``: the host driver's
    user and context, whose reasoner's reading of the user's words the face
    reproduces)."""
    raise SourceError(f'--data={self.NAME} has no jitted face; use '
                      '--simulation=host')

  def jit_problems(self, run) -> list[str]:
    """What --simulation=jit cannot run on this source (a line each)."""
    del run
    return []

  def ask_truth(self, built: Built, user):
    """``AskTruth`` for scoring when and what the methods
    ask (``user``: the run's user, replayed), or None when the source
    does not know its targets' attributes."""
    del built, user
    return None

  def extra_outputs(self, built: Built) -> dict[str, tuple[dict, str]]:
    """File name -> (JSON content, printed line) that a finished run adds
    for ``built`` and the user ``user()`` made (e.g. how often a phrasing
    model fell back, how many texts the encoder truncated)."""
    del built
    return {}
