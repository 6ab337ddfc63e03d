"""What crosses the boundary between the protocol and a method.

A method sees an ``Observation`` (what the paper's system may see at a turn:
the feedback, the shown video and its caption, the user's action; never the
target) and returns a ``TurnPlan`` (the channel queries, which channels are
valid, sigma, and per-session record fields). Both are batched over the
sessions of a batch that are still searching; ``sessions`` says which rows of
the batch they are.

Channels: ``T2V`` (index 0) and ``COVR`` (index 1), docs/definitions.md §1.
"""

import abc
import dataclasses
from typing import ClassVar
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import demotion

T2V, COVR = 0, 1
# The user's decisions (a simulated user's and a participant's), and their
# indices in jitted traces.
ACTIONS = ('stop', 'modify', 'rewrite', 'answer')
STOP, MODIFY, REWRITE, ANSWER = range(4)  # indices into ACTIONS
NUM_CHANNELS = 2
SIGMA = {'neg': demotion.SIGMA_NEG, 'neu': demotion.SIGMA_NEU,
         'pos': demotion.SIGMA_POS}


@dataclasses.dataclass(frozen=True)
class Context:
  """What a host method may read besides its observation: Progress Memory
  (long-term part: the gallery's embeddings and captions), the encoders and
  the reasoning backend. Never the targets."""
  gallery: np.ndarray                                   # [N, D] float32
  captions: tuple[str, ...]                             # [N]
  encode_text: Callable[[Sequence[str]], np.ndarray]    # -> [B, D]
  compose: Callable[[np.ndarray, np.ndarray], np.ndarray]  # [B, D]^2 -> [B, D]
  reasoner: object                                      # a reasoning backend


@dataclasses.dataclass(frozen=True)
class Start:
  """Turn 0 of a batch of ``S`` sessions: the composed queries."""
  reference: np.ndarray             # [S] int gallery ids of v_ref
  modification: tuple[str, ...]     # [S] modification texts
  covr_query: np.ndarray            # [S, D] compose(v_ref, modification),
                                    # the query every method shows at turn 0


@dataclasses.dataclass(frozen=True)
class Observation:
  """A feedback turn of the ``B`` sessions of a batch still searching."""
  sessions: np.ndarray              # [B] int rows of the batch
  feedback: tuple[str, ...]         # [B] what the user said
  action: tuple[str, ...]           # [B] the user's action (paper A.2:
                                    # the rank-cap transplants' sigma)
  shown: np.ndarray                 # [B] int gallery id of the shown top-1
  shown_caption: tuple[str, ...]    # [B] its caption in Progress Memory
  # [B] the question shown with that list (None: none); () when unknown.
  question: tuple = ()


@dataclasses.dataclass(frozen=True)
class TurnPlan:
  """A method's answer to an observation (or to the start)."""
  queries: np.ndarray               # [B, C, D] float32 channel queries
  valid: np.ndarray                 # [B, C] bool channels used this turn
  sigma: np.ndarray                 # [B] int32 (demotion.SIGMA_*)
  records: tuple[dict, ...] = ()    # [B] extra trajectory fields, or ()
  penalty: np.ndarray | None = None  # [B, N] float32 subtracted from every
                                    # channel's similarities, or None


def empty_plan(num: int, dim: int) -> TurnPlan:
  """No valid channel, sigma neutral."""
  return TurnPlan(
      queries=np.zeros((num, NUM_CHANNELS, dim), np.float32),
      valid=np.zeros((num, NUM_CHANNELS), bool),
      sigma=np.full(num, demotion.SIGMA_NEU, np.int32))


def covr_plan(queries: np.ndarray, sigma: np.ndarray) -> TurnPlan:
  """A single-list plan: only the CoVR channel, always valid."""
  num, dim = queries.shape
  plan = empty_plan(num, dim)
  plan.queries[:, COVR] = queries
  plan.valid[:, COVR] = True
  return dataclasses.replace(plan, sigma=np.asarray(sigma, np.int32))


@dataclasses.dataclass(frozen=True)
class Feedback:
  """One turn of user feedback."""
  action: str                 # stop, modify, rewrite or answer
  text: str                   # what the user says ('' when stopping)
  mentioned: dict[int, int]   # attribute -> value the text names (pre-noise)


