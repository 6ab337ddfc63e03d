"""Tests for recovr_jax.pretrained: the same weights, no random init."""

import os
import tempfile

from absl.testing import absltest
import jax
import numpy as np
import transformers

from recovr_jax import pretrained


def _tiny_gpt2(directory):
  config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16,
                                   n_layer=1, n_head=2)
  model = transformers.FlaxGPT2LMHeadModel(config, seed=3)
  model.save_pretrained(directory)
  return model


class FromPretrainedTest(absltest.TestCase):

  def test_same_weights_as_transformers(self):
    with tempfile.TemporaryDirectory() as d:
      saved = _tiny_gpt2(d)
      for cls in (transformers.FlaxGPT2LMHeadModel,
                  transformers.FlaxAutoModelForCausalLM):
        model = pretrained.from_pretrained(cls, d, 'tiny')
        self.assertIsInstance(model, transformers.FlaxGPT2LMHeadModel)
        jax.tree.map(np.testing.assert_array_equal, model.params,
                     saved.params)
      # The class is left as it was.
      self.assertNotIn('init_weights',
                       vars(transformers.FlaxGPT2LMHeadModel))
      fresh = transformers.FlaxGPT2LMHeadModel.from_pretrained(d)
      jax.tree.map(np.testing.assert_array_equal, fresh.params, saved.params)

  def test_missing_weight_is_an_error(self):
    with tempfile.TemporaryDirectory() as d:
      saved = _tiny_gpt2(d)
      params = dict(saved.params)
      params['transformer'] = dict(params['transformer'])
      del params['transformer']['ln_f']
      saved.save_pretrained(d, params=params)
      self.assertTrue(os.path.exists(os.path.join(d, 'flax_model.msgpack')))
      with self.assertRaisesRegex(ValueError, r"tiny .* lacks 2 weight.*ln_f"):
        pretrained.from_pretrained(transformers.FlaxGPT2LMHeadModel, d,
                                   'tiny')


class DeprecationNoticeTest(absltest.TestCase):

  def test_the_flax_deprecation_notice_is_dropped(self):
    # transformers 4 prints it on every Flax model made; with the package
    # imported it does not (and without, it does: the check can fail).
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top
    make = ('from transformers import BertConfig, FlaxBertModel\n'
            'FlaxBertModel(BertConfig(hidden_size=8, intermediate_size=8, '
            'num_attention_heads=2, num_hidden_layers=1, vocab_size=20))\n')
    for imported in (True, False):
      code = ('import recovr_jax.pretrained\n' if imported else '') + make
      done = subprocess.run([sys.executable, '-c', code], capture_output=True,
                            text=True, timeout=300, check=False)
      self.assertEqual(done.returncode, 0, done.stderr[-2000:])
      self.assertEqual(pretrained.DEPRECATION in done.stderr, not imported)


if __name__ == '__main__':
  absltest.main()
