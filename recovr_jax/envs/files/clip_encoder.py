"""A local Hugging Face Flax CLIP checkpoint as video and text encoder.

Nothing is downloaded: ``model_dir`` must hold a ``FlaxCLIPModel`` saved with
``save_pretrained`` and its tokenizer. A video is a stack of frames; each
frame is resized to the model's image size, normalised with CLIP's mean and
standard deviation, embedded, and the frame embeddings are mean-pooled and
L2-normalised.
"""

import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import vectors
from recovr_jax.protocol import dialogue
from recovr_jax import pretrained

# CLIP's image normalisation, used when the directory has no
# preprocessor_config.json.
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def check_clip_dir(model_dir) -> None:
  """Raises ``FileNotFoundError`` naming what a CLIP directory lacks: its
  config.json, weights (flax_model.msgpack or model.safetensors /
  pytorch_model.bin) and tokenizer (tokenizer.json, or vocab.json and
  merges.txt)."""
  d = pathlib.Path(model_dir)
  if not d.is_dir():
    raise FileNotFoundError(f'CLIP directory {model_dir!r} does not exist')
  has = lambda *names: all((d / n).is_file() for n in names)
  missing = []
  if not has('config.json'):
    missing.append('config.json')
  if not (has('flax_model.msgpack') or has('model.safetensors') or
          has('pytorch_model.bin')):
    missing.append('weights (flax_model.msgpack)')
  if not (has('tokenizer.json') or has('vocab.json', 'merges.txt')):
    missing.append('tokenizer files (tokenizer.json, or vocab.json and '
                   'merges.txt)')
  if missing:
    raise FileNotFoundError(
        f'CLIP directory {model_dir!r} is missing {", ".join(missing)} (save '
        'the model and its tokenizer with save_pretrained)')


class ClipEncoder:
  """Text and video embeddings from a local Flax CLIP checkpoint."""

  def __init__(self, model_dir: str, batch_size: int = 64):
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    from transformers import FlaxCLIPModel  # pylint: disable=g-import-not-at-top
    check_clip_dir(model_dir)
    try:
      self._model = pretrained.from_pretrained(FlaxCLIPModel, model_dir,
                                               'CLIP checkpoint')
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'cannot load a FlaxCLIPModel from {model_dir!r} '
                       f'({type(e).__name__}: {e})') from e
    try:
      self._tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'cannot load the tokenizer in {model_dir!r} '
                       f'({type(e).__name__}: {e})') from e
    self.model_dir = model_dir
    self._batch = batch_size
    # Texts longer than the text tower's positions, with their token
    # counts: encoded from their first tokens only, and reported
    # (Dense-WebVid-CoVR's modification texts can be that long).
    self.truncated: dict[str, int] = {}
    # Texts longer than the positions: (feedback dropped, tokens cut); a
    # joined dialogue loses its oldest feedback first (``dialogue.fit``).
    self.cuts: dict[str, tuple[int, int]] = {}
    config = self._model.config
    self.dim = config.projection_dim
    self.image_size = config.vision_config.image_size
    self._max_length = config.text_config.max_position_embeddings
    self.max_tokens = self._max_length
    mean, std = _CLIP_MEAN, _CLIP_STD
    pre = os.path.join(model_dir, 'preprocessor_config.json')
    if os.path.isfile(pre):
      with open(pre) as f:
        cfg = json.load(f)
      mean, std = cfg.get('image_mean', mean), cfg.get('image_std', std)
    self._mean = jnp.asarray(mean, jnp.float32)
    self._std = jnp.asarray(std, jnp.float32)
    model = self._model

    def text_features(params, ids, mask):
      return vectors.normalize(model.get_text_features(
          input_ids=ids, attention_mask=mask, params=params))

    def frame_features(params, frames):  # [n, H, W, 3] float in [0, 1]
      n = frames.shape[0]
      size = self.image_size
      frames = jax.image.resize(frames, (n, size, size, 3), 'bilinear')
      frames = (frames - self._mean) / self._std
      pixels = jnp.transpose(frames, (0, 3, 1, 2))  # CLIP takes NCHW
      return vectors.normalize(model.get_image_features(pixel_values=pixels,
                                                 params=params))

    self._text = jax.jit(text_features)
    self._frames = jax.jit(frame_features)

  def encode_text(self, texts) -> np.ndarray:
    """``[n]`` texts -> ``[n, dim]`` float32 unit vectors; a joined
    dialogue longer than the text tower's positions loses its oldest
    feedback (``dialogue.fit``, recorded in ``cuts``); another text (or a
    dialogue still too long) is encoded from its first tokens and recorded
    in ``truncated``."""
    texts = list(texts)
    count = lambda text: len(self._tokenizer(text)['input_ids'])
    out = []
    for start in range(0, len(texts), self._batch):
      batch = texts[start:start + self._batch]
      fitted = []
      for text, ids in zip(batch, self._tokenizer(batch)['input_ids']):
        if len(ids) > self._max_length:
          text_in, dropped, over = dialogue.fit(text, count,
                                                self._max_length)
          self.cuts[text] = (dropped, over)
          if over:
            self.truncated[text] = len(ids)
          text = text_in
        fitted.append(text)
      tokens = self._tokenizer(fitted, padding='max_length', truncation=True,
                               max_length=self._max_length, return_tensors='np')
      out.append(np.asarray(self._text(self._model.params,
                                       tokens['input_ids'],
                                       tokens['attention_mask'])))
    return (np.concatenate(out) if out else
            np.zeros((0, self.dim), np.float32)).astype(np.float32)

  def encode_video(self, frames) -> np.ndarray:
    """``[F, H, W, 3]`` frames (uint8 or float in [0, 1]) -> ``[dim]``."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
      raise ValueError(f'frames must have shape [F, H, W, 3], got '
                       f'{frames.shape}')
    if frames.dtype == np.uint8:
      frames = frames.astype(np.float32) / 255.0
    per_frame = np.asarray(self._frames(self._model.params,
                                        jnp.asarray(frames, jnp.float32)))
    pooled = per_frame.mean(axis=0)
    return (pooled / max(np.linalg.norm(pooled), 1e-12)).astype(np.float32)
