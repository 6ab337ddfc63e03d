"""A Llama checkpoint's forward pass laid out for batched decoding on a CPU.

The same computation as transformers' ``FlaxLlamaModule`` with
``third_party.transformers_flax_llama`` installed (the rotary base from the
config, softmax in float32), on the same parameters, arranged for what a
decoding step is on a CPU: a few rows times every weight.

* **Weights as ``[out, in]``, activations feature-major** (``[features,
  tokens]``): every projection is ``W @ X``. XLA's CPU dot runs this form at
  about twice the rate of ``X @ W`` when ``X`` has 16 rows (measured by
  ``experiments/bench/bench_lm.py``), because the weight is the streamed left
  operand.
* **The cache head-major**: keys as ``[batch, kv_heads, head_dim,
  length]`` and values as ``[batch, kv_heads, length, head_dim]``, so the
  scores and the weighted sum are plain batched matrix products (upstream's
  ``[batch, length, heads, head_dim]`` makes them strided reductions).
* **A cache that grows**: ``grow`` copies a cache into a longer one, so a
  decoder can start with room for the prompt and a few steps and attend
  over little more than the filled part (slicing a longer cache inside a
  step costs a copy of it on XLA's CPU backend, measured).

``prepare`` turns a ``FlaxLlamaForCausalLM`` parameter tree into this
layout once (after any LoRA merge); ``init_cache`` / ``forward`` /
``logits`` are pure functions to jit.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Shape:
  """What the forward pass needs from a ``LlamaConfig``."""
  layers: int
  hidden: int
  heads: int
  kv_heads: int
  head_dim: int
  eps: float
  rope_theta: float
  max_positions: int
  act: str = 'silu'

  @classmethod
  def of(cls, config) -> 'Shape':
    act = getattr(config, 'hidden_act', 'silu')
    if act != 'silu':
      raise ValueError(f'llama_decode supports hidden_act silu, got {act!r}')
    heads = config.num_attention_heads
    return cls(layers=config.num_hidden_layers, hidden=config.hidden_size,
               heads=heads,
               kv_heads=getattr(config, 'num_key_value_heads', None) or heads,
               head_dim=config.hidden_size // heads,
               eps=float(config.rms_norm_eps),
               rope_theta=float(getattr(config, 'rope_theta', None) or
                                10000.0),
               max_positions=config.max_position_embeddings)


def prepare(params, shape: Shape, dtype=jnp.float32) -> dict:
  """The decoding layout of ``FlaxLlamaForCausalLM`` parameters: each
  Dense kernel ``[in, out]`` as ``[out, in]``, norms as column vectors, the
  head as ``[vocab, hidden]``, the rotary tables."""
  model = params['model']

  def t(kernel):
    return jnp.asarray(np.ascontiguousarray(np.asarray(kernel).T), dtype)

  def col(weight):
    return jnp.asarray(np.asarray(weight)[:, None], dtype)

  layers = []
  for i in range(shape.layers):
    layer = model['layers'][str(i)]
    attn, mlp = layer['self_attn'], layer['mlp']
    layers.append({
        'norm_in': col(layer['input_layernorm']['weight']),
        'norm_post': col(layer['post_attention_layernorm']['weight']),
        'q': t(attn['q_proj']['kernel']), 'k': t(attn['k_proj']['kernel']),
        'v': t(attn['v_proj']['kernel']), 'o': t(attn['o_proj']['kernel']),
        'gate': t(mlp['gate_proj']['kernel']),
        'up': t(mlp['up_proj']['kernel']),
        'down': t(mlp['down_proj']['kernel'])})
  inv_freq = 1.0 / (shape.rope_theta ** (
      np.arange(0, shape.head_dim, 2) / shape.head_dim))
  freqs = np.outer(np.arange(shape.max_positions), inv_freq)
  emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float32)
  return {'embed': jnp.asarray(model['embed_tokens']['embedding'], dtype),
          'norm': col(model['norm']['weight']), 'layers': layers,
          'head': t(params['lm_head']['kernel']),
          'sin': jnp.asarray(np.sin(emb)), 'cos': jnp.asarray(np.cos(emb))}


def init_cache(shape: Shape, batch: int, length: int,
               dtype=jnp.float32) -> dict:
  """An empty cache of ``length`` positions for ``batch`` rows."""
  k = (batch, shape.kv_heads, shape.head_dim, length)
  v = (batch, shape.kv_heads, length, shape.head_dim)
  return {'keys': [jnp.zeros(k, dtype) for _ in range(shape.layers)],
          'values': [jnp.zeros(v, dtype) for _ in range(shape.layers)],
          'index': jnp.zeros((), jnp.int32)}


def _rms_norm(x, weight, eps):
  """Upstream's RMSNorm over the feature axis (0) of ``[features, T]``."""
  variance = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=0,
                      keepdims=True)
  return weight * (x / jnp.sqrt(variance + eps)).astype(x.dtype)


