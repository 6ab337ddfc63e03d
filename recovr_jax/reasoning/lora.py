"""Low-rank adapters (LoRA) for transformers' Flax Llama parameters.

An adapter holds, for each adapted ``Dense`` kernel ``W [in, out]``, factors
``a [in, r]`` and ``b [r, out]``; the adapted kernel is
``W + (alpha / r) a @ b``. ``b`` starts at zero, so a fresh adapter changes
nothing. Adapters are merged into the weights (``merge``), so the model code
is unchanged at training and at inference.

Saved as ``adapter.safetensors`` (flattened names, float32) and
``adapter.json`` (rank, alpha, targets and training report) with a checksum
manifest.
"""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import checksums

DEFAULT_TARGETS = ('q_proj', 'v_proj', 'o_proj', 'gate_proj', 'down_proj')


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


def merge(params, adapter: dict, scale: float | None = None):
  """``params`` with every adapted kernel replaced by ``W + s a @ b``."""
  scale = adapter.get('scale', 1.0) if scale is None else scale
  layers = dict(params['model']['layers'])
  for i, names in adapter['layers'].items():
    layer = {}
    for block_name, block in layers[i].items():
      block = dict(block)
      for name, ab in names.items():
        if name in block:
          kernel = block[name]['kernel']
          block[name] = {'kernel': kernel + scale * (ab['a'] @ ab['b']).astype(
              kernel.dtype)}
      layer[block_name] = block
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


def load(directory) -> dict:
  """The adapter saved in ``directory`` (checked against its manifest)."""
  from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
  d = pathlib.Path(directory)
  for name in ('adapter.safetensors', 'adapter.json'):
    if not (d / name).is_file():
      raise FileNotFoundError(f'LoRA adapter {str(d)!r} has no {name}')
  checksums.verify_manifest(str(d), 'LoRA adapter')
  meta = json.loads((d / 'adapter.json').read_text())
  layers = {}
  for key, value in st.load_file(str(d / 'adapter.safetensors')).items():
    parts = key.split('/')
    if len(parts) != 3 or parts[2] not in ('a', 'b'):
      raise ValueError(f'LoRA adapter {str(d)!r}: unexpected tensor {key!r}')
    layers.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = (
        jnp.asarray(value))
  return {'layers': layers, 'scale': meta['scale'], 'meta': meta}
