"""Low-rank adapters (LoRA) for transformers' Flax Llama parameters.

An adapter holds, for each adapted ``Dense`` kernel ``W [in, out]``, factors
``a [in, r]`` and ``b [r, out]``; the adapted kernel is
``W + (alpha / r) a @ b``. ``b`` starts at zero, so a fresh adapter changes
nothing. Adapters are merged into the weights (``merge``), so the model code
is unchanged at training and at inference.

Saved as ``adapter.safetensors`` (flattened names, float32) and
``adapter.json`` (rank, alpha, targets and training report) with a checksum
manifest. ``export_peft`` writes it again in PEFT's layout
(``adapter_config.json``, ``adapter_model.safetensors`` with PEFT's tensor
names, ``lora_A = a^T``, ``lora_B = b^T``), so a PyTorch user can load it
with ``peft.PeftModel.from_pretrained(base, <directory>)``; the shipped
adapter keeps one copy (``python -m experiments.train.train_adapter
--export_peft=DIR`` writes the other).
"""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import readers
from recovr_jax import checksums

DEFAULT_TARGETS = ('q_proj', 'v_proj', 'o_proj', 'gate_proj', 'down_proj')
# The Llama block each projection lives in (PEFT's module paths).
BLOCKS = {'q_proj': 'self_attn', 'k_proj': 'self_attn', 'v_proj': 'self_attn',
          'o_proj': 'self_attn', 'gate_proj': 'mlp', 'up_proj': 'mlp',
          'down_proj': 'mlp'}
PEFT_DIR = 'peft'
PEFT_BASE = 'HuggingFaceTB/SmolLM2-135M-Instruct'


def init(params, rank: int, targets=DEFAULT_TARGETS, seed: int = 0) -> dict:
  """``{'layers': {i: {name: {'a', 'b'}}}}`` for the targeted kernels."""
  if rank < 1:
    raise ValueError(f'LoRA rank must be >= 1, got {rank}')
  key = jax.random.PRNGKey(seed)
  out = {}
  for i, layer in params['model']['layers'].items():
    for block in layer.values():
      for name, dense in block.items():
        if name not in targets or not isinstance(dense, dict):
          continue
        key, sub = jax.random.split(key)
        d_in, d_out = dense['kernel'].shape
        out.setdefault(i, {})[name] = {
            'a': jax.random.normal(sub, (d_in, rank), jnp.float32) /
                 np.sqrt(d_in),
            'b': jnp.zeros((rank, d_out), jnp.float32)}
  if not out:
    raise ValueError(f'no kernel named any of {targets} in the parameters')
  return {'layers': out}


def kernel_shapes(config) -> dict:
  """``{projection: (in, out)}`` of a Llama config's adaptable kernels."""
  hidden = config.hidden_size
  heads = config.num_attention_heads
  head_dim = getattr(config, 'head_dim', None) or hidden // heads
  kv = getattr(config, 'num_key_value_heads', None) or heads
  inter = config.intermediate_size
  return {'q_proj': (hidden, heads * head_dim),
          'k_proj': (hidden, kv * head_dim),
          'v_proj': (hidden, kv * head_dim),
          'o_proj': (heads * head_dim, hidden),
          'gate_proj': (hidden, inter), 'up_proj': (hidden, inter),
          'down_proj': (inter, hidden)}