def _rotate(x, sin, cos):
  """Rotary embedding along axis -3 (the head dimension) of ``[..., d, B,
  q]``; ``sin`` / ``cos`` are ``[d, B, q]``."""
  half = x.shape[-3] // 2
  rotated = jnp.concatenate([-x[..., half:, :, :], x[..., :half, :, :]],
                            axis=-3)
  return x * cos + rotated * sin


def grow(cache, length: int) -> dict:
  """``cache`` with room for ``length`` positions (the new ones empty)."""
  def pad(x, axis):
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, widths)
  return {'keys': [pad(k, 3) for k in cache['keys']],
          'values': [pad(v, 2) for v in cache['values']],
          'index': cache['index']}


def attention(rows, keys, values, keep, scale):
  """One layer's attention over its cache: queries ``rows`` ``[B, h, r,
  d]`` (the query heads of key head ``h``), ``keys`` ``[B, h, d, length]``,
  ``values`` ``[B, h, length, d]``, ``keep`` broadcastable to ``[B, h, r,
  length]``. Softmax in float32; returns ``[B, h, r, d]``."""
  scores = jnp.einsum('bhrd,bhdk->bhrk', rows, keys,
                      preferred_element_type=jnp.float32) * scale
  scores = jnp.where(keep, scores, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(scores, axis=-1).astype(rows.dtype)
  return jnp.einsum('bhrk,bhkd->bhrd', weights, values)


def forward(shape: Shape, params, ids, mask, positions, cache):
  """Runs ``ids`` ``[B, q]`` (positions ``[B, q]``) through the model,
  writing their keys and values at the cache index.

  ``mask`` ``[B, length]``: which cache positions each row may attend to
  (besides causality). Returns the final hidden states ``[B, q, hidden]`` and
  the cache.
  """
  batch, q_len = ids.shape
  tokens = batch * q_len
  kv, d = shape.kv_heads, shape.head_dim
  groups = shape.heads // kv
  index = cache['index']
  attend = cache['keys'][0].shape[-1]
  dtype = params['embed'].dtype
  x = params['embed'][ids.reshape(-1).astype(jnp.int32)].T     # [H, T]
  pos = positions.astype(jnp.int32)                             # [B, q]
  sin = jnp.moveaxis(params['sin'][pos], -1, 0)                 # [d, B, q]
  cos = jnp.moveaxis(params['cos'][pos], -1, 0)
  # Query (row r = group * q_len + i, at position index + i) sees key k
  # when k <= index + i and the row's mask keeps k.
  k_pos = jnp.arange(attend)
  q_pos = index + jnp.arange(q_len)
  keep = ((k_pos[None, :] <= q_pos[:, None])[None] &
          (mask[:, None, :] > 0))                         # [B, q, k]
  keep = jnp.tile(keep, (1, groups, 1))[:, None]                # [B,1,gq,k]
  scale = np.float32(1.0 / np.sqrt(d))
  keys, values = [], []
  for layer, k_cache, v_cache in zip(params['layers'], cache['keys'],
                                     cache['values']):
    h = _rms_norm(x, layer['norm_in'], shape.eps)
    q = _rotate((layer['q'] @ h).reshape(kv, groups, d, batch, q_len), sin,
                cos).astype(dtype)
    k = _rotate((layer['k'] @ h).reshape(kv, d, batch, q_len), sin, cos)
    v = (layer['v'] @ h).reshape(kv, d, batch, q_len)
    k_cache = jax.lax.dynamic_update_slice(
        k_cache, jnp.transpose(k, (2, 0, 1, 3)).astype(k_cache.dtype),
        (0, 0, 0, index))
    v_cache = jax.lax.dynamic_update_slice(
        v_cache, jnp.transpose(v, (2, 0, 3, 1)).astype(v_cache.dtype),
        (0, 0, index, 0))
    keys.append(k_cache)
    values.append(v_cache)
    rows = jnp.transpose(q, (3, 0, 1, 4, 2)).reshape(
        batch, kv, groups * q_len, d)                           # [B,h,gq,d]
    out = attention(rows, k_cache, v_cache, keep, scale)
    out = jnp.transpose(out.reshape(batch, kv, groups, q_len, d),
                        (1, 2, 4, 0, 3)).reshape(shape.heads * d, tokens)
    x = x + layer['o'] @ out
    h = _rms_norm(x, layer['norm_post'], shape.eps)
    x = x + layer['down'] @ (jax.nn.silu(layer['gate'] @ h) *
                             (layer['up'] @ h))
  x = _rms_norm(x, params['norm'], shape.eps)
  hidden = x.T.reshape(batch, q_len, shape.hidden)
  return hidden, {'keys': keys, 'values': values, 'index': index + q_len}


def logits(params, hidden):
  """Float32 logits ``[B, vocab]`` of hidden states ``[B, hidden]``."""
  return (params['head'] @ hidden.T).T.astype(jnp.float32)
