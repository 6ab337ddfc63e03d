r"""Trains the small reasoning LM of the world and measures it.

    python -m experiments.train.train_reasoner --output_dir=recovr_jax/checkpoints/reasoner

A GPT-2-style Flax causal LM (transformers config, optax) learns the rules
backend's JSON outputs for world-generated prompts of all four modules, with a
byte-level BPE tokenizer built by the ``tokenizers`` library; both are saved
with ``save_pretrained``, so ``--reasoner=flax_lm`` runs offline. It then
reports first-pass JSON validity and field accuracy on held-out prompts from
the test split, and writes them to ``--output_json``.
"""

import pathlib
import time

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.common import outputs
from experiments.common import world_flags
from recovr_jax import profiling
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import reasoner_training

_OUTPUT_DIR = flags.DEFINE_string('output_dir',
                                  reasoner_training.DEFAULT_REASONER_DIR,
                                  'Where to save the model and tokenizer.')
_OUTPUT_JSON = flags.DEFINE_string('output_json', 'results/reasoner.json',
                                   'Where to write the measured report.')
_STEPS = flags.DEFINE_integer('steps', 2800, 'Training steps.')
_BATCH = flags.DEFINE_integer('batch', 32, 'Sequences per step.')
_NUM_TRAIN = flags.DEFINE_integer('num_train', 30_000,
                                  'Generated training prompts.')
_NUM_EVAL = flags.DEFINE_integer('num_eval', 500, 'Held-out prompts.')
_SEED = flags.DEFINE_integer('reasoner_seed', 0, 'Seed of data and init.',
                             lower_bound=0)
_EVAL_ONLY = flags.DEFINE_bool('eval_only', False,
                               'Only evaluate the model in --output_dir.')


flags.adopt_module_key_flags(world_flags)  # the world's flags in --helpshort

def main(argv):
  del argv
  world_flags.require_seven_attributes(
      'experiments.train.train_reasoner',
      "the world reasoner's prompts and the rules teacher know seven "
      'attributes')
  logging.set_verbosity(logging.ERROR)
  for flag in (_STEPS, _BATCH, _NUM_TRAIN, _NUM_EVAL):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1')
  if _EVAL_ONLY.value:
    from recovr_jax.reasoning import flax_lm  # pylint: disable=g-import-not-at-top
    try:
      flax_lm.check_model_dir(_OUTPUT_DIR.value)
    except FileNotFoundError as e:
      raise app.UsageError(f'--eval_only --output_dir: {e}') from e
  else:
    cli.writable_dir(_OUTPUT_DIR)  # before the training, not at the save
  config = reasoner_training.ReasonerConfig(
      seed=_SEED.value, num_train=_NUM_TRAIN.value, num_eval=_NUM_EVAL.value,
      steps=_STEPS.value, batch=_BATCH.value)
  world = generator.make_world(world_flags.world_config())
  start = time.time()
  report = {}
  if not _EVAL_ONLY.value:
    report = reasoner_training.train(config, world, _OUTPUT_DIR.value,
                                     progress=profiling.Timer(every=10))
    report['train_seconds'] = round(time.time() - start, 1)
    print(f"trained {report['parameters']:,} parameters in "
          f"{report['train_seconds']:.0f}s")
  t = time.time()
  report['eval'] = reasoner_training.evaluate(_OUTPUT_DIR.value, world,
                                              config.num_eval, config.seed)
  report['eval_seconds'] = round(time.time() - t, 1)
  size = sum(f.stat().st_size for f in pathlib.Path(_OUTPUT_DIR.value).rglob(
      '*') if f.is_file())
  report['checkpoint_mb'] = round(size / 1e6, 2)
  ev = report['eval']
  print(f"held-out prompts: {ev['prompts']}, first-pass valid JSON "
        f"{100 * ev['first_pass_valid']:.1f}%, exact match "
        f"{100 * ev['exact_match']:.1f}%; checkpoint {report['checkpoint_mb']} MB")
  print('| module | prompts | valid | exact | field accuracy |')
  print('|---|---:|---:|---:|---|')
  for module, m in ev['by_module'].items():
    fields = ', '.join(f'{k} {100 * v:.1f}%'
                       for k, v in m['field_accuracy'].items())
    print(f"| {module} | {m['prompts']} | {100 * m['first_pass_valid']:.1f}% "
          f"| {100 * m['exact_match']:.1f}% | {fields} |")
  if _OUTPUT_JSON.value:
    outputs.write_json(_OUTPUT_JSON.value, report)


if __name__ == '__main__':
  cli.run(main)
