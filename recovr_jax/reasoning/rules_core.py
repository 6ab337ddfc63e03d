"""The rules reasoning, written once for the host reasoner and the jitted
form (``rules.RulesReasoner`` reads text into these arrays;
``methods.recovr.JaxForm`` traces them).

Every function takes ``[A]`` int arrays of attribute values (``-1``: none;
in ``mentions``, ``ABSTAIN``: the feedback names the attribute in words the
reader could not read) and ``xp``, the array module (``numpy`` on the host, ``jax.numpy`` under
``jit``), so the two readers share the decisions and differ only in how
they hold text.
"""

import numpy as np

from recovr_jax.core import demotion

SIGMA_RULES = ('rules', 'paper', 'frames')
# Feedback changing more of the shown video's values is not an edit of it.
MAX_EDIT_CHANGES = 2
# A mention the reader abstained on: the attribute is named, its value
# unread. It is not a value (``read`` does not count it as named); search
# does not copy the shown video's value of it.
ABSTAIN = -2
SIGMA_NAMES = {demotion.SIGMA_NEG: 'neg', demotion.SIGMA_NEU: 'neu',
               demotion.SIGMA_POS: 'pos'}


def read(mentions, shown, negative, xp=np):
  """What a turn's feedback says about the shown video.

  Args:
    mentions: ``[A]`` the values the feedback names.
    shown: ``[A]`` the shown video's caption values.
    negative: a rejection marker in the words.

  Returns:
    ``(named [A] bool, changes [A] (named values that differ from the shown
    video, else -1), num_changes, relative)``: the feedback is relative (an
    edit of the shown video) when it names something, has no rejection
    marker and changes at most two values.
  """
  named = mentions >= 0
  changes = xp.where(named & (mentions != shown), mentions, -1)
  num_changes = xp.sum(changes >= 0)
  relative = (xp.any(named) & ~xp.asarray(negative)
              & (num_changes <= MAX_EDIT_CHANGES))
  return named, changes, num_changes, relative


def wanted(mentions, shown, keep, shown_avoided, relative, xp=np):
  """The Intent Decomposer's search values: the shown video's values when
  the feedback is relative (minus those avoided, ``shown_avoided [A]``
  bool), then the kept ones (``keep [A]``), then what the feedback names;
  later sources win. The shown video's value of an attribute the reader
  abstained on is not copied (a kept value, the user's own, still is)."""
  base = xp.where(relative & (shown >= 0) & ~shown_avoided
                  & (mentions != ABSTAIN), shown, -1)
  return xp.where(mentions >= 0, mentions, xp.where(keep >= 0, keep, base))


def sigma(rule, relative, num_changes, answers=False, label=None, xp=np):
  """The State Reflector's signal (``demotion.SIGMA_*``).

  ``rule``: 'rules' (``neg`` unless relative; ``pos`` for at most one
  change, else ``neu``), 'paper' (``neg`` unless relative; ``neu`` when the
  feedback ``answers`` the question shown, else ``pos``) or 'frames' (the
  frame classifier's ``label``, a ``frames.LABELS`` index: modify pos,
  answer neu, rewrite neg; the caller turns an answer without a question
  into modify).
  """
  if rule == 'frames':
    return xp.asarray([demotion.SIGMA_POS, demotion.SIGMA_NEU,
                       demotion.SIGMA_NEG], xp.int32)[label]
  if rule == 'paper':
    kept = xp.where(answers, demotion.SIGMA_NEU, demotion.SIGMA_POS)
  elif rule == 'rules':
    kept = xp.where(num_changes <= 1, demotion.SIGMA_POS, demotion.SIGMA_NEU)
  else:
    raise ValueError(f'sigma rule must be one of {SIGMA_RULES}, got {rule!r}')
  return xp.where(relative, kept, demotion.SIGMA_NEG).astype(xp.int32)


def answers(named, asked, xp=np):
  """Whether feedback naming ``named [A]`` answers a question about
  attribute ``asked`` (-1: no question): it names exactly that attribute."""
  return (asked >= 0) & xp.all(named == (xp.arange(named.shape[0]) == asked))


def reflect(mentions, shown, changes, keep, xp=np):
  """Short-term Progress Memory after a turn: ``(keep [A], rejected [A])``.
  The kept values updated by what the feedback names, and the shown
  video's value of each attribute the feedback changes (-1: none), which
  joins the avoided values; an avoided value kept since leaves them."""
  new_keep = xp.where(mentions >= 0, mentions, keep)
  rejected = xp.where((changes >= 0) & (shown >= 0), shown, -1)
  return new_keep, rejected


def most_uncertain(values, fixed, num_values: int, xp=np):
  """The Question Asker's attribute: the one not kept (``fixed [A]`` bool)
  whose values are the most uncertain among the top candidates' captions
  (``values [k, A]``, -1: none), by the entropy of their counts (0 for an
  attribute no caption states); ties to the first; 0 when every attribute
  is kept. Counts are summed in sorted order, so equal splits tie exactly
  under any float width."""
  counts = xp.sum(values.T[:, :, None] == xp.arange(num_values), axis=1)
  counts = xp.sort(counts, axis=1)                                  # [A, V]
  total = xp.sum(counts, axis=1, keepdims=True)
  share = counts / xp.maximum(total, 1)
  h = -xp.sum(xp.where(counts > 0, share * xp.log(
      xp.where(counts > 0, share, 1.0)), 0.0), axis=1)
  return xp.where(fixed.all(), 0, xp.argmax(xp.where(fixed, -xp.inf, h)))
