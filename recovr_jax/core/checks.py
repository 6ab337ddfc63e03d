"""Host-boundary validation shared by the public functions.

Every public function validates its inputs here before it calls a compiled core,
so bad input fails fast with a message that names the argument. Shape checks run
always (shapes are known while tracing); value checks (NaN, padding, ranges) run
only on concrete arrays, because a traced value cannot be read on the host.
"""

from collections.abc import Sequence
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np


def is_concrete(x) -> bool:
  """True when ``x`` holds values the host can read (not a tracer)."""
  return not isinstance(x, jax.core.Tracer)


def positive_int(name: str, value) -> int:
  """Returns ``value`` as an int, or raises if it is not an integer >= 1."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise TypeError(f'{name} must be an integer >= 1, got {value!r}')
  if value < 1:
    raise ValueError(f'{name} must be >= 1, got {value}')
  return int(value)


def int_problem(name: str, value, least: int) -> str | None:
  """Why ``value`` is not an integer ``>= least`` (None: it is); for
  configurations that report every problem at once."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    return f'{name} must be an integer, got {value!r}'
  if value < least:
    return f'{name} must be >= {least}, got {value}'
  return None


def at_least_int(name: str, value, least: int) -> int:
  """``value`` as an int, or ``ValueError`` if it is not an integer
  ``>= least``."""
  problem = int_problem(name, value, least)
  if problem:
    raise ValueError(problem)
  return int(value)


def choice(name: str, value, choices: Sequence[str]) -> str:
  if value not in choices:
    raise ValueError(
        f'unknown {name} {value!r}; valid choices: {", ".join(choices)}')
  return value


def array(name: str, x, ndim: int, kind: str):
  """Checks rank and dtype kind of ``x`` and returns it as an array.

  Args:
    name: argument name used in error messages.
    x: array-like.
    ndim: the expected number of dimensions.
    kind: ``'float'``, ``'int'`` or ``'bool'``. Integer and boolean arrays
      are accepted for ``'float'``.

  Returns:
    ``x`` as a NumPy or JAX array (concrete inputs stay where they are).
  """
  if not hasattr(x, 'shape') or not hasattr(x, 'dtype'):
    x = np.asarray(x)
  if x.ndim != ndim:
    raise ValueError(
        f'{name} must have rank {ndim}, got shape {tuple(x.shape)}')
  dtype = np.dtype(x.dtype)
  if kind == 'float':
    if not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)
            or dtype in (jnp.bfloat16, np.bool_)):
      raise TypeError(f'{name} must hold floating-point values, got {dtype}')
  elif kind == 'int':
    if not np.issubdtype(dtype, np.integer):
      raise TypeError(f'{name} must hold integers, got {dtype}')
  elif kind == 'bool':
    if dtype != np.bool_:
      raise TypeError(f'{name} must be boolean, got {dtype}')
  else:
    raise ValueError(f'unknown kind {kind!r}')
  return x


@jax.jit
def _finite_rows(x):
  return jnp.all(jnp.isfinite(x), axis=tuple(range(1, x.ndim)))


def finite(name: str, x, what: str = 'embeddings') -> None:
  """Raises if a concrete array holds NaN or inf, naming the first bad row
  (``what``: what the message says must be finite)."""
  if not is_concrete(x):
    return
  if isinstance(x, np.ndarray):
    ok = np.isfinite(x).reshape(x.shape[0], -1).all(axis=1) if x.ndim else (
        np.isfinite(x)[None])
  else:
    ok = _finite_rows(x) if x.ndim else jnp.isfinite(x)[None]
    if not is_concrete(ok):
      return  # a constant closed over by an outer jit: values not readable
    ok = np.asarray(ok)
  if not ok.all():
    row = int(np.argmin(ok))
    raise ValueError(
        f'{name} holds NaN or inf (first at row {row}); {what} must be '
        'finite')


def no_nan(name: str, x) -> None:
  """Raises if a concrete array holds NaN (``-inf`` padding and other
  infinities are allowed), naming the first bad entry's index."""
  if not is_concrete(x) or not np.size(x):
    return
  bad = np.isnan(np.asarray(x))
  if bad.any():
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f'{name} holds NaN (first at index {where}); scores are '
                     'numbers, with -inf for padding')


