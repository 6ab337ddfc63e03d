"""The user's own text encoder and composer on real data.

``--text_encoder=module:function`` (or ``path/to/file.py:function``, a
file imported by its path, no ``PYTHONPATH`` needed) names a Python callable ``list[str] ->
float array [n, D]`` (for example CoVR-2's BLIP text encoder in PyTorch,
imported from the user's environment; `docs/real-data.md` has one) and
``--composer=module:function`` a callable ``(reference [B, D], text [B, D])
-> [B, D]`` (CoVR's own BLIP composer). They replace ``--clip_dir``'s text
side and the training-free sum wherever feedback is encoded or composed.
Every call is checked: the shape (rows, and the gallery's dimension ``D``),
finite values; a failure names the flag, the callable and what came back.
"""

import importlib
import importlib.util
import os
import sys

import numpy as np


def _is_path(module: str) -> bool:
  """Whether ``spec``'s module part names a file (``.py``), not a module."""
  return module.endswith('.py')


def parse(spec: str, flag: str) -> tuple[str, str]:
  """``(module, function)`` of ``module:function``; ValueError naming
  ``flag`` otherwise."""
  module, sep, function = spec.partition(':')
  if not sep or not module or not function or ':' in function:
    raise ValueError(f'{flag}={spec!r}: expected module:function (a Python '
                     'callable importable from this environment, e.g. '
                     'my_encoders:blip_text)')
  return module, function


def module_file(spec: str, flag: str) -> str | None:
  """The file of ``spec``'s module (for the run's identity), or None for a
  module with no file; ValueError naming ``flag`` when it is not found.
  Finds the module without running it."""
  module, _ = parse(spec, flag)
  if _is_path(module):
    path = os.path.abspath(os.path.expanduser(module))
    if not os.path.isfile(path):
      raise ValueError(f'{flag}={spec!r}: no file {path}')
    return path
  try:
    found = importlib.util.find_spec(module)
  except (ImportError, ValueError) as e:
    raise ValueError(f'{flag}={spec!r}: module {module!r} cannot be found '
                     f'({e})') from e
  if found is None:
    raise ValueError(f'{flag}={spec!r}: no module {module!r} on the Python '
                     'path of this environment')
  return found.origin if found.has_location else None


def load(spec: str, flag: str):
  """The callable ``spec`` names (imported now)."""
  module, function = parse(spec, flag)
  try:
    fn = getattr(_import(module, flag, spec), function)
  except AttributeError as e:
    raise ValueError(f'{flag}={spec!r}: module {module!r} has no '
                     f'{function!r}') from e
  except ImportError as e:
    raise ValueError(f'{flag}={spec!r}: importing {module!r} failed: '
                     f'{e}') from e
  if not callable(fn):
    raise ValueError(f'{flag}={spec!r}: {function!r} is not callable')
  return fn


def _import(module: str, flag: str, spec: str):
  """The module ``module`` names: imported by name, or a ``.py`` file
  loaded from its path (under a name of its own, once per process)."""
  if not _is_path(module):
    return importlib.import_module(module)
  path = module_file(spec, flag)
  name = f'_recovr_user_{abs(hash(path)):x}'
  if name not in sys.modules:
    found = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(found)
    sys.modules[name] = loaded
    try:
      found.loader.exec_module(loaded)
    except BaseException:
      del sys.modules[name]
      raise
  return sys.modules[name]


def _checked(out, flag: str, spec: str, rows: int, dim: int) -> np.ndarray:
  try:
    out = np.asarray(out, np.float32)
  except (TypeError, ValueError) as e:
    raise ValueError(f'{flag}={spec!r} returned something that is not a '
                     f'float array ({type(out).__name__}: {e})') from e
  if out.shape != (rows, dim):
    raise ValueError(f'{flag}={spec!r} returned shape {out.shape} for '
                     f'{rows} inputs; expected ({rows}, {dim}) (D of the '
                     'gallery embeddings)')
  bad = ~np.isfinite(out).all(axis=1)
  if bad.any():
    raise ValueError(f'{flag}={spec!r} returned NaN or inf in row '
                     f'{int(np.flatnonzero(bad)[0])} of {rows} '
                     f'({int(bad.sum())} rows)')
  return out


def text_encoder(spec: str, dim: int, batch_size: int = 64):
  """``encode_text(texts) -> [n, dim]`` through the callable ``spec``:
  each distinct text encoded once (cached by text), in batches of
  ``batch_size``, every batch checked."""
  fn = load(spec, '--text_encoder')
  cache = {}

  def encode_text(texts):
    missing = sorted({t for t in texts if t not in cache})
    for start in range(0, len(missing), batch_size):
      batch = missing[start:start + batch_size]
      cache.update(zip(batch, _checked(fn(list(batch)), '--text_encoder',
                                       spec, len(batch), dim)))
    if not texts:
      return np.zeros((0, dim), np.float32)
    return np.stack([cache[t] for t in texts])

  return encode_text


def composer(spec: str, dim: int):
  """``compose(reference [B, D], text [B, D]) -> [B, D]`` through the
  callable ``spec``, every call checked."""
  fn = load(spec, '--composer')

  def compose(reference, text):
    reference = np.asarray(reference, np.float32)
    return _checked(fn(reference, np.asarray(text, np.float32)),
                    '--composer', spec, reference.shape[0], dim)

  return compose
