"""SmolLM2's GGUF file as a Flax Llama checkpoint (issue #14, first part):
the converted blocks against an independent NumPy forward pass, the rotary
base, a greedy answer of the whole model, and clear errors."""

import pathlib
import tempfile

from absl.testing import absltest
import numpy as np

from recovr_jax import checksums
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax import pretrained
from recovr_jax.reasoning import flax_lm
from recovr_jax.reasoning import gguf_llama
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas
from third_party import transformers_flax_llama

transformers_flax_llama.install()

from transformers import FlaxLlamaForCausalLM, LlamaConfig  # pylint: disable=g-import-not-at-top,wrong-import-position

NUM_LAYERS = 3  # blocks compared with the NumPy forward pass
PROMPT_IDS = np.array([[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173,
                        3365, 28, 2]])
_READ = {}


def _read():
  if not _READ:
    _READ['value'] = gguf_llama.read(gguf_llama.find_smollm2())
  return _READ['value']


def _truncated(config_kwargs, tensors, num_layers, **overrides):
  kwargs = dict(config_kwargs, num_hidden_layers=num_layers, **overrides)
  keep = {k: v for k, v in tensors.items()
          if not k.startswith('model.layers.') or
          int(k.split('.')[2]) < num_layers}
  model = FlaxLlamaForCausalLM(LlamaConfig(**kwargs), _do_init=False)
  return model, gguf_llama.flax_params(kwargs, keep)


