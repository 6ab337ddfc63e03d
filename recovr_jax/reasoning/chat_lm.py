"""The ``flax_lm`` backend for instruction-tuned Llama checkpoints (SmolLM2).

Requests become chat prompts (``reasoning.prompts``: a system description of
the module, optional few-shot examples, the request) rendered with the
checkpoint's chat template. Replies are decoded greedily with the key/value
cache of transformers' Flax Llama, batched across sessions, and constrained
by each module's JSON schema (``reasoning.constrained``), so first-pass
validity is 100% by construction. ``constrained=False`` decodes freely and
keeps the parse / retry / rules-fallback path, which is counted.

Weights load from ``flax_model.msgpack`` or from a ``model.safetensors`` in
transformers' PyTorch naming; ``dtype='bfloat16'`` halves their memory. A
LoRA adapter (``reasoning.lora``) is merged into the weights at load.
"""

import collections
import dataclasses
import json
import os
import pathlib
import sys
import time

import jax.numpy as jnp
import numpy as np

from recovr_jax import checksums
from recovr_jax import config_tree
from recovr_jax import paths
from recovr_jax import readers
from recovr_jax.reasoning import constrained
from recovr_jax.reasoning import flax_lm
from recovr_jax.reasoning import llama_decode
from recovr_jax.reasoning import prompts
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import schemas

DTYPES = ('float32', 'bfloat16')


def is_chat_checkpoint(model_dir) -> bool:
  """A Llama checkpoint whose tokenizer has a chat template."""
  d = pathlib.Path(model_dir)
  try:
    config = readers.read_json(d / 'config.json', 'checkpoint config')
    tok = readers.read_json(d / 'tokenizer_config.json', 'tokenizer config')
  except (OSError, json.JSONDecodeError):
    return False
  has_template = bool(tok.get('chat_template')) or (
      d / 'chat_template.jinja').is_file()
  return config.get('model_type') == 'llama' and has_template


def load_params(model_dir, config):
  """Parameters of ``FlaxLlamaForCausalLM`` from msgpack or safetensors."""
  d = pathlib.Path(model_dir)
  if (d / 'flax_model.msgpack').is_file():
    from flax import serialization  # pylint: disable=g-import-not-at-top
    try:
      params = serialization.msgpack_restore(
          (d / 'flax_model.msgpack').read_bytes())
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'{d / "flax_model.msgpack"} cannot be read '
                       f'({type(e).__name__}: {e})') from e
    return params
  if (d / 'model.safetensors').is_file():
    from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
    from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
    try:
      tensors = st.load_file(str(d / 'model.safetensors'))
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'{d / "model.safetensors"} cannot be read '
                       f'({type(e).__name__}: {e})') from e
    tensors = {k: np.asarray(v, np.float32) for k, v in tensors.items()}
    return gguf_llama.flax_params(config.to_dict(), tensors)
  raise FileNotFoundError(f'reasoner checkpoint {str(d)!r} has neither '
                          'flax_model.msgpack nor model.safetensors')


