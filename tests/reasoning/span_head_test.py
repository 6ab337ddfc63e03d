"""reasoning.span_head: a softmax head over frozen span embeddings."""

from absl.testing import absltest
import numpy as np

from recovr_jax.reasoning import grounding
from recovr_jax.reasoning import span_head


def _encode(texts):
  """A dimension per first letter (deterministic, L2-normalised)."""
  out = np.zeros((len(texts), 26), np.float32)
  for i, t in enumerate(texts):
    for w in t.split():
      out[i, (ord(w[0]) - ord('a')) % 26] += 1
  return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


PHRASES = ['red', 'rose', 'blue', 'bright blue', 'circle', 'instead', 'maybe']
LABELS = [(1, 0), (1, 0), (1, 1), (1, 1), (0, 0), None, None]


class SpanHeadTest(absltest.TestCase):

  def test_learns_its_phrases_and_generalises_by_embedding(self):
    head = span_head.SpanHead(_encode, PHRASES, LABELS, steps=200,
                              learning_rate=0.1)
    self.assertEqual(head.train_accuracy, 1.0)
    self.assertEqual(head.classes, [(0, 0), (1, 0), (1, 1), None])
    labels = [label for label, _ in head.classify(
        ['ruby', 'bleu', 'indeed', 'ruby'])]
    # "ruby" embeds as "red" and "rose", "bleu" as "blue", "indeed" as
    # "instead", which names nothing.
    self.assertEqual(labels, [(1, 0), (1, 1), None, (1, 0)])
    probs = head.probabilities(['ruby'])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)

  def test_a_high_min_prob_abstains(self):
    head = span_head.SpanHead(_encode, PHRASES, LABELS, steps=5,
                              learning_rate=0.01, min_prob=0.99)
    (label, prob), = head.classify(['ruby'])
    self.assertIsNone(label)
    self.assertLess(prob, 0.99)

  def test_is_a_confirm_resource_of_the_grounding_reader(self):
    head = span_head.SpanHead(_encode, PHRASES, LABELS, steps=200,
                              learning_rate=0.1)
    confirm = lambda spans: [label for label, _ in head.classify(spans)]
    self.assertEqual(confirm(['ruby']), [(1, 0)])
    self.assertIn('read', grounding.CONFIRM_MODES)

  def test_bad_arguments_named(self):
    with self.assertRaisesRegex(ValueError, 'one label per phrase'):
      span_head.SpanHead(_encode, PHRASES, LABELS[:2])
    with self.assertRaisesRegex(ValueError, 'at least one value'):
      span_head.SpanHead(_encode, ['instead'], [None])


if __name__ == '__main__':
  absltest.main()
