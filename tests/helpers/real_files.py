"""Tiny real-data files the tests share: a random Flax CLIP saved to disk,
a gallery of its embeddings and an annotation CSV."""

import atexit
import json
import pathlib
import shutil
import tempfile

import numpy as np
from PIL import Image

from recovr_jax.envs.files import clip_encoder
from recovr_jax.envs.files import data


# Made once per process, then copied (the model's seed is fixed, so every
# copy holds the same files): the saved tiny CLIP and its embeddings of
# write_real_data's videos.
_MADE: dict = {}


def save_tiny_clip(directory: pathlib.Path) -> None:
  """A random FlaxCLIPModel and a byte-level CLIP tokenizer, no downloads."""
  if 'clip' not in _MADE:
    made = pathlib.Path(tempfile.mkdtemp(prefix='tiny-clip-'))
    atexit.register(shutil.rmtree, made, True)
    _write_tiny_clip(made)
    _MADE['clip'] = made
  shutil.copytree(_MADE['clip'], directory, dirs_exist_ok=True)


def _write_tiny_clip(directory: pathlib.Path) -> None:
  from transformers import CLIPConfig, CLIPTokenizer, FlaxCLIPModel  # pylint: disable=g-import-not-at-top,g-multiple-import
  from transformers.models.clip.tokenization_clip import bytes_to_unicode  # pylint: disable=g-import-not-at-top
  chars = list(bytes_to_unicode().values())
  vocab = {c: i for i, c in enumerate(chars)}
  for c in chars:
    vocab[c + '</w>'] = len(vocab)
  for token in ('<|startoftext|>', '<|endoftext|>'):
    vocab[token] = len(vocab)
  (directory / 'vocab.json').write_text(json.dumps(vocab))
  (directory / 'merges.txt').write_text('#version: 0.2\n')
  tokenizer = CLIPTokenizer(str(directory / 'vocab.json'),
                            str(directory / 'merges.txt'))
  small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=2)
  config = CLIPConfig(
      text_config=dict(vocab_size=len(vocab), max_position_embeddings=32,
                       **small),
      vision_config=dict(image_size=32, patch_size=8, **small),
      projection_dim=16)
  FlaxCLIPModel(config, seed=0).save_pretrained(directory)
  tokenizer.save_pretrained(directory)


def write_real_data(root: pathlib.Path, frames_dir=None) -> dict:
  """A tiny random CLIP in ``root/clip``, ``root/gallery.npz`` (8 videos of
  random frames, captions ``video number <i>``) and ``root/ann.csv`` (rows
  ``v<i> -> v<i+1>``, i < 4); the even videos' frames as PNG folders under
  ``frames_dir`` when given. Returns the run flags of those files."""
  (root / 'clip').mkdir(parents=True)
  save_tiny_clip(root / 'clip')
  rng = np.random.default_rng(0)
  frames_of = [rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
               for _ in range(8)]
  if 'videos' not in _MADE:
    encoder = clip_encoder.ClipEncoder(str(root / 'clip'))
    _MADE['videos'] = [encoder.encode_video(f) for f in frames_of]
  videos = _MADE['videos']
  for v, frames in enumerate(frames_of):
    if frames_dir is not None and v % 2 == 0:
      (frames_dir / f'v{v}').mkdir(parents=True)
      for i, f in enumerate(frames):
        Image.fromarray(f).save(frames_dir / f'v{v}' / f'{i:03d}.png')
  data.save_embeddings(root / 'gallery.npz', [f'v{v}' for v in range(8)],
                       np.stack(videos),
                       captions=[f'video number {v}' for v in range(8)])
  (root / 'ann.csv').write_text('pth1,pth2,edit,txt1,txt2\n' + ''.join(
      f'v{i},v{i + 1},make it different,video number {i},'
      f'video number {i + 1}\n' for i in range(4)))
  return dict(data='files', annotations=str(root / 'ann.csv'),
              gallery_embeddings=str(root / 'gallery.npz'),
              clip_dir=str(root / 'clip'))
