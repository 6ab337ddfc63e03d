"""Progress Memory, long-term part: the gallery's embeddings and captions.

Computing them means rendering and encoding every gallery video and caption,
so they are cached on disk and reused across sessions and runs. The cache key
is a hash of everything they depend on (the world's config, the video encoder
parameters, the text encoder); any change gives a new key and a recompute.
"""

import dataclasses
import hashlib
import json
import pathlib

from absl import logging
import jax
import numpy as np


def params_fingerprint(params) -> str:
  """A SHA-256 of a parameter pytree's structure and values."""
  digest = hashlib.sha256()
  leaves, treedef = jax.tree_util.tree_flatten(params)
  digest.update(str(treedef).encode())
  for leaf in leaves:
    leaf = np.asarray(leaf)
    digest.update(str((leaf.shape, leaf.dtype)).encode())
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class GalleryMemory:
  """The gallery's cached long-term memory."""
  key: str
  video: np.ndarray            # [G, D] float32 video embeddings
  captions: tuple[str, ...]    # [G]
  caption_text: np.ndarray     # [G, D] float32 text embeddings of captions
  from_cache: bool


def cache_key(**parts) -> str:
  """A hash of JSON-able ``parts`` (configs, fingerprints, model names)."""
  blob = json.dumps(parts, sort_keys=True, default=str)
  return hashlib.sha256(blob.encode()).hexdigest()[:20]


def load_or_compute(cache_dir, key: str, compute) -> GalleryMemory:
  """Returns the cached entry for ``key`` or computes and stores it.

  Args:
    cache_dir: directory of the cache (created if missing); ``None`` disables
      the cache.
    key: from ``cache_key``.
    compute: ``() -> (video [G, D], captions [G], caption_text [G, D])``.
  """
  path = None
  if cache_dir is not None:
    path = pathlib.Path(cache_dir).absolute() / f'gallery-{key}.npz'
    if path.exists():
      cached = _read(path)
      if cached is not None:
        video, captions, caption_text = cached
        return GalleryMemory(key=key, video=video, captions=captions,
                             caption_text=caption_text, from_cache=True)
  video, captions, caption_text = compute()
  video = np.asarray(video, np.float32)
  caption_text = np.asarray(caption_text, np.float32)
  for name, array in (('video', video), ('caption_text', caption_text)):
    if not np.isfinite(array).all():
      bad = int((~np.isfinite(array)).any(axis=-1).sum())
      raise ValueError(f'Progress Memory: {bad} gallery rows of {name} '
                       'embeddings are NaN or infinite (check the encoder '
                       'checkpoints)')
  if path is not None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix('.tmp.npz')
    np.savez(tmp, video=video, captions=np.array(captions, dtype=str),
             caption_text=caption_text,
             checksum=np.array(_checksum(video, captions, caption_text)))
    tmp.replace(path)  # atomic: a killed run leaves no half-written entry
  return GalleryMemory(key=key, video=video, captions=tuple(captions),
                       caption_text=caption_text, from_cache=False)


def _checksum(video, captions, caption_text) -> str:
  h = hashlib.sha256()
  for array in (video, caption_text):
    h.update(np.ascontiguousarray(array, np.float32).tobytes())
  h.update('\0'.join(captions).encode())
  return h.hexdigest()


def _read(path: pathlib.Path):
  """A cache entry's arrays, or ``None`` (with a warning) when it is
  unreadable, incomplete, fails its checksum or holds non-finite values:
  the cache is derived data, so it is recomputed."""
  try:
    with np.load(path, allow_pickle=False) as data:
      video = np.asarray(data['video'], np.float32)
      captions = tuple(data['captions'].tolist())
      caption_text = np.asarray(data['caption_text'], np.float32)
      checksum = str(data['checksum'])
  except Exception as e:  # pylint: disable=broad-except
    problem = f'unreadable ({type(e).__name__}: {e})'
  else:
    if checksum != _checksum(video, captions, caption_text):
      problem = 'fails its checksum'
    elif not (np.isfinite(video).all() and np.isfinite(caption_text).all()):
      problem = 'holds NaN or infinite values'
    else:
      return video, captions, caption_text
  logging.warning('Progress Memory cache %s: %s; recomputing it', path,
                  problem)
  print(f'warning: Progress Memory cache {path}: {problem}; recomputing it',
        flush=True)
  return None