def check(adapter: dict, source: str, config=None) -> None:
  """Every tensor of ``adapter`` is a factor of a Llama projection (by
  name), with both factors of one rank; with ``config`` (a ``LlamaConfig``)
  also in one of its layers, with its kernel's shape. Raises
  ``ValueError`` naming ``source`` and the tensor."""
  if not adapter.get('layers'):
    raise ValueError(f'{source}: the adapter holds no tensor')
  shapes = kernel_shapes(config) if config is not None else None
  for layer, names in adapter['layers'].items():
    if not str(layer).isdigit():
      raise ValueError(f'{source}: tensor {layer}/...: the layer is not a '
                       'number')
    if config is not None and int(layer) >= config.num_hidden_layers:
      raise ValueError(f'{source}: tensor {layer}/...: the model has '
                       f'{config.num_hidden_layers} layers (0..'
                       f'{config.num_hidden_layers - 1})')
    for name, ab in names.items():
      where = f'{source}: tensor {layer}/{name}'
      if name not in BLOCKS:
        raise ValueError(f'{where}: not a Llama projection (valid: '
                         f'{", ".join(BLOCKS)})')
      if set(ab) != {'a', 'b'}:
        raise ValueError(f'{where}: needs factors a and b, has '
                         f'{", ".join(sorted(ab)) or "none"}')
      a, b = np.shape(ab['a']), np.shape(ab['b'])
      if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise ValueError(f'{where}: factors of shapes {a} and {b} are not '
                         '[in, r] and [r, out]')
      if shapes is not None and (a[0], b[1]) != shapes[name]:
        raise ValueError(f'{where}: adapts a [{a[0]}, {b[1]}] kernel; the '
                         f'model\'s {name} is {list(shapes[name])}')


def merge(params, adapter: dict, scale: float | None = None):
  """``params`` with every adapted kernel replaced by ``W + s a @ b``
  (``check`` the adapter first: a name or layer the parameters lack is an
  error, never skipped)."""
  scale = adapter.get('scale', 1.0) if scale is None else scale
  layers = dict(params['model']['layers'])
  for i, names in adapter['layers'].items():
    if i not in layers:
      raise ValueError(f'LoRA adapter: no layer {i!r} in the parameters')
    layer = {}
    merged = set()
    for block_name, block in layers[i].items():
      block = dict(block)
      for name, ab in names.items():
        if name in block:
          kernel = block[name]['kernel']
          block[name] = {'kernel': kernel + scale * (ab['a'] @ ab['b']).astype(
              kernel.dtype)}
          merged.add(name)
      layer[block_name] = block
    missing = set(names) - merged
    if missing:
      raise ValueError(f'LoRA adapter: layer {i} has no kernel named '
                       f'{", ".join(sorted(missing))}')
    layers[i] = layer
  return {**params, 'model': {**params['model'], 'layers': layers}}


def num_parameters(adapter: dict) -> int:
  return int(sum(np.size(x) for x in jax.tree.leaves(adapter['layers'])))


def save(adapter: dict, directory, report: dict) -> pathlib.Path:
  from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
  d = pathlib.Path(directory).absolute()
  d.mkdir(parents=True, exist_ok=True)
  flat = {f'{i}/{name}/{k}': np.asarray(v, np.float32)
          for i, names in adapter['layers'].items()
          for name, ab in names.items() for k, v in ab.items()}
  st.save_file(flat, str(d / 'adapter.safetensors'))
  (d / 'adapter.json').write_text(json.dumps(
      {'scale': float(adapter.get('scale', 1.0)), **report}, indent=2))
  checksums.write_manifest(d)
  return d


def export_peft(directory, out, base: str = PEFT_BASE) -> pathlib.Path:
  """The adapter saved in ``directory`` (``save``) written to ``out`` in
  PEFT's layout (``save_peft``)."""
  adapter = load(directory)
  first = next(iter(next(iter(adapter['layers'].values())).values()))
  rank = int(np.shape(first['a'])[1])
  return save_peft(adapter, out, rank=rank,
                   alpha=float(adapter['scale']) * rank, base=base)


def peft_name(layer, name: str, factor: str) -> str:
  """PEFT's tensor name of factor ``'a'`` or ``'b'`` of ``name`` in
  ``layer``."""
  if name not in BLOCKS:
    raise ValueError(f'no PEFT module path for {name!r}')
  lora = {'a': 'lora_A', 'b': 'lora_B'}[factor]
  return (f'base_model.model.model.layers.{layer}.{BLOCKS[name]}.{name}.'
          f'{lora}.weight')


