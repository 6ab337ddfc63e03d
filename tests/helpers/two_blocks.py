"""A small real LM for tests: the installed SmolLM2's first two blocks as a
transformers Flax directory (its tokenizer and chat template included),
with a checksum manifest (the loaders refuse unverified directories)."""

import pathlib
import tempfile

from recovr_jax import checksums
from recovr_jax.reasoning import gguf_llama
from third_party import transformers_flax_llama


def write() -> dict:
  """``{'dir', 'tensors', 'kwargs', 'model', 'params'}`` of a fresh
  directory holding SmolLM2's first two blocks."""
  transformers_flax_llama.install()
  from transformers import FlaxLlamaForCausalLM, LlamaConfig, PreTrainedTokenizerFast  # pylint: disable=g-import-not-at-top,g-multiple-import
  config, tensors, vocab = gguf_llama.read(gguf_llama.find_smollm2())
  kwargs = dict(config, num_hidden_layers=2)
  keep = {k: v for k, v in tensors.items()
          if not k.startswith('model.layers.') or int(k.split('.')[2]) < 2}
  d = pathlib.Path(tempfile.mkdtemp()) / 'smollm2_2_blocks'
  model = FlaxLlamaForCausalLM(LlamaConfig(**kwargs), _do_init=False)
  params = gguf_llama.flax_params(kwargs, keep)
  model.save_pretrained(str(d), params=params)
  tokens = vocab['tokens']
  PreTrainedTokenizerFast(
      tokenizer_object=gguf_llama.tokenizer(vocab), bos_token=tokens[1],
      eos_token=tokens[2], pad_token=tokens[2], unk_token=tokens[0],
      chat_template=vocab['chat_template']).save_pretrained(str(d))
  checksums.write_manifest(d)
  return {'dir': d, 'tensors': keep, 'kwargs': kwargs, 'model': model,
          'params': params}
