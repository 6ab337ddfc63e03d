"""A user's own text encoder and composer, for tests of
``--text_encoder`` / ``--composer`` (``recovr_jax.envs.files.callables``)."""

import zlib

import numpy as np

DIM = 16  # the tiny CLIP's (tests/helpers/real_files.py)
CALLS = {'encode': 0, 'compose': 0}


def encode(texts):
  """Bag of hashed words, L2-normalised: ``list[str] -> [n, 16]``."""
  CALLS['encode'] += 1
  out = np.zeros((len(texts), DIM), np.float32)
  for i, text in enumerate(texts):
    for word in text.lower().split():
      out[i, zlib.crc32(word.encode()) % DIM] += 1.0
    out[i] /= max(np.linalg.norm(out[i]), 1e-6)
  return out


def compose(reference, text):
  """Half of each, normalised."""
  CALLS['compose'] += 1
  q = 0.5 * reference + 0.5 * text
  return q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-6)


def wrong_shape(texts):
  return np.zeros((len(texts), DIM + 1), np.float32)


def with_nan(texts):
  out = encode(texts)
  out[-1, 0] = np.nan
  return out


NOT_CALLABLE = 3


def compose_one_row(reference, text):
  del text
  return reference[:1]
