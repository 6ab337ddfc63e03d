"""Tests for fitting a joined dialogue to a text encoder's window."""

from absl.testing import absltest

from recovr_jax.protocol import dialogue

SEP = dialogue.SEPARATOR


def words(text):  # a tokenizer stand-in: one token a word
  return len(text.split())


class FitTest(absltest.TestCase):

  def test_the_jitted_dialogue_table_joins_the_same_way(self):
    from recovr_jax.envs.world.benchmark import words  # pylint: disable=g-import-not-at-top
    self.assertEqual(words.SEPARATOR, dialogue.SEPARATOR)

  def test_a_dialogue_that_fits_is_kept(self):
    text = SEP.join(['make it blue', 'smaller'])
    self.assertEqual(dialogue.fit(text, words, 10), (text, 0, 0))

  def test_the_oldest_feedback_goes_first(self):
    parts = ['make it blue', 'one two three', 'four five six', 'newest here']
    text = SEP.join(parts)  # 3 + 3 + 3 + 2 words and 3 separators: 14
    fitted, dropped, over = dialogue.fit(text, words, 12)
    self.assertEqual(fitted, SEP.join(parts[:1] + parts[2:]))
    self.assertEqual((dropped, over), (1, 0))
    fitted, dropped, over = dialogue.fit(text, words, 7)
    self.assertEqual(fitted, SEP.join([parts[0], parts[3]]))
    self.assertEqual((dropped, over), (2, 0))

  def test_first_and_last_alone_too_long_are_counted(self):
    text = SEP.join(['a b c d', 'e', 'f g h'])
    fitted, dropped, over = dialogue.fit(text, words, 5)
    self.assertEqual(fitted, SEP.join(['a b c d', 'f g h']))
    self.assertEqual((dropped, over), (1, 3))
    # Not a dialogue: nothing to drop, the excess counted.
    self.assertEqual(dialogue.fit('a b c d e f', words, 4),
                     ('a b c d e f', 0, 2))


class TruncationTableTest(absltest.TestCase):

  def test_counts_per_method_and_turn_from_the_trajectories(self):
    def row(method, said, actions):
      turns = [dict(turn=0, feedback=said[0], action=None)]
      turns += [dict(turn=t, feedback=f, action=a)
                for t, (f, a) in enumerate(zip(said[1:], actions), 1)]
      return dict(method=method, turns=turns)
    rows = [row('ivr', ['m', 'x y z', 'w'], ['modify', 'modify']),
            row('ivr', ['m', 'q', ''], ['modify', 'stopped']),
            row('recovr', ['m', 'x y z', 'w'], ['modify', 'modify'])]
    seen = []

    def cuts(texts):
      seen.extend(texts)
      return [dialogue.fit(t, words, 4)[1:] for t in texts]

    table = dialogue.truncation_table(rows, ['ivr'], cuts)
    self.assertEqual(seen, ['m' + SEP + 'x y z',
                            'm' + SEP + 'x y z' + SEP + 'w',
                            'm' + SEP + 'q'])
    self.assertEqual(table, {'ivr': {
        '1': dict(dialogues=2, over_window=1, feedback_dropped=0,
                  still_cut=1),
        '2': dict(dialogues=1, over_window=1, feedback_dropped=1,
                  still_cut=0)}})


if __name__ == '__main__':
  absltest.main()