class ChatLMReasoner(flax_lm.LMReasoner):
  """Reasoning through a chat Llama checkpoint, with the rules fallback."""

  name = 'flax_lm'

  def __init__(self, model_dir: str, fallback, batch_size: int = 16,
               wording: int = 1, examples=None, system: bool = True,
               constrained_decoding: bool = True, dtype: str = 'float32',
               adapter: str | None = None, preprocess=None,
               limits: constrained.Limits = constrained.Limits(),
               reflect_literals: dict | None = None):
    """Loads ``model_dir`` (and merges ``adapter`` if given).

    Args:
      model_dir: a transformers Llama directory with ``config.json``, weights
        (``flax_model.msgpack`` or ``model.safetensors``) and a tokenizer
        with a chat template.
      fallback: the backend used when a free output stays invalid.
      batch_size: sessions per generation call (padded to it).
      wording: which of ``prompts.WORDINGS`` to use.
      examples: module -> sequence of ``prompts.Example`` (few-shot).
      system: include the system description of the module.
      constrained_decoding: decode under each module's JSON grammar.
      dtype: ``float32`` or ``bfloat16`` parameters and activations.
      adapter: a LoRA adapter directory (``reasoning.lora``).
      preprocess: optional ``request -> request`` before prompting.
      limits: token budgets of the constrained grammar.
      reflect_literals: attribute -> values: under constrained decoding the
        Reflector's keep / avoid items are these ``'attribute: value'``
        literals (one kept value per attribute, keep and avoid disjoint);
        ``None``: free-text items (real data).
    """
    from transformers import AutoTokenizer, LlamaConfig  # pylint: disable=g-import-not-at-top,g-multiple-import
    if dtype not in DTYPES:
      raise ValueError(f'dtype must be one of {DTYPES}, got {dtype!r}')
    if wording not in prompts.WORDINGS:
      raise ValueError(f'wording must be one of {prompts.WORDINGS}, got '
                       f'{wording!r}')
    if not os.path.isfile(os.path.join(model_dir, 'config.json')):
      raise FileNotFoundError(f'reasoner checkpoint {model_dir!r} has no '
                              'config.json')
    checksums.verify_manifest(model_dir, 'reasoner checkpoint')
    self.model_dir = model_dir
    self.config = LlamaConfig.from_pretrained(model_dir)
    if adapter:  # checked against the model before its weights load
      from recovr_jax.reasoning import lora  # pylint: disable=g-import-not-at-top
      adapter_params = lora.load(adapter)
      lora.check(adapter_params, f'LoRA adapter {adapter}', self.config)
    params = load_params(model_dir, self.config)
    if adapter:
      params = lora.merge(params, adapter_params)
    checksums.check_finite(params, f'reasoner checkpoint {model_dir}')
    jdtype = jnp.bfloat16 if dtype == 'bfloat16' else jnp.float32
    self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not self.tokenizer.chat_template:
      raise ValueError(f'reasoner checkpoint {model_dir!r}: the tokenizer '
                       'has no chat template')
    self.fallback = fallback
    self.preprocess = preprocess
    self.batch_size = batch_size
    self.wording = wording
    self.examples = dict(examples or {})
    self.system = system
    self.constrained_decoding = constrained_decoding
    self.strict = constrained_decoding  # an invalid reply would be a bug
    self.dtype = dtype
    self.limits = limits
    self.reflect_literals = (None if reflect_literals is None else
                             {str(a): tuple(str(v) for v in values)
                              for a, values in reflect_literals.items()})
    self.stats = {m: collections.Counter() for m in schemas.MODULES}
    self.timing = collections.Counter()
    self._reported = 0.0  # generation seconds at the last progress line

    # Decoding runs llama_decode's layout of the same computation (weights
    # as [out, in], a head-major cache); tests check it against
    # transformers' FlaxLlamaForCausalLM.
    shape = llama_decode.Shape.of(self.config)
    self.params = llama_decode.prepare(params, shape, jdtype)
    del params

    def apply_fn(params, ids, mask, positions, cache):
      return llama_decode.forward(shape, params, ids, mask, positions, cache)

    def init_cache(batch, length):
      return llama_decode.init_cache(shape, batch, length, jdtype)

    self.vocab = constrained.Vocabulary(self.tokenizer, self.config.vocab_size)
    self.decoder = constrained.Decoder(apply_fn, llama_decode.logits,
                                       init_cache, self.vocab,
                                       llama_decode.grow)

  def _prompt(self, module, request):
    request = self.preprocess(request) if self.preprocess else request
    return prompts.render(self.tokenizer, module, request, self.wording,
                          self.examples.get(module, ()), self.system)

  def complete(self, module: str, requests, constrained_decoding=None,
               lead_override=None):
    """Raw reply texts (lead included) of ``requests`` to ``module``."""
    use_grammar = (self.constrained_decoding if constrained_decoding is None
                   else constrained_decoding)
    requests = list(requests)
    if not requests:
      return []
    rendered = [self._prompt(module, r) for r in requests]
    prefix = rendered[0][0]
    enc = self.vocab.encode
    prefix_ids = list(enc(prefix)) if prefix else []
    leads, grammars = [], []
    for _ in requests:
      if use_grammar:
        lead, gen = constrained.grammar(module, self.vocab, self.limits,
                                        literals=self.reflect_literals)
        steps = constrained.max_steps(module, self.limits,
                                      self.reflect_literals)
      else:
        lead = '' if lead_override is None else lead_override
        steps = constrained.max_steps(module, self.limits)
        gen = constrained.free(self.vocab, self.tokenizer.eos_token_id, steps)
      leads.append(lead)
      grammars.append(gen)
    # The lead apart from the prompt when the tokenizer splits there (it
    # does for SmolLM2's), so a prompt read by two modules runs once.
    lead_ids = list(enc(leads[0])) if leads[0] else []
    suffixes = [list(enc(s)) for _, s in rendered]
    if len(set(leads)) > 1 or any(
        list(enc(s + lead)) != ids + lead_ids
        for (_, s), lead, ids in zip(rendered, leads, suffixes)):
      lead_ids = []
      suffixes = [list(enc(s + lead)) for (_, s), lead in zip(rendered,
                                                             leads)]
    start = time.perf_counter()
    texts, decoded = self.decoder.generate(
        self.params, (module, self.wording, prefix), prefix_ids, suffixes,
        grammars, self.batch_size, steps + 1, lead=lead_ids)
    self.timing['seconds'] += time.perf_counter() - start
    self.timing['decoded_tokens'] += decoded
    self.timing['prompt_tokens'] += sum(len(x) + len(lead_ids)
                                        for x in suffixes)
    self.timing['requests'] += len(requests)
    self._report_progress()
    eos = self.tokenizer.eos_token
    return [lead + t.split(eos)[0] if eos else lead + t
            for lead, t in zip(leads, texts)]

  def chat(self, conversations, max_tokens: int = 48) -> list[str]:
    """Free greedy replies to ``conversations`` (each a list of ``{'role',
    'content'}`` messages, rendered with the checkpoint's chat template),
    at most ``max_tokens`` each: for callers outside the reasoning modules
    (the real-data user's phrasing, ``envs.files.caption_user.LMPhraser``)."""
    conversations = list(conversations)
    if not conversations:
      return []
    suffixes = [list(self.vocab.encode(self.tokenizer.apply_chat_template(
        c, tokenize=False, add_generation_prompt=True)))
                for c in conversations]
    eos_id = self.tokenizer.eos_token_id
    grammars = [constrained.free(self.vocab, eos_id, max_tokens)
                for _ in conversations]
    start = time.perf_counter()
    texts, decoded = self.decoder.generate(
        self.params, ('chat', max_tokens, ''), [], suffixes, grammars,
        self.batch_size, max_tokens + 1)
    self.timing['seconds'] += time.perf_counter() - start
    self.timing['decoded_tokens'] += decoded
    self.timing['prompt_tokens'] += sum(map(len, suffixes))
    self.timing['requests'] += len(conversations)
    eos = self.tokenizer.eos_token
    return [(t.split(eos)[0] if eos else t).strip() for t in texts]

  def _report_progress(self, every: float = 30.0):
    """A line on stderr at most every ``every`` seconds of generation, so a
    long batch of sessions shows that it is moving."""
    t = self.timing
    if t['seconds'] - self._reported >= every:
      self._reported = t['seconds']
      print(f'[reasoner] {int(t["requests"]):,} requests, '
            f'{int(t["decoded_tokens"]):,} tokens decoded in '
            f'{t["seconds"]:.0f}s ({t["decoded_tokens"] / t["seconds"]:.1f} '
            'tokens/s)', file=sys.stderr, flush=True)

  def attempts(self):
    """Constrained: one pass. Free: a pass, then a retry starting ``{``."""
    return (None,) if self.constrained_decoding else ('', '{')

  def texts(self, module: str, requests, attempt) -> list[str]:
    return self.complete(module, requests, lead_override=attempt)

  def speed(self) -> dict:
    """Generation time and tokens so far (prompt suffix and decoded)."""
    return {k: float(v) for k, v in self.timing.items()}