def same(name_a: str, a: int, name_b: str, b: int, what: str) -> None:
  if a != b:
    raise ValueError(f'{name_a} and {name_b} must have the same {what}, '
                     f'got {a} and {b}')


def shape(name: str, x, expected: tuple[int, ...]) -> None:
  if tuple(x.shape) != tuple(expected):
    raise ValueError(
        f'{name} must have shape {tuple(expected)}, got {tuple(x.shape)}')


def unique_ids_per_list(name: str, ids) -> None:
  """Raises if a concrete ``[..., K]`` id array repeats an id within a list."""
  if not is_concrete(ids):
    return
  ids = np.asarray(ids)
  flat = ids.reshape(-1, ids.shape[-1])
  s = np.sort(flat, axis=1)
  dup = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
  if dup.any():
    row = int(np.argmax(dup.any(axis=1)))
    where = np.unravel_index(row, ids.shape[:-1]) if ids.ndim > 1 else ()
    raise ValueError(
        f'{name} repeats a gallery id within one list (list index '
        f'{tuple(int(i) for i in where)}); each list holds an id at most once')


def gallery_ids(name: str, x, num_ids: int | None = None,
                bound: str = 'the gallery size') -> None:
  """Raises if a concrete id array holds an id below ``-1`` (the padding
  or "none" value) or, with ``num_ids`` (called ``bound`` in the message),
  one not below ``num_ids``."""
  if not is_concrete(x) or not np.size(x):
    return
  x = np.asarray(x)
  low, high = int(np.min(x)), int(np.max(x))
  if low < -1:
    raise ValueError(f'{name} holds {low}; gallery ids are >= 0, with -1 '
                     'for padding or none')
  if num_ids is not None and high >= num_ids:
    raise ValueError(f'{name} holds id {high}; every id must be below '
                     f'{bound} ({num_ids})')


def ranks(name: str, x) -> None:
  """Raises if a concrete rank array holds a rank below 1 (ranks are
  1-based; an absent target has rank ``K + 1``)."""
  if is_concrete(x) and np.size(x) and np.min(np.asarray(x)) < 1:
    raise ValueError(f'{name} must be >= 1 (1-based ranks), got min '
                     f'{np.min(np.asarray(x))}')


def nonzero(name: str, x) -> None:
  """Raises if a concrete ``[D]`` embedding is all zeros (it has no
  direction to normalise)."""
  if is_concrete(x) and not np.any(np.asarray(x)):
    raise ValueError(f'{name} is all zeros; an embedding needs a nonzero '
                     'norm')


def non_negative(name: str, x) -> None:
  if is_concrete(x) and np.size(x) and np.min(np.asarray(x)) < 0:
    raise ValueError(f'{name} must be >= 0, got min {np.min(np.asarray(x))}')


def padding_at_end(name: str, ids) -> None:
  """Raises if a concrete ``[..., K]`` id array has ``-1`` before a real id."""
  if not is_concrete(ids):
    return
  ids = np.asarray(ids)
  pad = ids < 0
  bad = np.any(pad[..., :-1] & ~pad[..., 1:], axis=-1)  # -1 then an id
  if np.any(bad):
    where = np.unravel_index(int(np.argmax(bad.ravel())), bad.shape)
    raise ValueError(
        f'{name} has -1 padding before a gallery id (list index '
        f'{tuple(int(i) for i in where)}); padding must be at the end')


def training_loss(stage: str, step: int, loss) -> float:
  """``float(loss)``; raises ``FloatingPointError`` when it is NaN or
  infinite (training diverged: every later step and the saved model would be
  NaN), naming ``stage`` and ``step``. Trainers call it on the losses they
  read anyway and on the last step, before anything is saved."""
  value = float(loss)
  if not math.isfinite(value):
    raise FloatingPointError(
        f'{stage}: the training loss is {value} at step {step}; training '
        'diverged (a lower learning rate may help) and nothing was saved')
  return value
