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

The grounding reader uses it for the spans neither the lexicon nor WordNet
reads (``GroundingReader(confirm=...)``; option ``lm_spans`` of
``envs.world.models.reader_fit``). This module knows no vocabulary: the
values, their labels and the examples are injected.
"""

from collections.abc import Sequence

import jax
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

  def _scores(self, spans: list[str]) -> np.ndarray:
    """``[n, choices]`` log-probabilities of each choice's first token."""
    out = []
    for start in range(0, len(spans), self.batch_size):
      batch = spans[start:start + self.batch_size]
      pad = self.batch_size - len(batch)  # one shape per length
      enc = self.tokenizer([self._prompt(s) for s in batch + [''] * pad],
                           return_tensors='np', padding='longest')
      mask = enc['attention_mask']
      length = -(-mask.shape[1] // 16) * 16
      ids = np.pad(enc['input_ids'], ((0, 0), (length - mask.shape[1], 0)),
                   constant_values=self.tokenizer.pad_token_id)
      mask = np.pad(mask, ((0, 0), (length - mask.shape[1], 0)))
      positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
      logits = self._last_logits(self.model.params, ids, mask, positions)
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
