"""SHA-256 digests of files and directories, and checkpoint manifests.

A checkpoint directory written by this library carries ``checksums.json``
(every file's SHA-256, written at save time); loaders call
``verify_manifest`` first, so a flipped byte is an error that names the
file, not a model that silently computes something else. A directory
without a manifest is refused (it cannot be verified) unless
``allow_unverified(True)`` (the runner's --allow_unverified_checkpoints);
then each one loaded is listed by ``unverified()`` for the run's outputs.
"""

import functools
import hashlib
import json
import os
import pathlib
import threading

from absl import logging
import numpy as np

MANIFEST = 'checksums.json'
_POLICY = {'allow': False, 'unverified': []}


def allow_unverified(allow: bool) -> None:
  """Whether ``verify_manifest`` accepts a directory with no manifest (and
  records it); resets the record."""
  _POLICY['allow'] = bool(allow)
  _POLICY['unverified'] = []


def unverified() -> list[str]:
  """``what: directory`` of every directory loaded without a manifest
  since ``allow_unverified`` was last called."""
  return list(_POLICY['unverified'])
# (path, size, mtime_ns) -> digest: sweeps and reloads hash a file once.
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


# A checkpoint's model card is documentation: editing it changes no
# checkpoint's digest and needs no manifest entry.
MODEL_CARD = 'MODEL_CARD.md'


def _files(directory: pathlib.Path):
  for root, dirs, files in os.walk(directory):
    dirs.sort()
    for name in sorted(files):
      f = pathlib.Path(root) / name
      if f.relative_to(directory).as_posix() not in (MANIFEST, MODEL_CARD):
        yield f


def path_digest(path) -> str:
  """SHA-256 of a file, or of a directory's files (relative names and
  contents in sorted order, its manifest left out)."""
  path = pathlib.Path(path)
  if path.is_file():
    return file_digest(path)
  if not path.is_dir():
    raise FileNotFoundError(f'{path} does not exist')
  h = hashlib.sha256()
  for f in _files(path):
    h.update(f.relative_to(path).as_posix().encode() + b'\0')
    h.update(file_digest(f).encode())
  return h.hexdigest()


def json_digest(body) -> str:
  """SHA-256 of ``body`` as canonical JSON (sorted keys): the checksum of a
  JSON document kept between runs (a batch's records, a fitted reader)."""
  return hashlib.sha256(json.dumps(body, sort_keys=True).encode()
                        ).hexdigest()


def writer_temp(path) -> pathlib.Path:
  """A temporary name beside ``path`` that no other writer uses (this
  process and thread's), for a file written whole and then renamed onto
  ``path``: two runs saving one cache at once each rename a whole file
  (they shared one temporary name before, and one renamed the other's
  half-written file or found it gone). Ends in ``.tmp.npz``, so NumPy
  keeps the name; starts with a dot, so cache listings skip it."""
  path = pathlib.Path(path)
  return path.with_name(f'.{path.name}.{os.getpid()}-'
                        f'{threading.get_ident()}.tmp.npz')


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
  """SHA-256 of the package's Python sources (``recovr_jax/**/*.py``, by
  relative path): the code that computes a result kept between runs (a
  batch, a fitted reader). Read once per process."""
  package = pathlib.Path(__file__).resolve().parent
  h = hashlib.sha256()
  for path in sorted(package.rglob('*.py')):
    h.update(str(path.relative_to(package)).encode() + b'\0')
    h.update(path.read_bytes() + b'\0')
  return h.hexdigest()


def write_manifest(directory) -> pathlib.Path:
  """Writes ``directory/checksums.json``: relative path -> SHA-256."""
  directory = pathlib.Path(directory)
  manifest = {f.relative_to(directory).as_posix(): file_digest(f)
              for f in _files(directory)}
  path = directory / MANIFEST
  path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + '\n')
  return path


def verify_manifest(directory, what: str = 'checkpoint') -> bool:
  """Checks every file of ``directory`` against its manifest.

  Without a manifest: raises ``ValueError`` unless ``allow_unverified``
  was set, and then returns False (with a warning, the directory recorded
  in ``unverified()``). Raises ``ValueError`` naming the file that is
  missing, changed or unlisted.
  """
  directory = pathlib.Path(directory)
  path = directory / MANIFEST
  if not path.is_file():
    if not _POLICY['allow']:
      raise ValueError(
          f'{what} {directory} has no {MANIFEST}, so its files cannot be '
          'verified; write one from a copy you trust (python -c "from '
          f'recovr_jax import checksums; checksums.write_manifest(\'{directory}'
          '\')") or pass --allow_unverified_checkpoints (recorded in the '
          'outputs)')
    logging.warning('%s %s has no %s: its files are not verified', what,
                    directory, MANIFEST)
    _POLICY['unverified'].append(f'{what}: {directory}')
    return False
  try:
    manifest = json.loads(path.read_text())
  except ValueError as e:
    raise ValueError(f'{what} manifest {path} is unreadable: {e}') from e
  if not (isinstance(manifest, dict) and all(
      isinstance(d, str) for d in manifest.values())):
    raise ValueError(f'{what} manifest {path} is unreadable: expected a JSON '
                     'object of file name -> SHA-256 hex digest')
  present = {f.relative_to(directory).as_posix() for f in _files(directory)}
  for name, digest in sorted(manifest.items()):
    if name not in present:
      raise ValueError(f'{what} {directory}: {name} is missing (listed in '
                       f'{path})')
    if file_digest(directory / name) != digest:
      raise ValueError(f'{what} file {directory / name} does not match its '
                       f'checksum in {path} (corrupted or changed)')
  extra = sorted(present - set(manifest))
  if extra:
    raise ValueError(f'{what} {directory} holds files its manifest {path} '
                     f'does not list: {", ".join(extra[:5])}')
  return True


def check_finite(params, where: str) -> None:
  """Raises ``ValueError`` naming the first parameter leaf of ``params``
  that holds NaN or infinite values."""
  import jax  # pylint: disable=g-import-not-at-top
  for key_path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.floating) and not np.isfinite(leaf).all():
      bad = int((~np.isfinite(leaf)).sum())
      raise ValueError(f'{where}: parameter {jax.tree_util.keystr(key_path)} '
                       f'holds {bad} NaN or infinite values')
