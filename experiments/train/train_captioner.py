r"""Trains the world's captioning VLM and measures its captions.

    python -m experiments.train.train_captioner --output_dir=recovr_jax/checkpoints/captioner

A ``FlaxVisionEncoderDecoderModel`` (ViT over stacked frames, GPT-2 decoder)
learns to caption renders of the training split (``envs/world/models/captioner.py``);
it is saved with ``save_pretrained`` and then evaluated on fresh renders of
test combinations: per attribute, the share of captions that name the right
value (read with the world's lexicon). Writes the report to --output_json.
"""

import math
import time

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.common import outputs
from experiments.common import world_flags
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import captioner

_DEFAULT = captioner.CaptionerConfig()
_OUTPUT_DIR = flags.DEFINE_string('output_dir',
                                  captioner.DEFAULT_CAPTIONER_DIR,
                                  'Where to save the model and tokenizer.')
_OUTPUT_JSON = flags.DEFINE_string('output_json', 'results/captioner.json',
                                   'Where to write the measured report.')
_STEPS = flags.DEFINE_integer('steps', _DEFAULT.steps, 'Training steps.')
_BATCH = flags.DEFINE_integer('batch', _DEFAULT.batch, 'Clips per step.')
_LR = flags.DEFINE_float('lr', _DEFAULT.lr, 'Peak learning rate.')
_EVAL = flags.DEFINE_integer('eval_videos', 2000,
                             'Test-split renders the report is measured on.')
_SEED = flags.DEFINE_integer('captioner_seed', _DEFAULT.seed,
                             'Seed of data and initialisation.', lower_bound=0)


flags.adopt_module_key_flags(world_flags)  # the world's flags in --helpshort

def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.ERROR)
  for flag in (_STEPS, _BATCH, _EVAL):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  if not (math.isfinite(_LR.value) and _LR.value > 0):
    raise app.UsageError(f'--lr must be a finite number > 0, got {_LR.value}')
  cli.writable_dir(_OUTPUT_DIR)  # before the training, not at the save
  world = generator.make_world(world_flags.world_config())
  config = captioner.CaptionerConfig(
      seed=_SEED.value, steps=_STEPS.value, batch=_BATCH.value, lr=_LR.value,
      # Room for the layout's words (at most 26 words and the two marks).
      max_length=30 if world.config.describe_layout else _DEFAULT.max_length)
  start = time.time()
  report = captioner.train(config, world, _OUTPUT_DIR.value,
                           eval_videos=_EVAL.value)
  report['wall_seconds'] = round(time.time() - start, 1)
  test = report['test']
  print(f"trained {report['params']:,} parameters in "
        f"{report['train_seconds']:.0f}s; test captions ({test['videos']} "
        'renders of test combinations):')
  print('| attribute | right |')
  print('|---|---:|')
  for name in world.config.attributes + ('all_attributes',):
    print(f'| {name} | {100 * test[name]:.1f}% |')
  if _OUTPUT_JSON.value:
    outputs.write_json(_OUTPUT_JSON.value, report)


if __name__ == '__main__':
  cli.run(main)
