"""LoRA adapters are checked by name and shape before any model loads: a
tensor that adapts nothing, an unknown layer or a wrong shape is an error
naming the file and the tensor, never a silent plain model."""

import tempfile

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np
from safetensors import numpy as st
from transformers import LlamaConfig

from recovr_jax import checksums
from recovr_jax.reasoning import lora

CONFIG = LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1,
                     vocab_size=32)


def _params():
  """Kernels of CONFIG's shapes, laid out as transformers' Flax Llama."""
  shapes = lora.kernel_shapes(CONFIG)
  rng = np.random.default_rng(0)
  layer = lambda: {block: {name: {'kernel': jnp.asarray(
      rng.normal(size=shapes[name]), jnp.float32)}
                           for name, b in lora.BLOCKS.items() if b == block}
                   for block in ('self_attn', 'mlp')}
  return {'model': {'layers': {str(i): layer() for i in range(2)}}}


def _save(adapter):
  return lora.save({**adapter, 'scale': 2.0}, tempfile.mkdtemp() + '/a',
                   {'rank': 2})


class LoraCheckTest(absltest.TestCase):

  def test_a_good_adapter_round_trips_and_merges(self):
    params = _params()
    adapter = lora.init(params, rank=2)
    adapter = jax.tree.map(lambda x: x + 0.1, adapter)
    loaded = lora.load(_save(adapter))
    lora.check(loaded, 'x', CONFIG)
    chex.assert_trees_all_close(lora.merge(params, loaded),
                                lora.merge(params, adapter, scale=2.0))

  def test_a_misspelled_projection_is_refused_by_name(self):
    adapter = lora.init(_params(), rank=2)
    d = _save(adapter)  # then renamed by hand, the manifest rewritten
    path = str(d / 'adapter.safetensors')
    tensors = st.load_file(path)
    for f in ('a', 'b'):
      tensors[f'0/qproj/{f}'] = tensors.pop(f'0/q_proj/{f}')
    st.save_file(tensors, path)
    checksums.write_manifest(d)
    with self.assertRaisesRegex(ValueError, r'adapter\.safetensors: tensor '
                                r'0/qproj: not a Llama projection'):
      lora.load(d)
    adapter['layers']['0']['qproj'] = adapter['layers']['0'].pop('q_proj')
    with self.assertRaisesRegex(ValueError, 'no kernel named qproj'):
      lora.merge(_params(), adapter)  # never merged as a plain model

  def test_an_unknown_layer_is_refused(self):
    adapter = lora.init(_params(), rank=2)
    adapter['layers']['7'] = adapter['layers']['0']
    with self.assertRaisesRegex(ValueError, 'tensor 7/...: the model has 2 '
                                'layers'):
      lora.check(adapter, 'x', CONFIG)
    with self.assertRaisesRegex(ValueError, "no layer '7'"):
      lora.merge(_params(), adapter)

  def test_wrong_shapes_are_refused_before_the_model_loads(self):
    adapter = lora.init(_params(), rank=2)
    adapter['layers']['1']['down_proj']['b'] = jnp.zeros((2, 5))
    with self.assertRaisesRegex(ValueError, r'x: tensor 1/down_proj: adapts '
                                r'a \[16, 5\] kernel; the model\'s down_proj '
                                r'is \[16, 8\]'):
      lora.check(adapter, 'x', CONFIG)
    adapter['layers']['1']['down_proj']['b'] = jnp.zeros((3, 8))
    with self.assertRaisesRegex(ValueError, 'not .in, r. and .r, out.'):
      lora.load(_save(adapter))

  def test_a_missing_factor_is_refused(self):
    adapter = lora.init(_params(), rank=2)
    del adapter['layers']['0']['v_proj']['b']
    with self.assertRaisesRegex(ValueError, 'tensor 0/v_proj: needs factors '
                                'a and b, has a'):
      lora.check(adapter, 'x')

  def test_the_installed_smollm2_is_checked_from_its_header(self):
    from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
    config = chat_lm.model_config()  # the GGUF's header: no weights read
    self.assertEqual((config.num_hidden_layers, config.hidden_size,
                      config.num_key_value_heads), (30, 576, 3))
    shipped = lora.load(chat_lm.DEFAULT_ADAPTER_DIR)
    lora.check(shipped, 'shipped', config)
    shipped['layers']['30'] = shipped['layers']['0']
    with self.assertRaisesRegex(ValueError, 'tensor 30/...: the model has 30 '
                                'layers'):
      lora.check(shipped, 'shipped', config)


if __name__ == '__main__':
  absltest.main()