CHAT_BACKENDS = ('smollm2', 'smollm2_world')
DEFAULT_ADAPTER_DIR = str(paths.CHECKPOINTS /
                          'smollm2_world')


def adapter_meta(directory: str = DEFAULT_ADAPTER_DIR) -> dict:
  """The adapter's ``adapter.json``: its prompt, training report and the
  data it was trained on."""
  return readers.read_json(pathlib.Path(directory) / 'adapter.json',
                           'adapter description')


def model_config(checkpoint=None):
  """The ``LlamaConfig`` of a chat checkpoint directory, or of the installed
  SmolLM2 GGUF (read from its header) when ``checkpoint`` is None; no
  weights are read."""
  from transformers import LlamaConfig  # pylint: disable=g-import-not-at-top
  if checkpoint:
    return LlamaConfig.from_pretrained(checkpoint)
  from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
  return LlamaConfig(**gguf_llama.header_config(gguf_llama.find_smollm2()))


def make(backend: str, fallback, checkpoint=None, examples=None,
         few_shot: int | None = None, wording: int = 1,
         dtype: str = 'float32', constrained_decoding: bool = True,
         batch_size: int = 16, preprocess=None,
         reflect_literals: dict | None = None,
         adapter: str | None = None) -> ChatLMReasoner:
  """The ``smollm2`` (zero-shot, ``few_shot`` examples, default 3) or
  ``smollm2_world`` (a LoRA adapter, default the shipped one, prompted as it
  was trained: no system message, default 0 examples) reasoner.

  ``examples``: module -> ``prompts.Example``s to draw the few-shot examples
  from (``None``: none available).
  """
  from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
  if backend not in CHAT_BACKENDS:
    raise ValueError(f'unknown chat reasoner {backend!r}; valid: '
                     f'{", ".join(CHAT_BACKENDS)}')
  world = backend == 'smollm2_world'
  if few_shot is None:
    few_shot = 0 if world or examples is None else 3
  if few_shot < 0:
    raise ValueError(f'few_shot must be >= 0, got {few_shot}')
  if few_shot and examples is None:
    raise ValueError('few-shot examples are only available on the world '
                     '(use --few_shot=0)')
  chosen = {m: tuple(v)[:few_shot] for m, v in (examples or {}).items()}
  model_dir = checkpoint or str(gguf_llama.ensure_converted())
  if world:
    adapter = adapter or DEFAULT_ADAPTER_DIR
    system = adapter_meta(adapter)['prompt']['system']
  else:
    if adapter:
      raise ValueError('an adapter is for smollm2_world, not smollm2')
    system = True
  return ChatLMReasoner(model_dir, fallback, batch_size=batch_size,
                        wording=wording, examples=chosen, system=system,
                        constrained_decoding=constrained_decoding,
                        dtype=dtype, adapter=adapter, preprocess=preprocess,
                        reflect_literals=reflect_literals)


