"""One study instance: a composed query answered turn by turn by a person.

The same protocol as a simulated session (``drivers.host_driver``: the method, the
reasoner, the ranking core, the question shown with each list), one feedback
turn per call: the participant's words take the simulated user's place. The
method sees what it sees in a run: the words, its own lists and Progress
Memory's captions; the target only decides nothing here (the participant
says when the search is over).
"""

import re
import unicodedata

import numpy as np

from recovr_jax.drivers import host_driver
from recovr_jax.protocol import environment
from recovr_jax.protocol import plan
from recovr_jax.reasoning import rules

MAX_FEEDBACK_CHARS = 1000


class FeedbackError(ValueError):
  """Feedback the study cannot take (empty or too long); nothing changes."""


def strip_controls(raw: str) -> str:
  """``raw`` without control or format characters (NUL, ESC, bidi
  overrides, ...) other than tab and newline, as logged and shown."""
  return ''.join(c for c in raw if c in '\t\n' or
                 unicodedata.category(c)[0] != 'C')


def clean_feedback(raw: str) -> str:
  """The words a method reads: ``raw`` without control characters, runs of
  whitespace made one space. Raises ``FeedbackError`` when empty or over
  1,000 characters."""
  if not isinstance(raw, str):
    raise FeedbackError('feedback must be text')
  text = re.sub(r'\s+', ' ', strip_controls(raw)).strip()
  if not text:
    raise FeedbackError('Please write some feedback (it was empty).')
  if len(raw) > MAX_FEEDBACK_CHARS:
    raise FeedbackError(f'Feedback is limited to {MAX_FEEDBACK_CHARS:,} '
                        f'characters; this has {len(raw):,}.')
  return text


def human_action(text: str, question) -> str:
  """The action label of a person's words (``plan.Observation.action``,
  which only the single-list baselines' rank-cap transplants and
  history_rewrite read): ``answer`` when the system had asked a question,
  ``rewrite`` when the words reject the shown video (the rules reasoner's
  negative markers), else ``modify``."""
  if question is not None:
    return 'answer'
  return 'rewrite' if rules.has_negative_marker(text) else 'modify'


class _StudyLoop(host_driver.HostLoop):
  """The host loop with the participant as the stop rule: a session runs
  a feedback turn whenever words are given (``Found it`` ends it instead)."""

  def still_searching(self, carry):
    return ~np.asarray(carry.ranking.stopped)


class Instance:
  """The search for composed query ``session`` of ``env``.

  ``shown`` is the displayed list ``[K]`` of the current turn, ``question``
  the system's question shown with it (or None); ``feedback(text)`` runs
  the next turn and returns its trajectory record (the runner's fields).
  """

  def __init__(self, env: environment.Environment, method, session: int, ctx,
               base):
    self.session = int(session)
    self._words = None
    self._loop, self._carry, first = host_driver.begin(
        env, method, np.array([self.session]), self._user, ctx, base,
        loop_class=_StudyLoop)
    self.turn = 0
    self.records = [first[0]]
    self.num_turns = self._loop.config.num_turns

  def _user(self, session, turn, target, shown, question):
    del session, turn, target, shown  # the person saw them on the page
    return plan.Feedback(human_action(self._words, question),
                             self._words, {})

  @property
  def shown(self) -> np.ndarray:
    return np.asarray(self._carry.ranking.shown_ids)[0]

  @property
  def question(self):
    return self._carry.questions[0]

  def feedback(self, text: str) -> dict:
    """Runs the next turn on ``text`` (already ``clean_feedback``ed). After
    a raise the instance may be half-stepped: build it again (the study
    replays its log)."""
    if self.turn >= self.num_turns:
      raise FeedbackError(f'this instance has had its {self.num_turns} '
                          'turns')
    self._words = text
    carry, rows = host_driver.feedback_turn(self._loop, self._carry,
                                     self.turn + 1)
    self._carry, self.turn = carry, self.turn + 1
    self.records.append(rows[0])
    return rows[0]
