"""reasoning.span_lm: a span classified into a closed vocabulary by SmolLM2."""

from absl.testing import absltest

from recovr_jax.reasoning import span_lm
from tests.helpers import two_blocks

NAMES = ('red', 'blue', 'circle', 'square')
LABELS = ((1, 0), (1, 1), (0, 0), (0, 1))
SHOTS = (('crimson', 'red'), ('box', 'square'), ('instead', 'none'))


class SpanLMTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.lm = span_lm.SpanLM(NAMES, LABELS, SHOTS, batch_size=4)

  def test_answers_are_labels_or_none_and_cached(self):
    spans = ['scarlet', 'azure', 'round', 'slowly', 'scarlet']
    out = self.lm.classify(spans)
    self.assertLen(out, 5)
    for label, lead in out:
      self.assertIn(label, LABELS + (None,))
      self.assertGreaterEqual(lead, 0.0)
    self.assertEqual(out[0], out[4])
    calls = self.lm.calls
    self.assertEqual(self.lm.classify(['azure', 'round']), out[1:3])
    self.assertEqual(self.lm.calls, calls)  # read from the cache
    # More spans than a batch: the same answers, batch by batch.
    self.assertEqual(self.lm.classify(spans + ['teal', 'oval']), (
        out + self.lm.classify(['teal', 'oval'])))

  def test_a_margin_turns_weak_answers_into_none(self):
    (_, lead), = self.lm.classify(['azure'])
    self.lm.margin = lead + 1.0
    try:
      self.assertEqual(self.lm.classify(['azure']), [(None, lead)])
    finally:
      self.lm.margin = 0.0

  def test_tune_fits_an_adapter_on_pairs_with_a_bare_prompt(self):
    # SmolLM2's first two blocks (a full tune compiles for minutes).
    lm = span_lm.SpanLM(NAMES, LABELS, SHOTS, model_dir=two_blocks.write()['dir'],
                        batch_size=4)
    pairs = [('crimson', 'red'), ('azure', 'blue'), ('round', 'circle'),
             ('boxy', 'square'), ('instead', 'none'), ('scarlet', 'red'),
             ('navy', 'blue'), ('rather', 'none')]
    before = lm.classify(['crimson'])
    report = lm.tune(pairs, steps=12, batch_size=4, learning_rate=3e-3)
    self.assertNotIn('crimson', lm._prompt('x'))  # no examples any more
    self.assertLess(report['last_loss'], report['first_loss'])
    self.assertEqual(lm.tuned, report)
    self.assertEqual(report['pairs'], 8)
    self.assertNotEqual(lm.classify(['crimson']), before)  # not cached
    with self.assertRaisesRegex(ValueError, r"not among the values: \['teal'"):
      lm.tune([('cyan', 'teal')])

  def test_bad_arguments_are_refused_before_the_model_loads(self):
    with self.assertRaisesRegex(ValueError, 'one label per value name'):
      span_lm.SpanLM(NAMES, LABELS[:2], SHOTS)
    with self.assertRaisesRegex(ValueError, 'share a first token'):
      span_lm.SpanLM(('red', 'red'), ((1, 0), (1, 1)), SHOTS)


if __name__ == '__main__':
  absltest.main()