@dataclasses.dataclass(frozen=True)
class ChatConfig(registry.CheckpointConfig):
  """``smollm2``'s settings (``make``'s)."""
  NAME = 'chat'
  #: smollm2*: examples per module in the prompt, drawn from the training
  #: split and answered by the rules backend (default: 3 for smollm2, 0 for
  #: smollm2_world, as it was trained; 0 on real data).
  few_shot: int | None = config_tree.setting(None)
  #: smollm2*: which of the three wordings of the prompt suite
  #: (reasoning/prompts.py; the paper's Table 9).
  wording: int = config_tree.setting(1, flag='prompt_wording',
                                     choices=(1, 2, 3), sweep=True)
  #: smollm2*: parameter and activation dtype.
  dtype: str = config_tree.setting('float32', flag='reasoner_dtype',
                                   choices=('float32', 'bfloat16'))
  #: smollm2*: decode under each module's JSON grammar (valid by
  #: construction); off: free decoding with one retry, then the rules
  #: fallback (counted in report.md).
  constrained_decoding: bool = config_tree.setting(True)
  #: smollm2*: sessions per generation call.
  batch_size: int = config_tree.setting(64, flag='reasoner_batch')


@dataclasses.dataclass(frozen=True)
class AdaptedChatConfig(ChatConfig):
  """``smollm2_world``'s settings: ``smollm2``'s and its adapter."""
  NAME = 'adapted_chat'
  #: smollm2_world, grounded_smollm2: a LoRA adapter directory written by
  #: experiments/train/train_adapter.py (default: the shipped
  #: recovr_jax/checkpoints/smollm2_world); its recorded data recipe is
  #: checked as the shipped one is.
  adapter: str | None = config_tree.setting(None, flag='reasoner_adapter')


