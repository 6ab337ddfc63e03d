"""Content hashes of what a run reads, so that its identity covers them.

A run's ``resolved_config.json`` holds the SHA-256 of every file and
directory that can change its numbers (encoder, captioner and reasoner
checkpoints, the text encoder, real-data files); resume compares them, so
a retrained checkpoint or an edited CSV is a different run, not a silent
mix of batches.
"""

import hashlib
import os
import pathlib

# (path, size, mtime_ns) -> digest: sweeps hash the same inputs once.
_CACHE: dict[tuple, str] = {}


def file_digest(path) -> str:
  """SHA-256 of one file's bytes (cached by path, size and mtime)."""
  path = pathlib.Path(path)
  st = path.stat()
  key = (str(path.absolute()), st.st_size, st.st_mtime_ns)
  if key not in _CACHE:
    h = hashlib.sha256()
    with path.open('rb') as f:
      for chunk in iter(lambda: f.read(1 << 20), b''):
        h.update(chunk)
    _CACHE[key] = h.hexdigest()
  return _CACHE[key]


def path_digest(path) -> str:
  """SHA-256 of a file, or of a directory's files (relative names and
  contents, in sorted order). A missing path is a ``FileNotFoundError``
  naming it."""
  path = pathlib.Path(path)
  if path.is_file():
    return file_digest(path)
  if not path.is_dir():
    raise FileNotFoundError(f'{path} does not exist')
  h = hashlib.sha256()
  for root, dirs, files in os.walk(path):
    dirs.sort()
    for name in sorted(files):
      f = pathlib.Path(root) / name
      h.update(str(f.relative_to(path)).encode() + b'\0')
      h.update(file_digest(f).encode())
  return h.hexdigest()


def input_paths(config) -> dict[str, str]:
  """Name -> path of every file or directory ``config`` reads that can
  change its numbers (defaults resolved)."""
  paths = {}
  if config.data == 'world':
    from recovr_jax.world import encoders  # pylint: disable=g-import-not-at-top
    paths['checkpoint_dir'] = (config.checkpoint_dir or
                               encoders.DEFAULT_CHECKPOINT_DIR)
    paths['text_encoder'] = encoders.minilm_path()
    if config.captions == 'model':
      from recovr_jax.world import captioner  # pylint: disable=g-import-not-at-top
      paths['captioner_checkpoint'] = (config.captioner_checkpoint or
                                       captioner.DEFAULT_CAPTIONER_DIR)
    if config.reasoner == 'flax_lm':
      from recovr_jax.world import reasoner_training  # pylint: disable=g-import-not-at-top
      paths['reasoner_checkpoint'] = (config.reasoner_checkpoint or
                                      reasoner_training.DEFAULT_REASONER_DIR)
  else:
    for name in ('annotations', 'gallery_embeddings', 'clip_dir',
                 'reasoner_checkpoint'):
      if getattr(config, name):
        paths[name] = getattr(config, name)
  return paths


def input_hashes(config) -> dict[str, dict[str, str]]:
  """Name -> ``{'path', 'sha256'}`` of ``input_paths(config)``."""
  return {name: {'path': str(path), 'sha256': path_digest(path)}
          for name, path in input_paths(config).items()}
