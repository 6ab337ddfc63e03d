"""Synthetic real files in WebVid-CoVR's layout, and their text encoder,
for the whole-run benchmark's files parts (``bench_runs``): no downloads.

A video's caption names one word of each of four attributes; its
embedding is the caption's ``hashed_text`` plus noise, so text finds it
the way a real text encoder finds a video it describes. A query changes
one or two attributes of its reference, and its edit names the target's
words.
"""

import functools
import pathlib
import zlib

import numpy as np

from recovr_jax.envs.files import data

DIM = 64   # the embeddings' width
METHODS = 'recovr,ivr,merlin,umivr,history_rewrite'  # the runs' methods
# One word of each attribute per caption.
WORDS = (('red', 'blue', 'green', 'black', 'white', 'yellow'),
         ('car', 'dog', 'boat', 'bird', 'horse', 'train'),
         ('beach', 'road', 'forest', 'city', 'field', 'river'),
         ('day', 'night', 'rain', 'snow', 'fog', 'dusk'))


@functools.lru_cache(maxsize=None)
def _word(word: str) -> np.ndarray:
  return np.random.default_rng(zlib.crc32(word.encode())).normal(size=DIM)


def hashed_text(texts) -> np.ndarray:
  """The files' text encoder (``--text_encoder``): a text's words,
  each a fixed random vector (seeded by its CRC-32), summed and normalised:
  ``[n, DIM]`` float32."""
  out = np.zeros((len(texts), DIM), np.float32)
  for i, text in enumerate(texts):
    for word in text.lower().split():
      out[i] += _word(word)
  norms = np.linalg.norm(out, axis=1, keepdims=True)
  return out / np.maximum(norms, 1e-6)


def write(root: pathlib.Path, videos: int, queries: int) -> list[str]:
  """Synthetic real files in WebVid-CoVR's layout under ``root``: a
  gallery of ``videos`` (captions of one word per attribute, embeddings the
  captions' ``hashed_text`` plus Gaussian noise of scale 0.05 per
  dimension, normalised) and ``queries`` annotation rows (a reference and a
  target that differ in one or two attributes, the edit naming the
  target's words). Returns the run flags that read them."""
  rng = np.random.default_rng(0)
  combos = np.stack([rng.integers(0, len(w), videos) for w in WORDS],
                    axis=1)
  captions = [' '.join(WORDS[a][v] for a, v in enumerate(row))
              for row in combos]
  video = hashed_text(captions) + rng.normal(
      scale=0.05, size=(videos, DIM)).astype(np.float32)
  root.mkdir(parents=True, exist_ok=True)
  ids = [f'v{i}' for i in range(videos)]
  data.save_embeddings(root / 'gallery.npz', ids, video, captions=captions)
  rows = []
  while len(rows) < queries:
    ref, target = (int(x) for x in rng.integers(0, videos, 2))
    changed = np.flatnonzero(combos[ref] != combos[target])
    if not 1 <= len(changed) <= 2:
      continue
    edit = 'make it ' + ' and '.join(WORDS[a][combos[target, a]]
                                     for a in changed)
    rows.append(f'{ids[ref]},{ids[target]},{edit},{captions[ref]},'
                f'{captions[target]}\n')
  (root / 'ann.csv').write_text('pth1,pth2,edit,txt1,txt2\n' + ''.join(rows))
  return ['--data=files', f'--annotations={root / "ann.csv"}',
          f'--gallery_embeddings={root / "gallery.npz"}',
          '--text_encoder=experiments.bench.synthetic_files:hashed_text',
          f'--methods={METHODS}', '--batch_size=100']
