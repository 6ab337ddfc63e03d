"""The jitted drivers' interfaces: what a data source's traced face and a
method's ``jax_form`` give them, and what a jitted run gives back.

A data source with a pure-JAX face offers an ``Environment`` on the host
(its arrays, its composer and the tables of a run, filled by a ``Filler``
between a turn's stages) and a ``Face`` under ``jit`` (the user, the text codes and the table
lookups); a ``JitConfig`` names the face, the method's form and the loop's
settings; ``JitTrace`` is a batch's run. The loop that runs them is
``drivers.jit_loop``, the turn-by-turn runner ``drivers.jit_runner``; the
world's face (``envs.world.face.traced_face``) implements these.
"""

import dataclasses
from typing import Callable, ClassVar, Protocol

import jax
import numpy as np

from recovr_jax import config_pytree
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking


class Unsupported(ValueError):
  """A setting the jitted driver cannot run; ``flag`` names what to change."""

  def __init__(self, flag: str, message: str):
    super().__init__(message)
    self.flag = flag


def check_supported(method):
  """Raises ``Unsupported`` naming what the jitted mode cannot run."""
  if method.jax_form is None:
    raise Unsupported('--methods', (
        f'method {method.name!r} runs only in the host loop (it has no '
        'jax_form)'))


class Face(Protocol):
  """A data source's pure-JAX face: static (hashable) settings and pure
  functions of ``JaxData`` and the run's tables, traced per session.
  ``start``: turn 0 (what the method reads, and the face's per-session
  state); ``code``: a ``[A]`` partial assignment's text code (0: the empty
  text); ``key``: a channel text's table key; ``text``: its encoding
  (anything while absent: the host adds the keys a turn's ``decide`` stage
  asks for before the turn is ranked, ``drivers.jit_loop``).

  The user at a feedback turn comes in two parts, with the host's work
  between them (``question``: the attribute the user reads in the
  question shown, -1 none):

  * ``hear``: what the user decided, ``heard`` (a pytree the turn's next
    stage reads), and ``asks`` (a dict of arrays, copied to the host for
    ``Filler.heard``): what the host must write, parse or encode before
    the decision is read;
  * ``read``: the observation a method reads (``JaxObservation``, its
    ``info`` of type ``OBSERVATION``), the face's new state and its own
    record outputs, from the tables the host has filled.

  ``record``: a turn's record outputs, ``stopped()`` a stopped turn's."""
  OBSERVATION: ClassVar[type]

  def start(self, data, tables, query) -> tuple[plan.JaxStart,
                                                 object]: ...
  def code(self, assignment) -> jax.Array: ...
  def key(self, code, channel: int) -> jax.Array: ...
  def text(self, tables, key) -> jax.Array: ...
  def hear(self, data, tables, seed_key, query, turn, state, top1,
           question) -> tuple[object, dict]: ...
  def read(self, data, tables, query, heard, state, top1,
           question) -> tuple[plan.JaxObservation, object, dict]: ...
  def record(self, outputs: dict, active) -> dict: ...
  def stopped(self) -> dict: ...


class Filler(Protocol):
  """The tables of one run, filled between a turn's stages
  (``drivers.jit_runner.run``). Each hook gets NumPy arrays ``[S, ...]``
  of the turn at hand (a session that has stopped: ``active`` false) and
  returns what it added, for the log ('' nothing)."""

  # Whether the host reads each turn's lists (``shown``): one copy of the
  # turn's outputs to the host per turn.
  READS_LISTS: ClassVar[bool] = False

  def arrays(self):
    """The tables as they are now (a pytree; the faces read them)."""

  def heard(self, turn: int, active: np.ndarray, asks: dict) -> str:
    """Feedback turn ``turn``'s users decided (``Face.hear``'s ``asks``):
    adds what their reading needs and the tables lack."""

  def planned(self, turn: int, active: np.ndarray,
              needed: np.ndarray) -> str:
    """Turn ``turn`` was planned: adds the table keys ``needed`` ``[S,
    2]`` (0: none) its ranking reads and the tables lack."""

  def shown(self, turn: int, outs: dict) -> None:
    """Turn ``turn`` was ranked (``outs``: its outputs, on the host; turn
    0's are ``shown``, ``scores`` and ``needed``); called only when
    ``READS_LISTS``."""


class Environment(Protocol):
  """A data source's jitted face on the host: ``data``, ``composer`` (a
  flax Module applied to ``composer_params``, or 'sum') and the tables of
  a run (``filler``)."""
  data: plan.JaxData
  composer: object
  composer_params: object

  def filler(self, config, seed: int, num_sessions: int,
             run_sessions: int | None = None) -> Filler:
    """The tables of a batch of ``num_sessions``; ``run_sessions``: the
    whole run's (default: the batch's), which tables kept across batches
    are sized for."""


@dataclasses.dataclass(frozen=True)
class Reading:
  """How the run's reasoner reads the user's words, for a traced face that
  reproduces it (the jitted driver makes it from the run's reasoner)."""
  key: str            # names the reader (a face keeps its tables per key)
  lexical: bool = True   # it reads the source's lexicon alone
  sigma: str = 'rules'   # its Reflector's rule (``JaxForm.sigma_rule``)
  # words -> the values it reads (what the face tabulates for a reader
  # that is not lexical), and words -> its label of the user's decision
  # (an index, for a reader with one); None: none.
  parse: Callable | None = None
  label: Callable | None = None
  # What makes its reading what it is beyond its code (its config and any
  # fit): part of the key a face keeps its word tables under between runs.
  identity: str = ''


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class JitConfig:
  """Static settings of a jitted run (hashable)."""
  loop: ranking.LoopConfig
  face: Face                # the source's face with its settings
  form: plan.JaxForm    # the method's ``jax_form`` (hashable)
  # A flax Module applied to composer_params, 'sum', or 'given' (the edit
  # embedding is the composed query itself: a source that tabulates the
  # host method's queries, ``drivers.stepped``).
  composer: object = 'sum'

  def __post_init__(self):
    gives, reads = self.face.OBSERVATION, self.form.READS
    if not issubclass(gives, reads):
      raise Unsupported('--methods', (
          f'the method\'s jitted form ({type(self.form).__name__}) reads '
          f'{reads.__name__} observations; this source\'s face gives '
          f'{gives.__name__}'))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JitTrace:
  """A batch's run; per-turn fields are for turns 1..T, and stopped
  sessions' turns hold action stop, sigma neu and code 0."""
  displayed: jax.Array   # [S, T+1, K] int32 shown lists
  top_scores: jax.Array  # [S, T+1] float32
  active: jax.Array      # [S, T] bool, the user had not stopped
  action: jax.Array      # [S, T] int32 index into plan.ACTIONS
  sigma: jax.Array       # [S, T] int32
  search: jax.Array      # [S, T] int32 the T2V text's code
  edit: jax.Array        # [S, T] int32 the edit's code (0: empty)
  needed: jax.Array      # [S, T+1, 2] int32 table keys used (0: none)
  fired: jax.Array       # [S, T] bool rank-cap changed the list it capped
  asked: jax.Array       # [S, T] int32 attribute of the question answered
  questions: jax.Array   # [S, T] int32 questions asked so far, the one
                         # shown with turn t's list included
  own: dict              # the face's record outputs, each [S, T, ...]
  scores: jax.Array      # [S, T+1, K] float32 scores of the shown lists
             # the face's record outputs, each [S, T, ...]