def save_peft(adapter: dict, directory, rank: int, alpha: float,
              base: str = PEFT_BASE) -> pathlib.Path:
  """``adapter`` in PEFT's layout: ``adapter_config.json`` and
  ``adapter_model.safetensors`` (``lora_A.weight [r, in]``,
  ``lora_B.weight [out, r]``; PEFT scales by ``lora_alpha / r``)."""
  from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
  scale = float(adapter.get('scale', alpha / rank))
  if not np.isclose(scale, alpha / rank):
    raise ValueError(f'PEFT scales by lora_alpha / r = {alpha / rank}; the '
                     f'adapter scales by {scale}')
  d = pathlib.Path(directory)
  d.mkdir(parents=True, exist_ok=True)
  tensors, targets = {}, set()
  for i, names in adapter['layers'].items():
    for name, ab in names.items():
      targets.add(name)
      for factor in ('a', 'b'):
        tensors[peft_name(i, name, factor)] = np.ascontiguousarray(
            np.asarray(ab[factor], np.float32).T)
  st.save_file(tensors, str(d / 'adapter_model.safetensors'),
               metadata={'format': 'pt'})
  (d / 'adapter_config.json').write_text(json.dumps({
      'peft_type': 'LORA', 'task_type': 'CAUSAL_LM',
      'base_model_name_or_path': base, 'r': int(rank),
      'lora_alpha': float(alpha), 'lora_dropout': 0.0, 'bias': 'none',
      'target_modules': sorted(targets), 'fan_in_fan_out': False,
      'inference_mode': True, 'modules_to_save': None,
      'init_lora_weights': True, 'use_rslora': False}, indent=2))
  return d


def load_peft(directory) -> dict:
  """An adapter (``{'layers', 'scale'}``) from PEFT's layout."""
  from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
  d = pathlib.Path(directory)
  config = readers.read_json(d / 'adapter_config.json', 'adapter config')
  if config.get('peft_type') != 'LORA':
    raise ValueError(f'{d / "adapter_config.json"}: not a LoRA adapter')
  layers = {}
  for key, value in st.load_file(str(d / 'adapter_model.safetensors')).items():
    parts = key.split('.')
    # base_model.model.model.layers.<i>.<block>.<name>.lora_<A|B>.weight
    if (len(parts) != 9 or parts[:4] != ['base_model', 'model', 'model',
                                         'layers'] or
        parts[7] not in ('lora_A', 'lora_B') or parts[8] != 'weight'):
      raise ValueError(f'{d}: unexpected PEFT tensor {key!r}')
    factor = 'a' if parts[7] == 'lora_A' else 'b'
    layers.setdefault(parts[4], {}).setdefault(parts[6], {})[factor] = (
        jnp.asarray(value.T))
  adapter = {'layers': layers, 'scale': config['lora_alpha'] / config['r']}
  check(adapter, str(d / 'adapter_model.safetensors'))
  return adapter


def load(directory) -> dict:
  """The adapter saved in ``directory`` (checked against its manifest)."""
  from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
  d = pathlib.Path(directory)
  for name in ('adapter.safetensors', 'adapter.json'):
    if not (d / name).is_file():
      raise FileNotFoundError(f'LoRA adapter {str(d)!r} has no {name}')
  checksums.verify_manifest(str(d), 'LoRA adapter')
  meta = readers.read_json(d / 'adapter.json', 'adapter description')
  layers = {}
  for key, value in st.load_file(str(d / 'adapter.safetensors')).items():
    parts = key.split('/')
    if len(parts) != 3 or parts[2] not in ('a', 'b'):
      raise ValueError(f'LoRA adapter {str(d)!r}: unexpected tensor {key!r}')
    layers.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = (
        jnp.asarray(value))
  adapter = {'layers': layers, 'scale': meta['scale'], 'meta': meta}
  check(adapter, str(d / 'adapter.safetensors'))
  return adapter
