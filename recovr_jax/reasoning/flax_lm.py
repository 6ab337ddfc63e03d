"""The ``flax_lm`` reasoning backend: any local transformers Flax causal LM.

Prompts for every module live in ``reasoning.prompts`` (``PLAIN``).
Generation is greedy and batched across sessions with fixed padded shapes
(one compile per prompt length bucket). Each output is parsed as JSON and validated against its
module's schema; an invalid output gets one retry with a stricter prompt and
then the rules fallback. First-pass validity, retries and fallbacks are
counted per module (``stats``).
"""

import collections
import json
import os

from absl import logging
import jax
import numpy as np

from recovr_jax import checksums
from recovr_jax import pretrained
from recovr_jax.reasoning import prompts
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import schemas

PROMPTS = prompts.PLAIN  # the plain prompts (reasoning/prompts.py)
RETRY_SUFFIX = ' {'  # the retry starts the object for the model
MAX_FIELD_CHARS = 800
_REQUIRED_FILES = ('config.json', 'flax_model.msgpack')


def prompt(module: str, request) -> str:
  """The prompt of one request; long free text is cut with a warning."""
  def cut(text):
    text = str(text)
    if len(text) > MAX_FIELD_CHARS:
      logging.warning('reasoning input of %d characters truncated to %d',
                      len(text), MAX_FIELD_CHARS)
      text = text[:MAX_FIELD_CHARS]
    return text.replace('\n', ' ')

  if module in ('intent', 'reflect'):
    m = request.memory
    return PROMPTS[module].format(
        keep=cut('; '.join(m.keep)), avoid=cut('; '.join(m.avoid)),
        shown=cut(request.shown_caption), feedback=cut(request.feedback))
  if module == 'question':
    return PROMPTS[module].format(
        keep='; '.join(request.memory.keep),
        candidates=cut(' | '.join(request.candidate_captions)))
  return PROMPTS[module].format(reference=cut(request.reference_caption),
                                modification=cut(request.modification))


def parse_json(text: str):
  """The first balanced ``{...}`` object in ``text``, or ``None``."""
  start = text.find('{')
  while start != -1:
    depth, in_string, escape = 0, False, False
    for i in range(start, len(text)):
      ch = text[i]
      if in_string:
        if escape:
          escape = False
        elif ch == '\\':
          escape = True
        elif ch == '"':
          in_string = False
      elif ch == '"':
        in_string = True
      elif ch == '{':
        depth += 1
      elif ch == '}':
        depth -= 1
        if depth == 0:
          try:
            return json.loads(text[start:i + 1])
          except json.JSONDecodeError:
            break
    start = text.find('{', start + 1)
  return None


def check_model_dir(model_dir: str) -> None:
  """Raises naming every file a Flax LM directory lacks."""
  if not os.path.isdir(model_dir):
    raise FileNotFoundError(f'reasoner checkpoint {model_dir!r} is not a '
                            'directory')
  missing = [f for f in _REQUIRED_FILES
             if not os.path.isfile(os.path.join(model_dir, f))]
  has_tokenizer = os.path.isfile(os.path.join(model_dir, 'tokenizer.json')) or (
      os.path.isfile(os.path.join(model_dir, 'vocab.json')) and
      os.path.isfile(os.path.join(model_dir, 'merges.txt')))
  if not has_tokenizer:
    missing.append('tokenizer.json (or vocab.json and merges.txt)')
  if missing:
    raise FileNotFoundError(f'reasoner checkpoint {model_dir!r} is missing: '
                            f'{", ".join(missing)}')


