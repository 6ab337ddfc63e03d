"""A span classifier over frozen sentence embeddings: softmax regression
from a span's embedding to a value, or to nothing.

``SpanHead(encode, phrases, labels)`` embeds each training phrase once
(``encode``: ``list[str] -> [n, D]``, the reader's MiniLM) and fits a
linear softmax head by full-batch Adam from zeros (deterministic); a
phrase labelled ``None`` names nothing (the user's frame words). It
answers as ``span_lm.SpanLM`` does, so a ``GroundingReader`` takes it as
its ``confirm`` resource. This module knows no vocabulary: the phrases
and labels are injected (``reader_fit.fit_span_head``).
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax


class SpanHead:
  """``classify(spans) -> [(label or None, probability)]``.

  Args:
    encode: ``list[str] -> [n, D]`` embeddings.
    phrases: the training phrases.
    labels: each phrase's label (hashable), None for a phrase that names
      nothing.
    steps: full-batch Adam steps.
    learning_rate: Adam's.
    l2: the weight decay on the head's weights.
    min_prob: the least probability a value needs (below it: None).
  """

  def __init__(self, encode: Callable[[list[str]], np.ndarray],
               phrases: Sequence[str], labels: Sequence, steps: int = 300,
               learning_rate: float = 0.05, l2: float = 1e-4,
               min_prob: float = 0.5):
    if len(phrases) != len(labels) or not phrases:
      raise ValueError('SpanHead needs one label per phrase (>= 1), got '
                       f'{len(phrases)} phrases and {len(labels)} labels')
    self._encode = encode
    self.classes = sorted({l for l in labels if l is not None}) + [None]
    if len(self.classes) < 2:
      raise ValueError('SpanHead needs phrases of at least one value')
    index = {c: i for i, c in enumerate(self.classes)}
    x = jnp.asarray(np.asarray(encode(list(phrases)), np.float32))
    y = jnp.asarray([index[l] for l in labels], jnp.int32)
    params = {'w': jnp.zeros((x.shape[1], len(self.classes)), jnp.float32),
              'b': jnp.zeros((len(self.classes),), jnp.float32)}
    optimiser = optax.adam(learning_rate)

    def loss(p):
      logits = x @ p['w'] + p['b']
      return optax.softmax_cross_entropy_with_integer_labels(
          logits, y).mean() + l2 * jnp.sum(p['w'] ** 2)

    @jax.jit
    def fit(p):
      def step(carry, _):
        p, state = carry
        grads = jax.grad(loss)(p)
        updates, state = optimiser.update(grads, state, p)
        return (optax.apply_updates(p, updates), state), None
      (p, _), _ = jax.lax.scan(step, (p, optimiser.init(p)), None,
                               length=steps)
      return p

    self.params = jax.tree_util.tree_map(np.asarray, fit(params))
    self.train_accuracy = float(np.mean(
        np.argmax(np.asarray(x) @ self.params['w'] + self.params['b'],
                  axis=1) == np.asarray(y)))
    self.min_prob = float(min_prob)
    self._cache: dict[str, np.ndarray] = {}

  def probabilities(self, spans: Sequence[str]) -> np.ndarray:
    """``[n, classes]`` softmax probabilities (cached per span)."""
    new = [s for s in dict.fromkeys(spans) if s not in self._cache]
    if new:
      logits = (np.asarray(self._encode(new), np.float32) @ self.params['w']
                + self.params['b'])
      logits -= logits.max(axis=1, keepdims=True)
      probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
      for s, row in zip(new, probs):
        self._cache[s] = row
    return (np.stack([self._cache[s] for s in spans]) if spans else
            np.zeros((0, len(self.classes))))

  def classify(self, spans: Sequence[str]) -> list:
    """``(label, probability)`` per span: the most probable class's label,
    None when it is the nothing class or below ``min_prob``."""
    out = []
    for row in self.probabilities(list(spans)):
      best = int(np.argmax(row))
      label = self.classes[best]
      out.append((label if row[best] >= self.min_prob else None,
                  float(row[best])))
    return out
