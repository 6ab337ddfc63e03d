"""When and what to ask, scored against what the simulator knows (after
AskStream's Ask-F1).

A method may show a question with each list; the user answers it at the next
turn. A decision is scored at every list ``t = 1 .. T-1`` of a session still
searching after it (the shown top-1 is not the target), since only those
questions can be answered:

* **unknown at list t**: the attributes of the target that neither the
  modification text (the generator's ``named``) nor the user's words at
  turns ``1..t`` named (the user's ``Feedback.mentioned``, replayed: the
  user is a deterministic function of session, turn, shown video and the
  question it read),
  and on which the list's top 10 candidates do not all agree;
* **should ask**: some attribute is unknown; **asked**: the method showed a
  question with list ``t``;
* Ask-F1 of the decision (positive: should ask), and **what-accuracy**: of the
  questions asked, the share about an attribute unknown at that list
  (questions the source cannot map to an attribute count as wrong and are
  also counted apart);
* **R@1 points per question**: the R@1 gain from turn 0 to turn T over the
  questions asked per session (``None`` when none were).

The scorer reads only a finished run's trajectories and the source's ground
truth (``protocol.data_source.AskTruth``); no method sees it.
"""

import collections
import dataclasses

import numpy as np

from recovr_jax.run import reporting

TOP = 10  # the candidates whose disagreement makes an attribute worth asking
# The turn fields ``score`` and ``remembering`` read (with the documents'
# ``session``, ``target`` and ``error``).
READS = ('top10', 'action', 'question', 'question_attribute', 'questioned',
         'asked')


def score(rows, truth, num_turns: int) -> dict:
  """Ask scores of one method from its trajectory rows.

  Args:
    rows: the method's ``trajectories.jsonl`` rows (``session``, ``target``,
      ``turns`` with ``top10``, ``question`` and ``asked``); sessions that
      raised (``error``) have no turns and are left out.
    truth: the source's ``protocol.data_source.AskTruth``.
    num_turns: T.

  Returns:
    A dict of counts and rates (see the module docstring).
  """
  tp = fp = fn = tn = right = unmapped = 0
  r1_first = r1_last = 0
  rows = [row for row in rows if not row.get('error')]  # raised: no turns
  for row in rows:
    session, target, turns = row['session'], row['target'], row['turns']
    r1_first += turns[0]['top10'][:1] == [target]
    r1_last += turns[num_turns]['top10'][:1] == [target]
    known = np.asarray(truth.query_named[session], bool).copy()
    for t in range(1, num_turns):
      rec = turns[t]
      if rec['action'] == 'stopped':
        break
      known[_named(truth, row, t)] = True
      top = [i for i in rec['top10'][:TOP] if i >= 0]
      if not top or top[0] == target:
        break  # found: nothing left to ask about
      values = truth.attributes[top]
      unknown = ~known & np.any(values != values[:1], axis=0)
      asked, about = _question(truth, turns, t)
      should = bool(unknown.any())
      tp += should and asked
      fp += asked and not should
      fn += should and not asked
      tn += not (should or asked)
      if asked:
        unmapped += about is None
        right += about is not None and bool(unknown[about])
  sessions = max(len(rows), 1)
  asks = tp + fp
  per_session = asks / sessions
  gain = (r1_last - r1_first) / sessions
  ratio = lambda a, b: a / b if b else None
  return {
      'decisions': tp + fp + fn + tn, 'should_ask': tp + fn, 'asked': asks,
      'true_positive': tp, 'false_positive': fp, 'false_negative': fn,
      'precision': ratio(tp, asks), 'recall': ratio(tp, tp + fn),
      'ask_f1': ratio(2 * tp, 2 * tp + fp + fn),
      'what_accuracy': ratio(right, asks), 'unmapped_questions': unmapped,
      'questions_per_session': per_session,
      'r1_points_per_question': (100 * gain / per_session
                                 if per_session else None),
  }


