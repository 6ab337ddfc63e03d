"""Content hashes of what a run reads, so that its identity covers them.

A run's ``resolved_config.json`` holds the SHA-256 of every file and
directory that can change its numbers (encoder, captioner and reasoner
checkpoints, the text encoder, real-data files); resume compares them, so
a retrained checkpoint or an edited CSV is a different run, not a silent
mix of batches.
"""

import dataclasses
import datetime
import functools
import hashlib
import importlib.metadata
import json
import pathlib
import platform
import subprocess

import jax

from recovr_jax import checksums
from recovr_jax.reasoning import registry
from recovr_jax.run import run_config

path_digest = checksums.path_digest
# The repository (or the installed package's parent directory).
ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ('recovr_jax', 'jax', 'jaxlib', 'flax', 'optax',
            'orbax-checkpoint', 'chex', 'absl-py', 'numpy', 'transformers',
            'safetensors')


def input_paths(config, source) -> dict[str, str]:
  """Name -> path of every file or directory ``config`` reads that can
  change its numbers (defaults resolved): its data source's (``source``,
  the run's), then the reasoner's."""
  paths = source.input_paths()
  paths.update(registry.get(config.reasoner.name).inputs(
      config.reasoner, source.vocabulary(config.cache_dir)))
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


def input_hashes(config, source) -> dict[str, dict[str, str]]:
  """Name -> ``{'path', 'sha256'}`` of ``input_paths(config)`` (paths
  portable: relative to the repository or the output directory where they
  lie under them)."""
  return {name: {'path': portable(path, config.output_dir),
                 'sha256': path_digest(path)}
          for name, path in input_paths(config, source).items()}


@functools.cache
def code_digest() -> str:
  """SHA-256 of the package's Python sources (``recovr_jax/**/*.py``, by
  relative path): the code that computes a batch. A batch records it, and
  a resume refuses a batch computed by other code (``batches.load``)."""
  return checksums.source_digest()


def _git(*args) -> str | None:
  try:
    out = subprocess.run(['git', '-C', str(ROOT), *args], capture_output=True,
                         text=True, timeout=10, check=True)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip()


def _diff_digest() -> str | None:
  """SHA-256 of the checkout's uncommitted changes: ``git diff HEAD`` and
  each untracked, unignored file's path and bytes (None without git or
  without changes)."""
  diff = _git('diff', 'HEAD', '--binary')
  untracked = _git('ls-files', '--others', '--exclude-standard', '-z')
  names = sorted(n for n in (untracked or '').split('\0') if n)
  if diff is None or untracked is None or not (diff or names):
    return None
  h = hashlib.sha256(diff.encode())
  for name in names:
    h.update(b'\0' + name.encode() + b'\0')
    try:
      h.update((ROOT / name).read_bytes())
    except OSError:
      h.update(b'(unreadable)')
  return h.hexdigest()


def environment() -> dict:
  """Where and with what a run ran: package versions, Python, the JAX
  backend and devices, the git commit (whether the tree had uncommitted
  changes, and their digest), the sources' digest and the date. Not part
  of a run's identity."""
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
      # What the commit does not say: the uncommitted changes (tracked
      # files' diff against it, and the untracked files git does not
      # ignore; None: none, or no git), and the library's sources as run.
      'git_diff_sha256': _diff_digest(),
      'code_sha256': code_digest(),
      'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec='seconds'),
  }


# RunConfig fields that do not shape a batch's lists: how many sessions
# (each batch records its own), which methods (each has its own batches),
# the report's bootstrap, where caches and outputs go, the jitted driver's
# chunks (the same lists either way) and bookkeeping.
_NOT_IN_IDENTITY = ('methods', 'num_sessions', 'num_sessions_requested',
                    'num_processes', 'process_id', 'coordinator_address',
                    'gallery_over_processes',
                    'unverified_checkpoints', 'allow_unverified_checkpoints',
                    'bootstrap_resamples',
                    'bootstrap_baseline', 'bootstrap_also', 'seed', 'cache_dir', 'output_dir',
                    'resume', 'flags_text', 'max_error_share',
                    'allow_other_world_encoders', 'export_trec', 'plots',
                    'trajectories_format',
                    'environment', 'jit_chunk_size', 'jit_buckets')


def resolved_config(config: run_config.RunConfig, source) -> dict:
  """Everything that shapes the run's numbers, with content hashes of the
  files and directories it reads, and ``identity``: the hash of the part
  that shapes a batch's lists (each batch checkpoint records it)."""
  resolved = json.loads(json.dumps(dataclasses.asdict(config)))
  # Paths as ``portable`` writes them: the same inputs elsewhere are the
  # same run.
  resolved['data'] = {'source': config.data.NAME, **{
      k: (portable(v, config.output_dir)
          if isinstance(v, str) and pathlib.Path(v).is_absolute() else v)
      for k, v in resolved['data'].items()}}
  for name in ('output_dir', 'flags_text', 'resume'):
    resolved.pop(name)
  resolved['files'] = input_hashes(config, source)
  resolved['backend'] = jax.default_backend()
  shaping = {k: v for k, v in resolved.items() if k not in _NOT_IN_IDENTITY}
  # Session s is query s % Q whatever the repeats: a batch's lists do not
  # depend on them (as on --num_sessions); accepting other encoders only
  # lets a run start.
  shaping['data'] = {k: v for k, v in shaping['data'].items()
                     if k not in ('query_repeats',
                                  'allow_other_world_encoders')}
  # Files by content: the same inputs elsewhere are the same run.
  shaping['files'] = {k: v['sha256'] for k, v in resolved['files'].items()}
  resolved['identity'] = hashlib.sha256(
      json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:20]
  resolved['environment'] = environment()
  return resolved


def differences(old: dict, new: dict, prefix='') -> list[str]:
  out = []
  for key in sorted(set(old) | set(new)):
    if key in _NOT_IN_IDENTITY or key == 'identity':
      continue
    a, b = old.get(key), new.get(key)
    if isinstance(a, dict) and isinstance(b, dict):
      out += differences(a, b, f'{prefix}{key}.')
    elif a != b:
      out.append(f'{prefix}{key}: {a!r} -> {b!r}')
  return out
