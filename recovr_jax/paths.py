"""Where the package's shipped files are (every module finds them here,
wherever it sits in the package), and where its caches go."""

import os
import pathlib

PACKAGE = pathlib.Path(__file__).parent
CHECKPOINTS = PACKAGE / 'checkpoints'

# The environment variable that names the cache folder (as HF_HOME does).
CACHE_VARIABLE = 'RECOVR_JAX_CACHE'


def cache_root() -> pathlib.Path:
  """The per-user cache folder: ``$RECOVR_JAX_CACHE``, else
  ``$XDG_CACHE_HOME/recovr_jax``, else ``~/.cache/recovr_jax``."""
  named = os.environ.get(CACHE_VARIABLE)
  if named:
    return pathlib.Path(named).expanduser().absolute()
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return pathlib.Path(base).expanduser().absolute() / 'recovr_jax'


# The environment variable that names the key of the kept programs' digests.
KEY_VARIABLE = 'RECOVR_JAX_KEY_FILE'


def key_file() -> pathlib.Path:
  """The per-user secret that signs kept compiled programs
  (``executables``): ``$RECOVR_JAX_KEY_FILE``, else
  ``$XDG_CONFIG_HOME/recovr_jax/kept-programs.key``, else
  ``~/.config/recovr_jax/kept-programs.key``; outside every cache, so an
  archive's or another user's cache cannot carry it."""
  named = os.environ.get(KEY_VARIABLE)
  if named:
    return pathlib.Path(named).expanduser().absolute()
  base = os.environ.get('XDG_CONFIG_HOME') or os.path.join(
      os.path.expanduser('~'), '.config')
  return (pathlib.Path(base).expanduser().absolute() / 'recovr_jax' /
          'kept-programs.key')


def cache_dir(value: str | None) -> str:
  """``--cache_dir`` ``value`` as runs use it: unset (None) is
  ``cache_root()``; '' keeps no cache; a path is itself."""
  return str(cache_root()) if value is None else value