def anchored(gallery, compose, anchors, edits) -> np.ndarray:
  """``compose(gallery[anchor], edit)`` per row; a row with no anchor
  (``-1``: a session that started from text, with no reference video)
  searches with its text embedding alone.

  Args:
    gallery: ``[N, D]`` video embeddings.
    compose: ``(videos [B, D], texts [B, D]) -> [B, D]``.
    anchors: ``[B]`` gallery ids, ``-1`` for none.
    edits: ``[B, D]`` text embeddings.
  """
  anchors = np.asarray(anchors)
  out = np.array(edits, np.float32, copy=True)
  has = anchors >= 0
  if has.any():
    out[has] = np.asarray(compose(np.asarray(gallery)[anchors[has]],
                                  out[has]), np.float32)
  return out


def start_record(modification: str) -> dict:
  """A session's turn-0 trajectory record (both drivers)."""
  return {'turn': 0, 'action': None, 'feedback': modification,
          'sigma': None, 'question': None}


def turn_record(turn: int, action: str, feedback, sigma: int,
                rank_cap_fired: bool, question, **fields) -> dict:
  """A feedback turn's trajectory record (both drivers): the user's
  ``action`` and words (``feedback``; None where the jitted driver did not
  tabulate them), the ``sigma`` used, whether rank-cap fired, the question
  the user answered (its text; None where the jitted driver knows only its
  attribute, ``question_attribute``), then the driver's and method's own
  ``fields``. The driver adds ``asked`` (the question shown with the new
  list)."""
  return {'turn': turn, 'action': action, 'feedback': feedback,
          'sigma': demotion.SIGMAS[int(sigma)],
          'rank_cap_fired': bool(rank_cap_fired), 'question': question,
          **fields}


def stopped_record(turn: int) -> dict:
  """The record of a turn after the user stopped (both drivers)."""
  return {'turn': turn, 'action': 'stopped', 'feedback': '', 'sigma': None,
          'question': None}


