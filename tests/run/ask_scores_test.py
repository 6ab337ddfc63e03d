"""Ask scoring (recovr_jax/run/ask_scores.py) on hand-made sessions."""

import types

from absl.testing import absltest
import numpy as np

from recovr_jax.protocol import data_source
from recovr_jax.run import ask_scores

# Five videos, two attributes; the target is video 0 = (0, 0).
ATTRS = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [0, 0]])
QUESTIONS = {'colour?': 0, 'size?': 1}


def make_truth(mentions):
  """The world's ``AskTruth`` with a user who names the attributes
  ``mentions[(session, turn)]`` (nothing else is read from the user)."""
  def user(session, turn, target, shown, question):
    del target, shown, question
    return types.SimpleNamespace(mentioned={
        a: 0 for a in mentions.get((session, turn), ())})
  return data_source.AskTruth(attributes=ATTRS,
                         query_named=np.array([[False, False]] * 3),
                         user=user, question_attribute=QUESTIONS.get,
                         attribute_names=('colour', 'size'),
                         question_about=lambda a: ('colour?', 'size?')[a])


def turn(top, asked=None, question=None, action='modify'):
  return {'top10': top, 'asked': asked, 'question': question,
          'action': action}


class AskScoringTest(absltest.TestCase):

  def test_counts_decisions_and_what_was_asked(self):
    rows = [
        # Session 0: at list 1 the top candidates differ on colour only
        # (videos 1, 4 -> colour 1 vs 0; size 0 both): should ask, asked
        # colour (right). At list 2 the user has named colour; candidates
        # differ on size only: should ask, did not ask (a miss).
        {'session': 0, 'target': 0, 'turns': [
            turn([1, 3], action=None),
            turn([1, 4], asked='colour?'),
            turn([2, 4], question='colour?'),
            turn([0, 2], action='modify')]},
        # Session 1: list 1 has one candidate, so nothing differs: asking
        # about size is a false positive (and wrong); list 2 shows the
        # target: the session is over.
        {'session': 1, 'target': 0, 'turns': [
            turn([3], action=None),
            turn([3], asked='size?'),
            turn([0, 1]),
            turn([0, 1], action='stopped')]},
        # Session 2: asks an unmappable question while colour is unknown
        # and differs (a true positive whose topic is unknown).
        {'session': 2, 'target': 0, 'turns': [
            turn([2], action=None),
            turn([1, 0], asked='anything else?'),
            turn([0], action='modify'),
            turn([0], action='stopped')]},
    ]
    got = ask_scores.score(rows, make_truth({(0, 2): [0]}), num_turns=3)
    self.assertEqual(got['decisions'], 4)
    self.assertEqual((got['true_positive'], got['false_positive'],
                      got['false_negative']), (2, 1, 1))
    self.assertEqual(got['should_ask'], 3)
    self.assertAlmostEqual(got['ask_f1'], 4 / 6)
    self.assertAlmostEqual(got['precision'], 2 / 3)
    self.assertAlmostEqual(got['recall'], 2 / 3)
    self.assertAlmostEqual(got['what_accuracy'], 1 / 3)
    self.assertEqual(got['unmapped_questions'], 1)
    self.assertAlmostEqual(got['questions_per_session'], 1.0)
    # R@1: 0 of 3 at turn 0, 3 of 3 at turn 3: 100 points over 1 question.
    self.assertAlmostEqual(got['r1_points_per_question'], 100.0)

  def test_a_query_or_user_naming_an_attribute_makes_it_known(self):
    rows = [{'session': 0, 'target': 0, 'turns': [
        turn([3], action=None), turn([1, 4], asked='colour?'),
        turn([1, 4]), turn([1, 4])]}]
    named = make_truth({(0, 1): [0]})  # colour named at turn 1
    got = ask_scores.score(rows, named, num_turns=3)
    # List 1: colour differs but is named -> nothing to ask: a false
    # positive; list 2: same, no question: a true negative.
    self.assertEqual((got['true_positive'], got['false_positive'],
                      got['decisions']), (0, 1, 2))
    self.assertIsNone(got['recall'])
    self.assertEqual(got['what_accuracy'], 0.0)