class LMReasoner:
  """What the LM backends share: parsing and validating replies, the retry,
  the rules fallback and their counts; the modules that need no model
  (rewriting, matching constraints to captions) are the fallback's.

  A subclass sets ``fallback``, ``stats`` (module -> Counter) and ``strict``
  (an invalid reply is a bug, e.g. under constrained decoding) and defines
  ``attempts()`` (one argument per pass) and ``texts(module, requests,
  attempt)`` (the full reply texts of one pass).
  """

  strict = False

  def call(self, module: str, requests) -> schemas.Outputs:
    """The outputs of ``module`` and their first-pass validity."""
    requests = list(requests)
    results = [None] * len(requests)
    first_pass = [False] * len(requests)
    pending = list(range(len(requests)))
    for attempt, arg in enumerate(self.attempts()):
      if not pending:
        break
      texts = self.texts(module, [requests[i] for i in pending], arg)
      still = []
      for i, text in zip(pending, texts):
        obj = parse_json(text)
        try:
          results[i] = schemas.validate(module, obj)
          first_pass[i] = attempt == 0
          self.stats[module]['first_pass_valid' if attempt == 0
                             else 'retry_valid'] += 1
        except schemas.SchemaError:
          still.append(i)
      pending = still
    if pending and self.strict:
      raise RuntimeError(f'{module}: {len(pending)} invalid replies under '
                         'constrained decoding')
    if pending:
      fallback = self.fallback.call(module, [requests[i] for i in pending])
      for i, obj in zip(pending, fallback.objects):
        results[i] = obj
      self.stats[module]['fallback'] += len(pending)
    self.stats[module]['calls'] += len(requests)
    return schemas.Outputs(results, first_pass)

  def intent(self, requests):
    return self.call('intent', requests).objects

  def reflect(self, requests):
    return self.call('reflect', requests).objects

  def question(self, requests):
    return self.call('question', requests).objects

  def t2v_init(self, requests):
    return self.call('t2v_init', requests).objects

  def rewrite(self, dialogue):
    """Full-history rewriting has no prompt: the fallback's."""
    return self.fallback.rewrite(dialogue)

  def constraint_hits(self, constraints, captions):
    """Matching constraints to captions is the fallback's parsing."""
    return self.fallback.constraint_hits(constraints, captions)

  def caption_values(self, captions):
    return self.fallback.caption_values(captions)

  def attribute_question(self, attribute, value=None):
    return self.fallback.attribute_question(attribute, value)

  def validity(self) -> dict:
    """Per module: calls, first-pass validity rate, retries, fallbacks."""
    out = {}
    for module, c in self.stats.items():
      if c['calls']:
        out[module] = {'calls': c['calls'],
                       'first_pass_valid': c['first_pass_valid'] / c['calls'],
                       'retry_valid': c['retry_valid'],
                       'fallback': c['fallback']}
    return out