class _Chat(registry.Backend):
  """``smollm2`` (zero-shot or few-shot) and ``smollm2_world`` (with its
  LoRA adapter): ``make`` above over the source's vocabulary."""

  def __init__(self, name: str, adapter: bool):
    self.NAME = name  # pylint: disable=invalid-name
    self.adapter = adapter
    self.CONFIG = AdaptedChatConfig if adapter else ChatConfig  # pylint: disable=invalid-name

  def adapter_dir(self, config) -> pathlib.Path:
    return pathlib.Path(config.adapter or DEFAULT_ADAPTER_DIR)

  def problems(self, config, vocab):
    if config.batch_size < 1:
      return ['--reasoner_batch must be >= 1']
    if config.few_shot is not None and config.few_shot < 0:
      return ['--few_shot must be >= 0']
    if config.few_shot and vocab.examples is None:
      return [f'--few_shot: --data={vocab.data} has no examples to draw; '
              'use 0']
    if config.checkpoint:
      if not is_chat_checkpoint(config.checkpoint):
        return [f'--reasoner_checkpoint {config.checkpoint}: not a Llama '
                'directory with a chat template (config.json, '
                'tokenizer_config.json); experiments/train/convert_gguf.py writes '
                'one']
    else:
      from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
      problem = gguf_llama.smollm2_problem()
      if problem:
        return [f'--reasoner={config.name}: {problem}']
    if not self.adapter:
      return []
    adapter = self.adapter_dir(config)
    if not (adapter / 'adapter.json').is_file():
      return [f'--reasoner={config.name}: the adapter {adapter} is missing '
              '(no adapter.json); experiments/train/train_adapter.py writes it']
    from recovr_jax.reasoning import lora  # pylint: disable=g-import-not-at-top
    try:  # its files, tensors, layers and shapes, before any model loads
      lora.check(lora.load(adapter), f'LoRA adapter {adapter}',
                 model_config(config.checkpoint))
    except (OSError, ValueError) as e:
      return [f'--reasoner={config.name}: {e}']
    if vocab.check_adapter is not None:
      try:
        vocab.check_adapter(adapter_meta(adapter))
      except (OSError, ValueError) as e:
        return [f'--reasoner={config.name}: {adapter / "adapter.json"}: {e}']
    return []

  def inputs(self, config, vocab):
    del vocab
    if config.checkpoint:
      paths = {'reasoner_checkpoint': config.checkpoint}
    else:
      from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
      paths = {'reasoner_gguf': str(gguf_llama.find_smollm2())}
    if self.adapter:
      paths['reasoner_adapter'] = str(self.adapter_dir(config))
    return paths

  def make(self, config, vocab, encode_text=None, **kwargs):
    del encode_text, kwargs
    # The spelling fixer in front of the model when the adapter was trained
    # with it (the zero-shot model: always).
    fixer = not self.adapter or adapter_meta(self.adapter_dir(config))[
        'prompt'].get('spelling_fixer', True)
    return make(self.NAME, vocab.rules(), config.checkpoint,
                examples=vocab.examples(8) if vocab.examples else None,
                preprocess=vocab.preprocess if fixer else None,
                reflect_literals=vocab.literals, few_shot=config.few_shot,
                wording=config.wording, dtype=config.dtype,
                constrained_decoding=config.constrained_decoding,
                batch_size=config.batch_size,
                adapter=config.adapter if self.adapter else None)


SMOLLM2 = _Chat('smollm2', adapter=False)
SMOLLM2_WORLD = _Chat('smollm2_world', adapter=True)