def _rms(x, w, eps):
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rotate_half(x):
  half = x.shape[-1] // 2
  return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def numpy_forward(config, tensors, ids, num_layers):
  """Logits ``[T, V]`` of the first ``num_layers`` Llama blocks, written
  from the architecture (float64)."""
  t = len(ids)
  heads, kv = config['num_attention_heads'], config['num_key_value_heads']
  dim = config['hidden_size']
  hd = dim // heads
  eps = config['rms_norm_eps']
  w = lambda name: tensors[name].astype(np.float64)
  x = w('model.embed_tokens.weight')[ids]
  inv = 1.0 / config['rope_theta'] ** (np.arange(0, hd, 2) / hd)
  angles = np.arange(t)[:, None] * inv[None, :]
  angles = np.concatenate([angles, angles], axis=-1)
  cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
  mask = np.triu(np.full((t, t), -np.inf), k=1)
  for i in range(num_layers):
    p = f'model.layers.{i}.'
    h = _rms(x, w(p + 'input_layernorm.weight'), eps)
    q = (h @ w(p + 'self_attn.q_proj.weight').T).reshape(t, heads, hd)
    k = (h @ w(p + 'self_attn.k_proj.weight').T).reshape(t, kv, hd)
    v = (h @ w(p + 'self_attn.v_proj.weight').T).reshape(t, kv, hd)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    k = np.repeat(k, heads // kv, axis=1)
    v = np.repeat(v, heads // kv, axis=1)
    scores = np.einsum('qhd,khd->hqk', q, k) / np.sqrt(hd) + mask
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    attn = scores / scores.sum(-1, keepdims=True)
    out = np.einsum('hqk,khd->qhd', attn, v).reshape(t, dim)
    x = x + out @ w(p + 'self_attn.o_proj.weight').T
    h = _rms(x, w(p + 'post_attention_layernorm.weight'), eps)
    gate = h @ w(p + 'mlp.gate_proj.weight').T
    up = h @ w(p + 'mlp.up_proj.weight').T
    x = x + ((gate / (1 + np.exp(-gate))) * up) @ w(
        p + 'mlp.down_proj.weight').T
  x = _rms(x, w('model.norm.weight'), eps)
  return x @ w('model.embed_tokens.weight').T


class GGUFLlamaTest(absltest.TestCase):

  def test_metadata(self):
    config, tensors, vocab = _read()
    self.assertEqual(config['num_hidden_layers'], 30)
    self.assertEqual((config['hidden_size'], config['num_attention_heads'],
                      config['num_key_value_heads']), (576, 9, 3))
    self.assertEqual(config['rope_theta'], 100_000.0)
    self.assertLen(vocab['tokens'], 49_152)
    self.assertIn('<|im_start|>', vocab['chat_template'])
    self.assertEqual(tensors['model.layers.0.self_attn.k_proj.weight'].shape,
                     (192, 576))

  def test_blocks_match_a_numpy_forward_pass(self):
    config, tensors, _ = _read()
    model, params = _truncated(config, tensors, NUM_LAYERS)
    got = np.asarray(model(PROMPT_IDS, params=params).logits[0], np.float64)
    want = numpy_forward(config, tensors, PROMPT_IDS[0], NUM_LAYERS)
    # float32 against float64 through 3 blocks: logits of magnitude ~10.
    np.testing.assert_allclose(got, want, atol=2e-3, rtol=1e-3)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))

  def test_rope_base_is_honoured(self):
    config, tensors, _ = _read()
    model, params = _truncated(config, tensors, 1)
    base = np.asarray(model(PROMPT_IDS, params=params).logits)
    model, params = _truncated(config, tensors, 1, rope_theta=10_000.0)
    other = np.asarray(model(PROMPT_IDS, params=params).logits)
    self.assertGreater(np.abs(base - other).max(), 1e-2)
    # Position 0 has no rotation: it is the same under any base.
    np.testing.assert_allclose(base[0, 0], other[0, 0], atol=1e-4)

  def test_converted_checkpoint_answers_a_factual_prompt(self):
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    # The conversion the smollm2 readers load (made once per machine, by
    # whichever test or run needs it first).
    out = gguf_llama.ensure_converted()
    tok = AutoTokenizer.from_pretrained(str(out))
    model = pretrained.from_pretrained(FlaxLlamaForCausalLM, out,
                                       'the converted checkpoint')
    text = tok.apply_chat_template(
        [{'role': 'user', 'content': 'What is the capital of France? '
                                     'Answer in one word.'}],
        tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors='np')['input_ids']
    self.assertEqual(ids[0, 0], 1)  # <|im_start|>, a control token
    # Its greedy reply is "The capital of France is Paris": one forward pass
    # over the prompt and the reply's first words gives the next word (a
    # generate loop over 30 blocks costs minutes of compiling).
    ids = tok(text + 'The capital of France is', return_tensors='np')[
        'input_ids']
    logits = model(ids).logits
    self.assertEqual(tok.decode([int(np.argmax(logits[0, -1]))]), ' Paris')
    self.assertTrue((out / 'checksums.json').is_file())
    # The tokenizer splits digits one by one (llama.cpp's smollm rule).
    self.assertLen(tok('2024')['input_ids'], 4)
    # The flax_lm backend loads a Llama checkpoint with the rotary fix (two
    # of SmolLM2's blocks and its tokenizer, to keep the compile short; its
    # prompts are not yet chat prompts: outputs are validated and counted).
    small = pathlib.Path(tempfile.mkdtemp()) / 'smollm2_2_blocks'
    config, tensors, _ = _read()
    model, params = _truncated(config, tensors, 2)
    model.save_pretrained(str(small), params=params)
    tok.save_pretrained(str(small))
    checksums.write_manifest(small)
    lm = flax_lm.FlaxLMReasoner(str(small), fallback=rules.RulesReasoner(
        lexicon), batch_size=2, max_new_tokens=4)
    self.assertEqual(lm.model.config.rope_theta, 100_000.0)
    requests = [schemas.IntentRequest('make it red', 'two blue circles',
                                      schemas.SessionMemory())] * 2
    for obj in lm.intent(requests):
      schemas.validate('intent', obj)
    stats = lm.validity()['intent']
    self.assertEqual(stats['calls'], 2)
    self.assertEqual(stats['fallback'] + stats['retry_valid'] + round(
        stats['first_pass_valid'] * stats['calls']), 2)

  def test_errors_name_the_file(self):
    with self.assertRaisesRegex(FileNotFoundError, 'nope.gguf does not '
                                'exist'):
      gguf_llama.read('/nonexistent/nope.gguf')
    bad = pathlib.Path(tempfile.mkdtemp()) / 'bad.gguf'
    bad.write_bytes(b'not a gguf file at all' * 10)
    with self.assertRaisesRegex(gguf_llama.GGUFError,
                                'bad.gguf is not a readable GGUF file'):
      gguf_llama.read(bad)
    real = gguf_llama.find_smollm2().read_bytes()
    cut = pathlib.Path(tempfile.mkdtemp()) / 'cut.gguf'
    cut.write_bytes(real[:len(real) // 2])
    with self.assertRaisesRegex(gguf_llama.GGUFError, 'cut.gguf'):
      gguf_llama.read(cut)


if __name__ == '__main__':
  absltest.main()