class FlaxLMReasoner(LMReasoner):
  """Reasoning through a local Flax causal LM, with the rules fallback."""

  name = 'flax_lm'

  def __init__(self, model_dir: str, fallback, batch_size: int = 32,
               max_new_tokens: int = 96, max_prompt_tokens: int = 192,
               preprocess=None):
    """Loads ``model_dir``.

    Args:
      model_dir: a transformers Flax causal-LM directory with its tokenizer.
      fallback: the backend used when an output stays invalid (a
        ``reasoning.rules`` backend).
      batch_size: prompts per generation call (padded to it).
      max_new_tokens: generation budget per output.
      max_prompt_tokens: prompts are cut from the left to this length.
      preprocess: optional ``request -> request`` applied before prompting
        (the trained world reasoner uses the lexicon's spelling fixer).
    """
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    from transformers import FlaxAutoModelForCausalLM  # pylint: disable=g-import-not-at-top
    from third_party import transformers_flax_llama  # pylint: disable=g-import-not-at-top
    # Llama checkpoints (SmolLM2) need the rotary base from their config.
    transformers_flax_llama.install()
    check_model_dir(model_dir)
    checksums.verify_manifest(model_dir, 'reasoner checkpoint')
    self.model_dir = model_dir
    try:
      self.model = pretrained.from_pretrained(
          FlaxAutoModelForCausalLM, model_dir, 'reasoner checkpoint')
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'reasoner checkpoint {model_dir!r} cannot be loaded '
                       f'({type(e).__name__}: {e}); is flax_model.msgpack '
                       'complete?') from e
    checksums.check_finite(self.model.params,
                           f'reasoner checkpoint {model_dir}')
    self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
    self.tokenizer.padding_side = 'left'
    self.tokenizer.truncation_side = 'left'  # keep the end of the prompt
    if self.tokenizer.pad_token is None:
      self.tokenizer.pad_token = self.tokenizer.eos_token
    self.fallback = fallback
    self.preprocess = preprocess
    self.batch_size = batch_size
    self.max_new_tokens = max_new_tokens
    # Prompt and reply must fit the model's positions (the world GPT-2 has
    # 256): longer prompts lose their start, as the tokenizer cuts left.
    positions = (getattr(self.model.config, 'n_positions', None) or
                 getattr(self.model.config, 'max_position_embeddings', None))
    if positions is not None:
      if positions <= max_new_tokens:
        raise ValueError(f'max_new_tokens={max_new_tokens} leaves no room '
                         f'for a prompt in {positions} positions')
      max_prompt_tokens = min(max_prompt_tokens, positions - max_new_tokens)
    self.max_prompt_tokens = max_prompt_tokens
    self.stats = {m: collections.Counter() for m in schemas.MODULES}
    model, tok = self.model, self.tokenizer

    def generate(params, ids, mask):
      return model.generate(
          ids, attention_mask=mask, params=params,
          max_new_tokens=max_new_tokens, do_sample=False,
          pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
      ).sequences

    self._generate = jax.jit(generate)

  def generate(self, prompt_texts: list[str]) -> list[str]:
    """Greedy completions of ``prompts``, batched with padded shapes."""
    out = []
    for start in range(0, len(prompt_texts), self.batch_size):
      batch = prompt_texts[start:start + self.batch_size]
      tokens = self.tokenizer(batch, padding='longest', truncation=True,
                              max_length=self.max_prompt_tokens,
                              return_tensors='np')
      ids, mask = tokens['input_ids'], tokens['attention_mask']
      n, length = ids.shape
      width = min(self.max_prompt_tokens, -(-length // 16) * 16)
      pad_id = self.tokenizer.pad_token_id
      ids = np.pad(ids, ((0, self.batch_size - n), (width - length, 0)),
                   constant_values=pad_id)
      mask = np.pad(mask, ((0, self.batch_size - n), (width - length, 0)))
      mask[n:, -1] = 1  # padding rows: one real token keeps softmax finite
      seq = np.asarray(self._generate(self.model.params, ids, mask))
      out.extend(self.tokenizer.batch_decode(seq[:n, width:],
                                             skip_special_tokens=True))
    return out

  def attempts(self):
    """The first pass, then one retry that starts the JSON object."""
    return ('', RETRY_SUFFIX)

  def texts(self, module: str, requests, attempt: str) -> list[str]:
    prompt_texts = [prompt(module, self.preprocess(r) if self.preprocess else r)
               + attempt for r in requests]
    return [('{' + t) if attempt else t for t in self.generate(prompt_texts)]


class _FlaxLM(registry.Backend):
  """``flax_lm``: a Flax causal-LM checkpoint (``CheckpointConfig.checkpoint``,
  default the source's ``lm_checkpoint``) with the rules fallback."""
  NAME = 'flax_lm'
  CONFIG = registry.CheckpointConfig

  def directory(self, config, vocab):
    return config.checkpoint or vocab.lm_checkpoint

  def problems(self, config, vocab):
    directory = self.directory(config, vocab)
    if directory is None:
      return [f'--reasoner=flax_lm on --data={vocab.data} needs '
              '--reasoner_checkpoint (the shipped reasoner knows only the '
              "world's words)"]
    try:  # before any model loads
      check_model_dir(directory)
    except (FileNotFoundError, ValueError) as e:
      return [f'--reasoner_checkpoint: {e}']
    return []

  def inputs(self, config, vocab):
    directory = self.directory(config, vocab)
    return {'reasoner_checkpoint': directory} if directory else {}

  def make(self, config, vocab, encode_text=None, **kwargs):
    del encode_text
    directory = self.directory(config, vocab)
    if directory is None:
      raise ValueError(self.problems(config, vocab)[0])
    if vocab.lm_preprocess is not None:
      preprocess = vocab.lm_preprocess(directory)
      if preprocess is not None:
        kwargs.setdefault('preprocess', preprocess)
    return FlaxLMReasoner(str(directory), fallback=vocab.rules(), **kwargs)


BACKEND = _FlaxLM()
