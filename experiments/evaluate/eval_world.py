r"""Single-turn quality of the world's encoders on the test split.

    python -m experiments.evaluate.eval_world --output_json=results/eval_world.json

Prints and writes CoVR R@1/5/10/50 for the trained composer and for the
training-free ``sum`` composer, and T2V R@1/5/10 from the target's caption.
"""

import os
import pathlib

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.common import outputs
from experiments.common import world_flags
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.models import training

_CHECKPOINT = flags.DEFINE_string('checkpoint_dir',
                                  encoders.DEFAULT_CHECKPOINT_DIR,
                                  'Checkpoints written by train_world.')
_CACHE = flags.DEFINE_string('cache_dir', 'cache',
                             'Progress Memory cache of gallery embeddings; '
                             'empty to disable.')
_OUTPUT = flags.DEFINE_string('output_json', 'results/eval_world.json',
                              'Where to write the JSON results.')


flags.adopt_module_key_flags(world_flags)  # the world's flags in --helpshort

def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  checkpoint = pathlib.Path(_CHECKPOINT.value)
  missing = [part for part in ('video_encoder', 'composer')
             if not (checkpoint / part / 'metadata.json').is_file()]
  if missing:
    raise app.UsageError(f'--checkpoint_dir {checkpoint}: no '
                         f'{" or ".join(missing)} checkpoint (metadata.json); '
                         'experiments/train/train_world.py writes them')
  world = generator.make_world(world_flags.world_config())
  try:  # another kind of world's encoders are refused, named
    video, composer = training.load_world_models(checkpoint, world)
  except ValueError as e:
    raise app.UsageError(f'--checkpoint_dir: {e}') from e
  text = encoders.TextEncoder()
  result = training.evaluate_world(world, text, video, composer,
                                   cache_dir=_CACHE.value or None)
  result['checkpoint'] = encoders.load_metadata(
      os.path.join(_CHECKPOINT.value, 'composer'))
  print('| query | R@1 | R@5 | R@10 | R@50 |')
  print('|---|---:|---:|---:|---:|')
  for name in ('covr_composer', 'covr_composer_edit_names_every_change',
               'covr_composer_with_unmentioned_change', 'covr_sum',
               't2v_caption'):
    row = result[name]
    cells = ' | '.join(f"{100 * row[k]:.1f}" if k in row else ''
                       for k in ('R@1', 'R@5', 'R@10', 'R@50'))
    print(f'| {name} | {cells} |')
  print(f"gallery {result['gallery_size']} videos, "
        f"{result['test_triplets']} test triplets, chance R@1 "
        f"{100 * result['chance_R@1']:.2f}%")
  if _OUTPUT.value:
    outputs.write_json(_OUTPUT.value, result)


if __name__ == '__main__':
  cli.run(main)
