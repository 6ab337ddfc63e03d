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
"""The rotary embedding of transformers' Flax Llama, honouring ``rope_theta``.

transformers 4.57.6's ``modeling_flax_llama.create_sinusoidal_positions``
hard-codes the rotary base 10,000, so a checkpoint trained with another base
(SmolLM2: 100,000) runs with the wrong positions and degrades without an
error. ``install()`` replaces ``FlaxLlamaRotaryEmbedding.setup`` with one that
reads ``config.rope_theta`` (default 10,000, so other checkpoints are
unchanged).
"""

import numpy as np
import jax.numpy as jnp
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


def install():
  """Makes transformers' Flax Llama honour ``config.rope_theta``."""
  modeling_flax_llama.FlaxLlamaRotaryEmbedding.setup = _setup
