"""A span classifier over a closed vocabulary, read from a causal LM.

``SpanLM.classify(spans)`` asks the installed SmolLM2 which value of the
world's closed vocabulary each span names, or none: the prompt lists every
value and a few worked examples (training phrasings, given by the caller),
then ``Phrase: <span>\\nValue:``; the answer is the value whose first token
scores highest at the next position (a grammar of one token: each value's
first token, and ``none``), calibrated by subtracting the mean scores the
prompt gives to content-free phrases (contextual calibration). A span is
classified once per process (cached); spans are scored in padded batches
by one jitted forward pass per batch.

``tune(pairs)`` fits a LoRA adapter (``reasoning.lora``) on ``(phrase,
name)`` pairs instead of showing examples: the prompt becomes the bare
``Phrase: <span>\nValue:`` and the loss is the cross-entropy of the
right choice among the grammar's tokens at that position; the adapter is
merged into the weights.

The grounding reader uses it for the spans neither the lexicon nor WordNet
reads (``GroundingReader(confirm=...)``; option ``lm_spans`` of
``envs.world.models.reader_fit``). This module knows no vocabulary: the
values, their labels and the examples are injected.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

NONE = 'none'
# Phrases that name nothing, for the calibration.
_CONTENT_FREE = ('N/A', '', 'something')


class SpanLM:
  """``classify(spans) -> [(label or None, margin)]``.

  Args:
    names: each value's name, as the prompt lists it.
    labels: each value's label, returned for it (``(attribute, value)``).
    shots: ``(phrase, name)`` worked examples (``name`` one of ``names`` or
      ``'none'``).
    model_dir: a transformers Flax causal-LM directory (default: the
      installed SmolLM2, converted once).
    margin: the least calibrated score a value needs over the next best
      choice (``none`` included).
    batch_size: spans per forward pass.
  """

  def __init__(self, names: Sequence[str], labels: Sequence, shots,
               model_dir=None, margin: float = 0.0, batch_size: int = 32):
    if len(names) != len(labels) or not names:
      raise ValueError('SpanLM needs one label per value name (>= 1), got '
                       f'{len(names)} names and {len(labels)} labels')
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    from transformers import FlaxAutoModelForCausalLM  # pylint: disable=g-import-not-at-top
    from recovr_jax import pretrained  # pylint: disable=g-import-not-at-top
    from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
    from third_party import transformers_flax_llama  # pylint: disable=g-import-not-at-top
    transformers_flax_llama.install()
    model_dir = str(model_dir or gguf_llama.ensure_converted())
    self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
    self.tokenizer.padding_side = 'left'
    if self.tokenizer.pad_token is None:
      self.tokenizer.pad_token = self.tokenizer.eos_token
    self.names = tuple(names) + (NONE,)
    self.labels = tuple(labels) + (None,)
    first = [self.tokenizer.encode(' ' + n)[0] for n in self.names]
    if len(set(first)) != len(first):
      raise ValueError('SpanLM: two values share a first token; the '
                       'one-token grammar cannot tell them apart')
    self._choices = np.asarray(first)
    self.model = pretrained.from_pretrained(
        FlaxAutoModelForCausalLM, model_dir, 'value classifier checkpoint')
    model = self.model

    def last_logits(params, ids, mask, positions):
      return model(ids, attention_mask=mask, position_ids=positions,
                   params=params).logits[:, -1]

    self._last_logits = jax.jit(last_logits)
    self.params = self.model.params
    self.tuned = None  # tune's report
    self.head = (
        'Each phrase from a video description is mapped to one value of '
        'this list, or none.\nValues: ' + ', '.join(self.names) + '.\n' +
        ''.join(f'Phrase: {p}\nValue: {n}\n' for p, n in shots))
    self.margin = float(margin)
    self.batch_size = batch_size
    self._cache: dict[str, np.ndarray] = {}
    self.calls = 0  # forward passes
    self._prior = self._scores(list(_CONTENT_FREE)).mean(axis=0)

  def _prompt(self, phrase: str) -> str:
    return f'{self.head}Phrase: {phrase}\nValue:'

  def _encode(self, phrases: list[str], length: int | None = None):
    """Left-padded ``(ids, mask, positions)`` of the prompts of
    ``phrases``, ``length`` tokens (default: the longest, rounded up to a
    multiple of 16: one shape per length)."""
    enc = self.tokenizer([self._prompt(s) for s in phrases],
                         return_tensors='np', padding='longest')
    mask = enc['attention_mask']
    length = length or -(-mask.shape[1] // 16) * 16
    if mask.shape[1] > length:
      raise ValueError(f'SpanLM: a prompt of {mask.shape[1]} tokens is '
                       f'longer than {length}')
    ids = np.pad(enc['input_ids'], ((0, 0), (length - mask.shape[1], 0)),
                 constant_values=self.tokenizer.pad_token_id)
    mask = np.pad(mask, ((0, 0), (length - mask.shape[1], 0)))
    return ids, mask, np.maximum(np.cumsum(mask, axis=1) - 1, 0)

  def tune(self, pairs, steps: int = 150, batch_size: int = 16,
           rank: int = 8, alpha: float = 16.0, learning_rate: float = 1e-3,
           seed: int = 0) -> dict:
    """Fits a LoRA adapter on ``pairs`` (``(phrase, name)``, ``name`` one
    of the values or ``'none'``), the prompt bare (no list, no examples),
    and merges it; returns (and keeps in ``tuned``) the first and last
    losses, the training accuracy and the seconds taken. Deterministic for
    a seed. Each batch is padded to its own longest prompt (a multiple of
    16 tokens: a few programs), and the base weights are an argument of
    the step, not constants folded into it."""
    import time  # pylint: disable=g-import-not-at-top
    import optax  # pylint: disable=g-import-not-at-top
    from recovr_jax.reasoning import lora  # pylint: disable=g-import-not-at-top
    index = {n: i for i, n in enumerate(self.names)}
    unknown = sorted({n for _, n in pairs if n not in index})
    if unknown or not pairs:
      raise ValueError(f'SpanLM.tune: names not among the values: {unknown}'
                       if unknown else 'SpanLM.tune: no pairs')
    self.head = 'Value of the phrase.\n'
    self._cache = {}
    phrases = [p for p, _ in pairs]
    targets = np.asarray([index[n] for _, n in pairs], np.int32)
    start = time.time()
    ids, mask, positions = self._encode(phrases)
    lengths = mask.sum(axis=1)
    base = self.model.params
    adapter = lora.init(base, rank, seed=seed)
    scale = alpha / rank
    optimiser = optax.adam(learning_rate)
    state = optimiser.init(adapter)
    model, choices = self.model, jnp.asarray(self._choices)

    def loss_fn(adapter, base, ids, mask, positions, target):
      logits = model(ids, attention_mask=mask, position_ids=positions,
                     params=lora.merge(base, adapter, scale)).logits[:, -1]
      chosen = logits[:, choices].astype(jnp.float32)
      loss = optax.softmax_cross_entropy_with_integer_labels(chosen, target)
      return loss.mean(), jnp.mean(jnp.argmax(chosen, axis=1) == target)

    @jax.jit
    def step(adapter, state, base, ids, mask, positions, target):
      (loss, right), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          adapter, base, ids, mask, positions, target)
      updates, state = optimiser.update(grads, state, adapter)
      return optax.apply_updates(adapter, updates), state, loss, right

    rng = np.random.default_rng(seed)
    order, curve = np.zeros(0, np.int64), []
    for _ in range(steps):
      if len(order) < batch_size:
        order = np.concatenate([order, rng.permutation(len(pairs))])
      batch, order = order[:batch_size], order[batch_size:]
      width = -(-int(lengths[batch].max()) // 16) * 16  # left padding kept
      adapter, state, loss, right = step(
          adapter, state, base, ids[batch, -width:], mask[batch, -width:],
          positions[batch, -width:], targets[batch])
      curve.append((float(loss), float(right)))
    self.params = lora.merge(base, adapter, scale)
    self._prior = self._scores(list(_CONTENT_FREE)).mean(axis=0)
    found = np.argmax(self._scores(phrases) - self._prior, axis=1)
    self.tuned = {'steps': steps, 'pairs': len(pairs), 'rank': rank,
                  'first_loss': curve[0][0], 'last_loss': curve[-1][0],
                  'train_accuracy': float(np.mean(found == targets)),
                  'seconds': round(time.time() - start, 1)}
    return self.tuned

  def _scores(self, spans: list[str]) -> np.ndarray:
    """``[n, choices]`` log-probabilities of each choice's first token."""
    out = []
    for start in range(0, len(spans), self.batch_size):
      batch = spans[start:start + self.batch_size]
      pad = self.batch_size - len(batch)  # one shape per length
      ids, mask, positions = self._encode(batch + [''] * pad)
      logits = self._last_logits(self.params, ids, mask, positions)
      self.calls += 1
      chosen = np.asarray(logits, np.float64)[:len(batch)][:, self._choices]
      out.append(chosen - np.logaddexp.reduce(chosen, axis=1, keepdims=True))
    return np.concatenate(out) if out else np.zeros((0, len(self.names)))

  def classify(self, spans: Sequence[str]) -> list:
    """``(label, margin)`` per span: the calibrated best value's label (None
    for ``none`` or a margin below ``margin``) and its lead over the next
    choice."""
    new = [s for s in dict.fromkeys(spans) if s not in self._cache]
    if new:
      for s, row in zip(new, self._scores(new) - self._prior):
        self._cache[s] = row
    out = []
    for s in spans:
      row = self._cache[s]
      order = np.argsort(-row, kind='stable')
      lead = float(row[order[0]] - row[order[1]])
      label = self.labels[int(order[0])]
      out.append((label if lead >= self.margin else None, lead))
    return out
