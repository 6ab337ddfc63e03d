# Copyright 2023 Meta AI, EleutherAI and the HuggingFace Inc. team. All rights reserved.
# Adapted for recovr_jax (see README.md in this folder).
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""transformers' Flax Llama, adapted: ``rope_theta`` and fast cached attention.

transformers 4.57.6's ``modeling_flax_llama.create_sinusoidal_positions``
hard-codes the rotary base 10,000, so a checkpoint trained with another base
(SmolLM2: 100,000) runs with the wrong positions and degrades without an
error. ``install()`` replaces ``FlaxLlamaRotaryEmbedding.setup`` with one that
reads ``config.rope_theta`` (default 10,000, so other checkpoints are
unchanged).

Upstream's attention also builds a ``[max_position_embeddings]^2`` causal mask
in every layer (8192^2 for SmolLM2) and repeats the cached keys and values
of each key/value head for its query heads at every decoding step, which
makes a cached step at batch 16 and 768 positions ten times slower than its
weights need. ``install()`` also replaces ``FlaxLlamaAttention.__call__`` with the same
computation (same parameters, cache variables and outputs; softmax in
float32) that compares positions instead of slicing the stored mask (which
is then never used, so XLA drops it) and contracts grouped query heads with
their shared key/value head instead of repeating it.
"""

import jax
import jax.numpy as jnp
import numpy as np
from transformers.models.llama import modeling_flax_llama


def create_sinusoidal_positions(num_pos, dim, base=10000.0):
  """``[num_pos, 1, dim]`` sin and cos tables; upstream's function with the
  base as an argument (upstream also slices the last axis to ``num_pos``,
  which keeps every column when ``num_pos >= dim``)."""
  inv_freq = 1.0 / (base ** (np.arange(0, dim, 2) / dim))
  freqs = np.einsum('i , j -> i j', np.arange(num_pos), inv_freq).astype(
      'float32')
  emb = np.concatenate((freqs, freqs), axis=-1)
  out = np.concatenate((np.sin(emb)[:, None, :], np.cos(emb)[:, None, :]),
                       axis=-1)
  return jnp.array(out[:, :, :num_pos])


def _setup(self):
  head_dim = self.config.hidden_size // self.config.num_attention_heads
  base = float(getattr(self.config, 'rope_theta', None) or 10000.0)
  self.sincos = create_sinusoidal_positions(
      self.config.max_position_embeddings, head_dim, base)


def _attention_call(self, hidden_states, attention_mask, position_ids,
                    deterministic: bool = True, init_cache: bool = False,
                    output_attentions: bool = False):
  del deterministic  # no attention dropout at inference
  query = self._split_heads(self.q_proj(hidden_states), self.num_heads)
  key = self._split_heads(self.k_proj(hidden_states), self.num_key_value_heads)
  value = self._split_heads(self.v_proj(hidden_states),
                            self.num_key_value_heads)
  key, query = self.rotary_emb(key, query, position_ids)
  batch, q_len = query.shape[:2]
  cached = self.has_variable('cache', 'cached_key')
  shift = self.variables['cache']['cache_index'] if cached else 0
  if cached or init_cache:
    key, value, _ = self._concatenate_to_cache(
        key, value, query, attention_mask[:, None, None, :])
  k_len = key.shape[1]
  # Query i (absolute position shift + i) sees keys 0 .. shift + i that the
  # attention mask keeps (upstream: stored causal mask, then the cache's
  # pad mask, which the comparison below implies).
  q_pos = shift + jnp.arange(q_len)
  causal = jnp.arange(k_len)[None, :] <= q_pos[:, None]          # [q, k]
  keep = causal[None] & (attention_mask[:, None, :k_len] > 0)     # [B, q, k]
  groups = self.num_key_value_groups
  q = query.reshape(batch, q_len, self.num_key_value_heads, groups,
                    self.head_dim)
  if q_len == 1:
    # One query (a decoding step): multiply and reduce in the cache's own
    # [B, k, h, d] layout; a dot_general would first transpose the cache.
    scores = jnp.sum(q[:, 0, None].astype(jnp.float32) *
                     key[:, :, :, None].astype(jnp.float32), axis=-1)
    scores = jnp.moveaxis(scores, 1, -1)[:, :, :, None]    # [B, h, g, 1, k]
  else:
    scores = jnp.einsum('bqhgd,bkhd->bhgqk', q, key,
                        preferred_element_type=jnp.float32)
  scores = scores / np.sqrt(self.head_dim).astype(np.float32)
  scores = jnp.where(keep[:, None, None], scores, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(scores, axis=-1)
  if q_len == 1:
    w = jnp.moveaxis(weights[:, :, :, 0], -1, 1)           # [B, k, h, g]
    out = jnp.sum(w[..., None] * value[:, :, :, None].astype(jnp.float32),
                  axis=1)[:, None].astype(self.dtype)      # [B, 1, h, g, d]
  else:
    out = jnp.einsum('bhgqk,bkhd->bqhgd', weights.astype(self.dtype), value)
  out = self.o_proj(out.reshape(batch, q_len, self.embed_dim))
  if output_attentions:
    return out, weights.reshape(batch, self.num_heads, q_len, k_len)
  return (out,)


def install():
  """Makes transformers' Flax Llama honour ``config.rope_theta`` and
  replaces its attention with the fast equivalent above."""
  modeling_flax_llama.FlaxLlamaRotaryEmbedding.setup = _setup
  modeling_flax_llama.FlaxLlamaAttention.__call__ = _attention_call