def remembering(truth, rows=(), num_turns: int = 0):
  """``truth`` whose user replays each (session, turn, target, shown
  video, question) once: the user is a deterministic function of them,
  and the methods' sessions share many such turns (every method's turn 1
  answers the same turn-0 list). With ``rows`` (every method's trajectory
  rows) and ``num_turns``, the turns ``score`` replays are replayed up
  front, in one batch where the user answers many at once (a ``many``
  attribute: ``many(calls) -> [user(*call) for call in calls]``), or, where
  the user can say what it names without its words (a ``named_many``
  attribute: ``[user(*call).mentioned ...]``), so: the scores read only
  ``mentioned``."""
  user, memo = truth.user, {}

  def remembered(*call):
    if call not in memo:
      memo[call] = user(*call)
    return memo[call]
  calls = list(dict.fromkeys(
      replayed(truth, row, t) for row in rows if not row.get('error')
      for t in range(1, num_turns)
      if all(row['turns'][u]['action'] != 'stopped' for u in range(1, t + 1))))
  if calls and getattr(user, 'named_many', None) is not None:
    memo.update(zip(calls, map(_Named, user.named_many(calls))))
  elif calls and getattr(user, 'many', None) is not None:
    memo.update(zip(calls, user.many(calls)))
  return dataclasses.replace(truth, user=remembered)


_Named = collections.namedtuple('_Named', 'mentioned')  # a reply, unwritten


def _named(truth, row, t: int) -> list[int]:
  """The attributes the user's words at turn ``t`` named, replayed."""
  return list(truth.user(*replayed(truth, row, t)).mentioned)


def replayed(truth, row, t: int) -> tuple:
  """The user's arguments at turn ``t`` (it reads the question shown with
  the previous list: its text in the host's records, its attribute in the
  jitted driver's, whose ``mentioned`` is what the reasoner read, not what
  the user said)."""
  rec = row['turns'][t]
  question = rec.get('question')
  if 'question_attribute' in rec:  # the jitted driver's record
    name = rec['question_attribute']
    question = (None if name is None else
                truth.question_about(truth.attribute_names.index(name)))
  shown = row['turns'][t - 1]['top10'][0]
  return row['session'], t, row['target'], shown, question


def _question(truth, turns, t: int):
  """``(asked, attribute or None)`` of the question shown with list ``t``:
  the host records its text (``asked``); the jitted driver whether one was
  shown (``questioned``) and, at the next turn, the attribute the user read
  in it (``question_attribute``; None for an open question)."""
  rec = turns[t]
  if 'questioned' in rec:
    if not rec['questioned']:
      return False, None
    name = turns[t + 1].get('question_attribute')
    return True, None if name is None else truth.attribute_names.index(name)
  if rec.get('asked') is None:
    return False, None
  return True, truth.question_attribute(rec['asked'])


def markdown(per_method: dict, names: dict | None = None) -> str:
  """The report's section: one row per method that has ``asking``
  (``names``: display names, as ``reporting.method_cell`` shows them)."""
  rows = {m: v['asking'] for m, v in per_method.items() if 'asking' in v}
  if not rows:
    return ''
  pct = lambda x: '-' if x is None else f'{100 * x:.1f}'
  lines = ['### Asking: when and what (scored against the simulator)', '',
           'A decision per list 1..T-1 of a session still searching; '
           '"should ask": some target attribute that neither the '
           'modification nor the user has named differs among the top '
           f'{TOP} (recovr_jax/run/ask_scores.py).', '',
           '| method | decisions | should ask | asked | precision | recall | '
           'Ask-F1 | what-accuracy | questions / session | R@1 points / '
           'question |', '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
  for m, a in rows.items():
    per_q = a['r1_points_per_question']
    lines.append(
        f"| {reporting.method_cell(m, names)} | {a['decisions']} | {a['should_ask']} | {a['asked']} | "
        f"{pct(a['precision'])} | {pct(a['recall'])} | {pct(a['ask_f1'])} | "
        f"{pct(a['what_accuracy'])} | {a['questions_per_session']:.2f} | "
        f"{'-' if per_q is None else f'{per_q:+.1f}'} |")
  return '\n'.join(lines) + '\n'