@dataclasses.dataclass(frozen=True)
class Shown:
  """The lists just ranked for the sessions that gave feedback."""
  sessions: np.ndarray     # [B] int rows of the batch
  ids: np.ndarray          # [B, K] int32 displayed lists
  scores: np.ndarray       # [B, K] float32 their fused scores
  asked: np.ndarray        # [B] int questions asked so far per session


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JaxPlan:
  """A jitted turn plan: channel texts as partial assignments (a pytree:
  a turn's two halves pass it, ``session.decide``)."""
  search: jnp.ndarray   # [A] int32 the T2V query's assignment
  edit: jnp.ndarray     # [A] int32 the edit's assignment (all -1: empty)
  use_search: bool      # the method uses the T2V channel
  use_edit: bool        # the method uses the CoVR channel
  sigma: jnp.ndarray    # [] int32
  anchor: jnp.ndarray   # [] int32 gallery id the edit is composed with
  avoid: jnp.ndarray    # [A, V] bool avoided values this turn's lists use
  # None: the edit is ``edit``'s phrase; else the edit text's embedding
  # ``[D]`` itself (a method that encodes the user's words).
  edit_embedding: jnp.ndarray | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JaxStart:
  """What a jitted method reads at turn 0 (one session)."""
  init_search: jax.Array         # [A] the T2V initializer's assignment
  modification_attrs: jax.Array  # [A] the modification text, parsed
  modification: jax.Array        # [D] the modification text, encoded
  # [] bool whether turn 0's composed query is used; None: the method's
  # ``covr`` flag (a source that tabulates the host's plans sets it).
  covr_valid: jax.Array | None = None
  # V: values per attribute (the width of a plan's ``avoid [A, V]``).
  num_values: int = dataclasses.field(default=0, metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JaxObservation:
  """What a jitted method observes at a feedback turn (one session): what
  every environment gives, and ``info``, the environment's own observation
  pytree, of the type its face declares (``jitted.Face.OBSERVATION``, as
  gymnax's ``observation_space``); a method's form declares the type it
  reads (``JaxForm.READS``) and the driver refuses a pair that differs."""
  shown: jax.Array        # [] int32 gallery id of the shown top-1
  reference: jax.Array    # [] int32 v_ref
  action: jax.Array       # [] int32 the user's action (``ACTIONS`` index)
  asked: jax.Array        # [] int32 the question's attribute (-1 none)
  info: object            # the environment's observation (its OBSERVATION)
  # V: values per attribute the environment's assignments range over (the
  # width of a plan's ``avoid [A, V]``).
  num_values: int = dataclasses.field(default=0, metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AttributeReading:
  """The observation of an environment whose feedback reads as attribute
  values (the world's face; the toy of ``tests/drivers/jit_loop_test.py``):
  what the reasoner reads in the words, and their embeddings."""
  mentions: jax.Array     # [A] int32 values the feedback names, -1 none
  negative: jax.Array     # [] bool, a rejection marker in the words
  shown_attrs: jax.Array  # [A] int32 the shown video's caption, parsed
  utterance: jax.Array    # [D'] the words' embedding (methods that need it)
  dialogue: jax.Array     # [D'] the dialogue's embedding (likewise)
  # [] int32 the reasoner's reading of the user's decision from the words
  # (``frames.LABELS`` index; -1 none).
  label: jax.Array = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JaxMemory:
  """What a jitted method's question rule reads: the gallery's captions
  parsed, and the attribute the user reads in each question the reasoner
  can ask (-1: none)."""
  caption_attrs: jax.Array     # [N, A] int32 (-1: the caption states none)
  asked_with_value: jax.Array  # [A, V] about attribute a, saying value v
  asked_plain: jax.Array       # [A] about attribute a alone
  asked_open: jax.Array        # [] the open question


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JaxData:
  """What every session of a run reads (replicated over devices)."""
  gallery: jax.Array          # [N, D] float32 video embeddings
  memory: JaxMemory  # what the methods' question rules read
  reference: jax.Array        # [Q] int32 gallery ids
  target: jax.Array           # [Q] int32 gallery ids (the stop rule's)
  modification: jax.Array     # [Q, D] float32 modification texts, encoded
  own: object = None          # the source's own arrays (its face reads them)


class JaxForm(abc.ABC):
  """A method's pure-JAX form, which the jitted drivers run: ``init`` at
  turn 0 and ``step`` at each feedback turn, one session at a time under
  ``vmap`` (a method's form is a frozen dataclass subclass, so it is a
  static, hashable part of the compiled program).

  What the driver reads besides: ``t2v`` and ``covr`` (the channels the
  method uses), ``needs`` (the face's tables it reads: ``'utterances'``,
  ``'dialogues'``), ``penalty`` (a per-video penalty of the avoided values
  on the composed channel, or None) and ``with_sigma_rule`` (the
  Reflector's sigma rule of the reasoner whose reading the face
  reproduces). A form that asks is also a ``JaxAsker``.
  """
  # The environment observation its ``step`` reads (``JaxObservation.info``).
  READS: ClassVar[type] = AttributeReading
  t2v: bool = True
  covr: bool = True
  needs: tuple[str, ...] = ()

  @abc.abstractmethod
  def init(self, start: JaxStart):
    """``(state, init_search [A])`` of turn 0."""

  @abc.abstractmethod
  def step(self, state, obs: JaxObservation):
    """``(state, JaxPlan)`` of a feedback turn."""

  def penalty(self, avoid, caption_attrs):
    """``[N]`` penalty of the gallery's videos holding an ``avoid`` value
    (``caption_attrs [N, A]``), or None: none."""
    del avoid, caption_attrs
    return None

  def with_sigma_rule(self, rule: str) -> 'JaxForm':
    """This form reading sigma by ``rule`` (a form without a Reflector
    reads none: itself)."""
    del rule
    return self


class JaxAsker(abc.ABC):
  """A ``JaxForm`` that asks a question after each ranking when its
  ``question`` (what it asks about) is not None."""
  question: str | None = None

  @abc.abstractmethod
  def jax_question(self, state, shown_ids, shown_scores, asked, reference,
                   memory: JaxMemory, active):
    """``(attribute the user reads in the question or -1, 1 when asked)``
    for the list just ranked (``shown_ids [K]``)."""


def asks(form: JaxForm) -> bool:
  """Whether the jitted driver asks ``form``'s question."""
  return isinstance(form, JaxAsker) and form.question is not None
