"""The user's decision read off the words around the values it names.

A user who edits the shown video ("swap the colour for X", "X instead"),
answers the question shown ("I think X objects") or describes the target
afresh ("No. I want ...") says so in the frame around the values, not in
the values. ``FrameClassifier`` is a multinomial logistic regression over
the frame's words (those outside every value span a reader read; see
``grounding.GroundingReader.frame``) and how many values were read, fitted
on training utterances only. The State Reflector maps its label to sigma as
docs/definitions.md §10 does (``SIGMA``), with one rule the words cannot carry:
an answer needs a question, so without one it is read as an edit.
"""

import numpy as np

LABELS = ('modify', 'answer', 'rewrite')
SIGMA = {'modify': 'pos', 'answer': 'neu', 'rewrite': 'neg'}
_MAX_VALUES = 8  # count features 0..7 values read


class FrameClassifier:
  """``label(frame words, values read) -> one of LABELS``."""

  def __init__(self, vocabulary, weights, bias):
    self.vocabulary = tuple(vocabulary)
    self._index = {w: i for i, w in enumerate(self.vocabulary)}
    self.weights = np.asarray(weights, np.float64)
    self.bias = np.asarray(bias, np.float64)
    if self.weights.shape != (len(self.vocabulary) + _MAX_VALUES,
                              len(LABELS)):
      raise ValueError(f'FrameClassifier weights {self.weights.shape} do not '
                       f'fit {len(self.vocabulary)} words')

  def _features(self, frame, num_values):
    x = np.zeros(len(self.vocabulary) + _MAX_VALUES)
    for w in frame:
      i = self._index.get(w)
      if i is not None:
        x[i] = 1.0
    x[len(self.vocabulary) + min(num_values, _MAX_VALUES - 1)] = 1.0
    return x

  def label(self, frame, num_values: int) -> str:
    scores = self._features(frame, num_values) @ self.weights + self.bias
    return LABELS[int(np.argmax(scores))]

  @classmethod
  def fit(cls, frames, num_values, labels, steps: int = 300,
          learning_rate: float = 0.5, l2: float = 1e-3,
          min_count: int = 2) -> 'FrameClassifier':
    """Full-batch gradient descent on the softmax cross-entropy (plus
    ``l2``), deterministic; words seen fewer than ``min_count`` times are
    left out of the vocabulary."""
    if not len(frames) == len(num_values) == len(labels) or not frames:
      raise ValueError('FrameClassifier.fit needs as many frames, value '
                       f'counts and labels (>= 1), got {len(frames)}, '
                       f'{len(num_values)} and {len(labels)}')
    bad = sorted(set(labels) - set(LABELS))
    if bad:
      raise ValueError(f'unknown labels {bad}; valid: {LABELS}')
    counts = {}
    for frame in frames:
      for w in set(frame):
        counts[w] = counts.get(w, 0) + 1
    vocabulary = sorted(w for w, c in counts.items() if c >= min_count)
    model = cls(vocabulary, np.zeros((len(vocabulary) + _MAX_VALUES,
                                      len(LABELS))), np.zeros(len(LABELS)))
    x = np.stack([model._features(f, n) for f, n in zip(frames, num_values)])  # pylint: disable=protected-access
    y = np.eye(len(LABELS))[[LABELS.index(l) for l in labels]]
    w, b = model.weights, model.bias
    for _ in range(steps):
      z = x @ w + b
      z -= z.max(axis=1, keepdims=True)
      p = np.exp(z)
      p /= p.sum(axis=1, keepdims=True)
      g = (p - y) / len(x)
      w -= learning_rate * (x.T @ g + l2 * w)
      b -= learning_rate * g.sum(axis=0)
    return model
