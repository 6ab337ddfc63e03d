"""A data source: what a run needs from the generated world or real files.

The runner asks its source and never tests which one it is (big_vision's
``DataSource``, looked up by name, is the model). A source is made from its
own typed config (``RunConfig.data``: ``envs.world.world_source.WorldData`` or
``envs.files.files_source.FilesData``) and answers for

* the run's input checks (``problems``, before anything loads) and the
  files whose contents make the run's identity (``input_paths``);
* the queries, Progress Memory and encoders (``build`` ->
  ``environment.Environment``), and what to keep after a run (``save_caches``);
* the simulated user, and what it offers the reasoner backends
  (``user``, ``vocabulary``: ``reasoning.vocabulary.Vocabulary``; the
  assembly, ``run.assemble``, has the reasoners' registry make the run's
  reasoner over it);
* the captions of its T2V ceiling (``target_captions``).

Optional capabilities are their own interfaces, tested with
``isinstance``: ``TracedFace`` (the user and the reading of its words run
inside ``jit``; the jitted driver runs on it, ``drivers.jit_driver``),
``OwnMedia`` (the source renders the study's videos itself),
``ScoresAsking`` (it knows the targets' attributes, so asking is scored)
and ``ExtraOutputs`` (its runs write files of their own).

Besides its own config, a method receives what it reads of the run: the
simulated user's config (``user``, the world's ``UserConfig`` on every
source), the user's seed, ``--num_sessions`` and ``--cache_dir``.
"""

import abc
from collections.abc import Callable
import dataclasses

import numpy as np

from recovr_jax.protocol import environment
from recovr_jax.protocol import traced
from recovr_jax.reasoning import vocabulary


@dataclasses.dataclass(frozen=True)
class AskTruth:
  """What a source knows about its sessions for scoring when and what a
  method asks (``run.ask_scores``); never given to a method."""
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


class MissingWeights(FileNotFoundError):
  """A model copied without its weights (a run's archive) asked for what
  its cache lacks; the runner refuses the run in a line, naming the flag
  that gives the weights."""


@dataclasses.dataclass(frozen=True)
class Built:
  """A source's environment with what runs on it (a sweep's runs share it)."""
  env: environment.Environment
  jit_env: object = None   # a traced face's traced.Environment
                           # (drivers.jit_driver.Traced.prepare)
  extra: object = None     # the source's own (e.g. the generated world)
  source: object = None    # the Source that built it (run.assemble.build)


class Source(abc.ABC):
  """One data source of a run; subclasses set ``NAME`` and offer the
  reasoners a ``vocabulary``."""

  NAME: str = ''

  def __init__(self, config):
    self.config = config   # the source's own typed config

  def default_reasoner(self) -> str:
    """The backend a run uses when it names none."""
    return 'rules'

  @abc.abstractmethod
  def problems(self, create: bool, num_sessions: int | None) -> list[str]:
    """Every problem of the source's settings, a line each, found before any
    model loads (``create``: the run will write, so caches may be made;
    ``num_sessions``: the sessions asked for, None for all)."""

  @abc.abstractmethod
  def input_paths(self) -> dict[str, str]:
    """Name -> path of every file or directory the source reads that can
    change a run's numbers (defaults resolved)."""

  @abc.abstractmethod
  def build(self, cache_dir: str | None,
            num_sessions: int | None = None) -> Built:
    """Loads the queries, Progress Memory and encoders (the expensive
    part; the user's words, in the source's config, may write a first
    query; ``cache_dir``: where earlier runs' embeddings are kept;
    ``num_sessions``: the sessions the run uses, None for all, so a
    source that repeats its queries makes no more than those);
    ``SourceError`` for inputs that cannot be read."""

  def build_reads(self):
    """What ``build`` reads of the source's config (hashable): runs whose
    sources agree on it share one build, as a sweep's members do. By
    default all of it but the user's config (``config.user``)."""
    return dataclasses.replace(self.config, user=None)

  @abc.abstractmethod
  def user(self, env: environment.Environment, seed: int):
    """The host driver's user function
    ``respond(session, turn, target, shown, question) -> Feedback`` of
    the user config in the source's config, its draws seeded by ``seed``."""

  @abc.abstractmethod
  def vocabulary(self, cache_dir: str | None) -> vocabulary.Vocabulary:
    """What this source offers the reasoner backends (its lexicon-only
    reasoner, grounding, examples...) for its user; cheap: the parts load
    when used (into ``cache_dir``)."""

  def target_captions(self, built: Built) -> dict[str, tuple[str, ...]]:
    """Kind -> ``[N]`` captions of the gallery's videos whose T2V search,
    given the target's caption, is the run's T2V ceiling (a diagnostic
    beside the results; no method reads it)."""
    return {'gallery caption': tuple(built.env.captions)}

  def save_caches(self, built: Built) -> None:
    """Keeps what a later run can reuse (e.g. text embeddings)."""
    del built


class TracedFace(abc.ABC):
  """A source whose user, and the reasoner's reading of its words, have a
  pure-JAX face: the jitted driver (``drivers.jit_driver.Traced``)
  runs whole sessions inside ``jit`` on it."""

  @abc.abstractmethod
  def traced_environment(self, built: Built):
    """The ``traced.Environment`` of ``built`` (once per build)."""

  @abc.abstractmethod
  def traced_face(self, built: Built, form, num_turns: int,
                  reading: traced.Reading) -> traced.Face:
    """The face a method's jitted form ``form`` runs on for ``num_turns``
    feedback turns: the source's user settings and ``reading`` (how the
    reasoner reads the user's words) reproduced."""

  @abc.abstractmethod
  def traced_result(self, built: Built, config: traced.JitConfig,
                    reading: traced.Reading, seed: int, sessions
                    ) -> Callable:
    """Makes the tables ``config``'s face reads with ``reading`` (the
    user's draws seeded by ``seed``) and returns the function from a
    batch's ``traced.JitTrace`` on ``sessions`` to its
    ``environment.BatchResult``."""

  def traced_problems(self) -> list[str]:
    """What the traced face cannot run of this source's settings (a line
    each)."""
    return []


class OwnMedia(abc.ABC):
  """A source that renders its gallery's videos (the study shows them; no
  --frames_dir)."""

  @abc.abstractmethod
  def frames(self, built: Built) -> Callable:
    """``frames_of(index) -> [F, H, W, 3]`` of the gallery's videos."""


class ScoresAsking(abc.ABC):
  """A source that knows its targets' attributes, so the runner scores
  when and what the methods ask (``run.ask_scores``)."""

  @abc.abstractmethod
  def ask_truth(self, built: Built, user) -> AskTruth:
    """``AskTruth`` of ``built`` (``user``: the run's user, replayed)."""


class ExtraOutputs(abc.ABC):
  """A source whose runs write files of their own beside the outputs."""

  # Files ``extra_outputs`` may write (a fresh run removes them).
  OUTPUT_FILES: tuple[str, ...] = ()

  @abc.abstractmethod
  def extra_outputs(self, built: Built,
                    user) -> dict[str, tuple[dict, str]]:
    """File name -> (JSON content, printed line) that a finished run adds
    for ``built`` and its user ``user`` (e.g. how often a phrasing model
    fell back, how many texts the encoder truncated)."""