class RememberingTest(absltest.TestCase):

  def test_each_user_turn_is_replayed_once_with_the_same_scores(self):
    calls = []
    truth = make_truth({(0, 1): [0]})
    user = truth.user

    def counted(*key):
      calls.append(key)
      return user(*key)
    truth = data_source.AskTruth(**{**truth.__dict__, 'user': counted})
    rows = [{'session': 0, 'target': 0, 'turns': [
        turn([3], action=None), turn([1, 4], asked='colour?'),
        turn([1, 4]), turn([1, 4])]}]
    plain = ask_scores.score(rows, truth, num_turns=3)
    replays = len(calls)
    self.assertGreater(replays, 0)
    remembered = ask_scores.remembering(truth)
    # Two methods that showed the same lists: the second replays nothing.
    self.assertEqual(ask_scores.score(rows, remembered, num_turns=3), plain)
    self.assertEqual(ask_scores.score(rows, remembered, num_turns=3), plain)
    self.assertEqual(len(calls), 2 * replays)

  def test_a_user_that_answers_many_replays_every_turn_in_one_batch(self):
    calls, batches = [], []
    truth = make_truth({(0, 1): [0], (1, 2): [1]})
    user = truth.user

    def counted(*key):
      calls.append(key)
      return user(*key)

    def many(keys):
      batches.append(list(keys))
      return [user(*key) for key in keys]
    counted.many = many
    truth = data_source.AskTruth(**{**truth.__dict__, 'user': counted})
    rows = [{'session': s, 'target': 0, 'turns': [
        turn([3], action=None), turn([1, 4], asked='colour?'),
        turn([1, 4]), turn([1, 4])]} for s in (0, 1)]
    rows.append({'session': 2, 'error': 'raised'})  # no turns: left out
    plain = [ask_scores.score(rows[i:i + 1], truth, num_turns=3) for i in (0, 1)]
    calls.clear()
    remembered = ask_scores.remembering(truth, rows + rows, num_turns=3)
    self.assertLen(batches, 1)
    self.assertLen(batches[0], len(set(batches[0])))  # each call once
    self.assertEqual([ask_scores.score(rows[i:i + 1], remembered, num_turns=3)
                      for i in (0, 1)], plain)
    self.assertEqual(calls, [])  # every replay was in the batch


class JittedRecordsTest(absltest.TestCase):

  def test_jitted_records_score_as_the_host_records(self):
    # The same session as both drivers record it: the host keeps the
    # question's text; the jitted driver whether one was shown and, at the
    # next turn, the attribute the user read, plus what the *reasoner* read
    # of the words (``mentioned``: here wrong on purpose). The user's own
    # words are replayed for both.
    heard = []

    def user(session, turn, target, shown, question):
      del session, target, shown
      heard.append((turn, question))
      return types.SimpleNamespace(mentioned={0: 0} if turn == 2 else {})

    truth = data_source.AskTruth(
        attributes=ATTRS, query_named=np.array([[False, False]]), user=user,
        question_attribute=QUESTIONS.get, attribute_names=('colour', 'size'),
        question_about=lambda a: ('colour?', 'size?')[a])
    host = {'session': 0, 'target': 0, 'turns': [
        turn([1, 3], action=None), turn([1, 4], asked='colour?'),
        turn([2, 4], question='colour?'), turn([0, 2])]}
    jit = {'session': 0, 'target': 0, 'turns': [
        dict(turn([1, 3], action=None), questioned=False),
        dict(turn([1, 4]), questioned=True, question_attribute=None,
             mentioned={'size': 'x'}),
        dict(turn([2, 4]), questioned=False, question_attribute='colour',
             mentioned={}),
        dict(turn([0, 2]), questioned=False, question_attribute=None,
             mentioned={})]}
    a = ask_scores.score([host], truth, num_turns=3)
    heard_host, heard[:] = list(heard), []
    b = ask_scores.score([jit], truth, num_turns=3)
    self.assertEqual(a, b)
    self.assertEqual(heard, heard_host)  # the same question replayed
    # Colour open at list 1 (asked); size open at list 2 (not asked).
    self.assertEqual((a['true_positive'], a['false_negative']), (1, 1))


if __name__ == '__main__':
  absltest.main()
