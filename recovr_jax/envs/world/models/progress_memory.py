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

from recovr_jax import checksums


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
  """The gallery's cached long-term memory: the videos' embeddings and
  their captions (the captions' text embeddings are the text encoder's to
  keep: its own cache holds them, once)."""
  key: str
  video: np.ndarray            # [G, D] float32 video embeddings
  captions: tuple[str, ...]    # [G]
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
    compute: ``() -> (video [G, D], captions [G])``.
  """
  path = None
  if cache_dir is not None:
    path = pathlib.Path(cache_dir).absolute() / f'gallery-{key}.npz'
    if path.exists():
      cached = _read(path)
      if cached is not None:
        video, captions = cached
        return GalleryMemory(key=key, video=video, captions=captions,
                             from_cache=True)
  video, captions = compute()
  video = np.asarray(video, np.float32)
  captions = tuple(captions)
  if not np.isfinite(video).all():
    bad = int((~np.isfinite(video)).any(axis=-1).sum())
    raise ValueError(f'Progress Memory: {bad} gallery rows of video '
                     'embeddings are NaN or infinite (check the encoder '
                     'checkpoints)')
  if path is not None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = checksums.writer_temp(path)
    text_bytes, text_ends = _utf8(captions)
    try:
      np.savez(tmp, video=video, text_bytes=text_bytes, text_ends=text_ends,
               checksum=np.array(_checksum(video, captions)))
      tmp.replace(path)  # atomic: a killed run leaves no half-written entry
    finally:
      tmp.unlink(missing_ok=True)
  return GalleryMemory(key=key, video=video, captions=captions,
                       from_cache=False)


def _utf8(texts):
  """``texts`` as one UTF-8 byte string and each text's end."""
  encoded = [t.encode() for t in texts]
  return (np.frombuffer(b''.join(encoded), np.uint8),
          np.cumsum([len(b) for b in encoded], dtype=np.int64))


def _checksum(video, captions) -> str:
  h = hashlib.sha256()
  h.update(np.ascontiguousarray(video, np.float32).tobytes())
  h.update('\0'.join(captions).encode())
  return h.hexdigest()


def _read(path: pathlib.Path):
  """A cache entry's arrays, or ``None`` (with a warning) when it is
  unreadable, incomplete, fails its checksum or holds non-finite values:
  the cache is derived data, so it is recomputed."""
  try:
    with np.load(path, allow_pickle=False) as data:
      video = np.asarray(data['video'], np.float32)
      blob, ends = data['text_bytes'].tobytes(), data['text_ends'].tolist()
      starts = [0] + ends[:-1]
      captions = tuple(blob[a:b].decode() for a, b in zip(starts, ends))
      checksum = str(data['checksum'])
  except Exception as e:  # pylint: disable=broad-except
    problem = f'unreadable ({type(e).__name__}: {e})'
  else:
    if checksum != _checksum(video, captions):
      problem = 'fails its checksum'
    elif not np.isfinite(video).all():
      problem = 'holds NaN or infinite values'
    else:
      return video, captions
  logging.warning('Progress Memory cache %s: %s; recomputing it', path,
                  problem)
  print(f'warning: Progress Memory cache {path}: {problem}; recomputing it',
        flush=True)
  return None
