"""Content hashes of what a run reads, so that its identity covers them.

A run's ``resolved_config.json`` holds the SHA-256 of every file and
directory that can change its numbers (encoder, captioner and reasoner
checkpoints, the text encoder, real-data files); resume compares them, so
a retrained checkpoint or an edited CSV is a different run, not a silent
mix of batches.
"""

import datetime
import importlib.metadata
import pathlib
import platform
import subprocess

from recovr_jax import checksums

path_digest = checksums.path_digest
# The repository (or the installed package's parent directory).
ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ('recovr_jax', 'jax', 'jaxlib', 'flax', 'optax',
            'orbax-checkpoint', 'chex', 'absl-py', 'numpy', 'transformers',
            'safetensors')


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
                 'reference_embeddings', 'query_embeddings',
                 'reasoner_checkpoint'):
      if getattr(config, name):
        paths[name] = getattr(config, name)
  if config.user_phraser == 'smollm2':
    from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
    paths['user_phraser_gguf'] = str(gguf_llama.find_smollm2())
  if config.reasoner in ('smollm2', 'smollm2_world'):
    from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
    from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
    if config.reasoner_checkpoint:
      paths['reasoner_checkpoint'] = config.reasoner_checkpoint
    else:
      paths['reasoner_gguf'] = str(gguf_llama.find_smollm2())
    if config.reasoner == 'smollm2_world':
      paths['reasoner_adapter'] = (config.reasoner_adapter or
                                   chat_lm.DEFAULT_ADAPTER_DIR)
  return paths


def portable(path, output_dir=None) -> str:
  """``path`` relative to the repository, or as ``<output_dir>/...`` under
  the run's output directory, where it lies under them; otherwise as
  given."""
  p = pathlib.Path(path)
  absolute = p.resolve() if p.exists() or p.is_absolute() else None
  if absolute is None:
    return str(path)
  if output_dir is not None:
    try:
      rest = absolute.relative_to(pathlib.Path(output_dir).resolve())
      return str(pathlib.Path('<output_dir>') / rest)
    except ValueError:
      pass
  try:
    return str(absolute.relative_to(ROOT))
  except ValueError:
    return str(path)


def input_hashes(config) -> dict[str, dict[str, str]]:
  """Name -> ``{'path', 'sha256'}`` of ``input_paths(config)`` (paths
  portable: relative to the repository or the output directory where they
  lie under them)."""
  return {name: {'path': portable(path, config.output_dir),
                 'sha256': path_digest(path)}
          for name, path in input_paths(config).items()}


def _git(*args) -> str | None:
  try:
    out = subprocess.run(['git', '-C', str(ROOT), *args], capture_output=True,
                         text=True, timeout=10, check=True)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip()


def environment() -> dict:
  """Where and with what a run ran: package versions, Python, the JAX
  backend and devices, the git commit (and whether the tree had uncommitted
  changes) and the date. Not part of a run's identity."""
  import jax  # pylint: disable=g-import-not-at-top
  versions = {}
  for name in PACKAGES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  commit = _git('rev-parse', 'HEAD')
  status = _git('status', '--porcelain', '--untracked-files=no')
  return {
      'packages': versions,
      'python': platform.python_version(),
      'platform': platform.platform(),
      'jax_backend': jax.default_backend(),
      'devices': [str(d) for d in jax.devices()],
      'git_commit': commit,
      'git_dirty': None if status is None else bool(status),
      'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec='seconds'),
  }
