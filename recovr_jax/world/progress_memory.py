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
      with np.load(path, allow_pickle=False) as data:
        return GalleryMemory(key=key, video=data['video'],
                             captions=tuple(data['captions'].tolist()),
                             caption_text=data['caption_text'],
                             from_cache=True)
  video, captions, caption_text = compute()
  if path is not None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix('.tmp.npz')
    np.savez(tmp, video=np.asarray(video, np.float32),
             captions=np.array(captions, dtype=str),
             caption_text=np.asarray(caption_text, np.float32))
    tmp.replace(path)  # atomic: a killed run leaves no half-written entry
  return GalleryMemory(key=key, video=np.asarray(video, np.float32),
                       captions=tuple(captions),
                       caption_text=np.asarray(caption_text, np.float32),
                       from_cache=False)
