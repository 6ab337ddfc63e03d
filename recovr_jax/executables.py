"""``jit``: ``jax.jit`` whose compiled programs are kept on disk by what
they are made of, so that a later process calls them without tracing them
again.

JAX's persistent compilation cache keys an executable by its lowered
program, so a warm process still traces and lowers every function before
it finds the executable (about 2.7 s of a warm `main`'s jitted sessions,
for its 13 programs). This cache keys a program by what decides it before
any tracing:

* the function (module and name) and the source of every module of the
  package (an edit anywhere makes new keys);
* the static arguments' ``repr`` and the dynamic arguments' tree, which
  holds a config's static fields (``config_pytree``; a ``repr`` that could
  hide a value, with an address or an ellipsis, is not keyed: that call
  compiles as before), and each leaf's type (shape, dtype, weak type);
* the versions of jax, jaxlib and flax, the backend and its runtime (on a
  GPU the CUDA and driver versions XLA reports), the devices and their
  kind, the CPU's features, ``XLA_FLAGS`` and JAX's settings.

It is on where a run keeps its compiled programs (``keep_in``; the
runner's ``--compilation_cache`` keeps them in ``executables/`` beside
JAX's own cache): one file per program, which calls that lower to the
same program share (an edit that leaves a program as it was adds only a
small file naming it). Calls whose arrays are not all on the process's
first device (a mesh's) compile as before.

A program this cache lacks is compiled afresh, neither loaded from JAX's
cache nor written to it: on XLA:CPU an executable that JAX's cache loaded
serializes without its compiled functions (calling it back fails:
"Function ... not found"). So it is compiled with a flag that only bounds
what a debug listing of its buffers would show
(``xla_debug_buffer_assignment_show_max``, at a value drawn for that
compile; JAX keys its cache on it, so the compile cannot find a copy
there), and kept only when JAX reports no cache hit. A file that cannot be
read back is compiled and written again; a program JAX cannot serialize
(constants passed as arguments) is marked, and later processes jit it as
before. The program is the same either way (a run's outputs are
byte-identical; docs/performance.md). The files are pickles (JAX's
``serialize_executable``): one is loaded only from a folder and file of
this user's that no one else may write, and only when its bytes match the
digest written beside it (``<program>.digest``: an HMAC-SHA256 of the
program's key and the bytes under this user's secret,
``paths.key_file()``, made on first use with mode 0600 outside every
cache; written atomically after the file). Whoever lacks the secret
cannot forge a digest, so a cache that travelled (an archive packed
``--with_compiled``, another user's folder) has its programs compiled
afresh unless the receiver holds the packer's secret. A file that fails
either check, or holds a program that takes other arguments than its
call, is compiled afresh and replaced, with a warning naming it (a digest
of the unkeyed kind kept before 2026-12-07 is replaced silently). Without
a usable secret (a key file another user may read or write, or none that
can be made) no program is kept or loaded.
"""

import functools
import hashlib
import hmac
import inspect
import os
import pathlib
import pickle
import platform
import secrets
import sys
import threading

from absl import logging
import jax
from jax.experimental import serialize_executable

from recovr_jax import paths
from recovr_jax import profiling

# Compiled afresh (see above): a debug-output flag that JAX's cache keys on.
_FRESH = 'xla_debug_buffer_assignment_show_max'
_SETTINGS_SKIPPED = ('cache', 'log', 'dir', 'traceback', 'profil', 'dump',
                     'pprint', 'timeout', 'address')
_HIT = '/jax/compilation_cache/cache_hits'
_UNKEPT = 'jit'  # a call's ``.program`` file: its program cannot be kept
_loaded = {}  # in-process: call signature -> Compiled, or False
_lock = threading.Lock()
_hits = [0]
_where = [None]


def _count_hits(name, **_):
  if name == _HIT:
    _hits[0] += 1


jax.monitoring.register_event_listener(_count_hits)


def keep_in(where: str | os.PathLike | None):
  """Keeps executables in the folder ``where`` from now on (None: not)."""
  _where[0] = None if where is None else pathlib.Path(where).absolute()


def folder() -> pathlib.Path | None:
  """Where executables are kept, or None."""
  return None if jax.config.jax_disable_jit else _where[0]


def jit(fn, static_argnames: tuple[str, ...] = ()):
  """``jax.jit`` of ``fn``, its programs kept in ``folder()`` when there is
  one (``.compiled``: the ``jax.jit`` function, its cache)."""
  compiled = jax.jit(fn, static_argnames=tuple(static_argnames))
  static = frozenset(static_argnames)
  # A static argument passed by position: jit as before (a kept executable
  # is keyed by the static arguments passed by name).
  params = list(inspect.signature(fn).parameters)
  by_position = min((i for i, p in enumerate(params) if p in static),
                    default=len(params))

  @functools.wraps(fn)
  def call(*args, **kwargs):
    if len(args) <= by_position:
      dynamic = {k: v for k, v in kwargs.items() if k not in static}
      kept = find(compiled, fn, {k: v for k, v in kwargs.items()
                                 if k in static}, args, dynamic)
      if kept is not None:  # kept on disk (a run's compilation cache)
        return kept(*args, **dynamic)
    return compiled(*args, **kwargs)

  call.compiled = compiled
  return call


def find(jitted, fn, static: dict, args, kwargs):
  """The executable of ``jitted(*args, **static, **kwargs)`` (``jitted``:
  ``jax.jit`` of ``fn``), to be called with ``(*args, **kwargs)``: loaded
  from ``folder()``, or compiled and kept there. None when there is no
  folder or the call cannot be keyed: the caller then calls ``jitted``
  itself."""
  where = folder()
  if where is None:
    return None
  leaves, tree = jax.tree.flatten((args, kwargs))
  first = {jax.local_devices()[0]}
  if not all(_on_device(x, first) for x in leaves):
    return None
  signature = (fn, tuple(sorted(static.items())), tree,
               tuple(jax.typeof(x) for x in leaves))
  exe = _loaded.get(signature)
  if exe is None:
    with _lock, profiling.part(profiling.PROGRAMS):
      exe = _loaded.get(signature)
      if exe is None:
        exe = _loaded[signature] = _load_or_compile(
            where, lambda: jitted.lower(*args, **static, **kwargs),
            _key(fn, static, tree, signature[-1]),
            repr(signature[-1]), (tree, signature[-1]))
  return exe or None  # False: not keyed, jit as before


def _key(fn, static, tree, types) -> str | None:
  """The call's key: what decides its program before tracing."""
  described = repr(sorted(static.items()))
  if any(' at 0x' in d or '...' in d for d in (described, str(tree))):
    return None
  return _digest(f'{fn.__module__}.{fn.__qualname__}', _source(),
                 _machine(), described, str(tree), repr(types),
                 # Traced under it (--matmul_precision).
                 f'matmul={jax.config.jax_default_matmul_precision}')


def _load_or_compile(where, lower, key, types: str, call=None):
  """The call's executable: its program's, kept under the program's key
  (its lowered text, its arguments' trees and types, which the text lacks
  for arguments the program does not read, and the machine: calls that
  lower to the same program share one file) and found from the call's key
  (``KEY.program`` names it). ``call``: ``(tree, types)`` of the call's
  arguments; a kept executable that takes other arguments (a file holding
  another program) is not used: compiled afresh and kept again."""
  if key is None:
    return False
  named = where / f'{key}.program'
  try:
    kept = named.read_text()
  except OSError:
    kept = None
  if kept == _UNKEPT:  # jit (and JAX's cache) as before
    return False
  exe = None if kept is None else _load(where, kept, call)
  if exe is not None:
    return exe
  lowered = lower()
  program = _digest(lowered.as_text(), str(lowered.in_tree), types,
                    str(lowered.out_tree), _machine())
  exe = _load(where, program, call)
  if exe is None:
    hits = _hits[0]
    exe = _compile_afresh(lowered)
    if _hits[0] != hits:  # JAX's cache's copy: it cannot be kept
      return exe
    try:
      content = pickle.dumps(serialize_executable.serialize(exe))
    except Exception:  # pylint: disable=broad-except
      # One JAX cannot serialize (constants passed as arguments): later
      # processes jit it as before.
      _write(named, _UNKEPT.encode())
      return exe
    key = _secret_key()
    if key is None or not _write(where / f'{program}.pkl', content):
      return exe
    _write(where / f'{program}.digest',
           _bytes_digest(program, content, key).encode())
  _write(named, program.encode())
  return exe


def _compile_afresh(lowered):
  """``lowered`` compiled, not loaded from JAX's cache, nor written to it
  (its key, with the drawn flag, is never asked for again)."""
  least = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 1e9)
  try:
    return lowered.compile(
        compiler_options={_FRESH: 1000 + secrets.randbelow(1 << 60)})
  finally:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', least)


def _load(where, program: str, call=None):
  """The executable kept as ``program``, or None: absent, unreadable, of
  another version, taking other arguments than ``call`` (``(tree,
  types)``), or in a folder or file another user may have written (a kept
  executable is a pickle: loading it runs code)."""
  path = where / f'{program}.pkl'
  key = _secret_key()
  if key is None or not _trusted(path):
    return None
  try:
    content = path.read_bytes()
    recorded = (where / f'{program}.digest').read_text()
  except OSError:
    return None  # absent (or kept before digests were): compiled afresh
  if not hmac.compare_digest(recorded, _bytes_digest(program, content, key)):
    if recorded != _unkeyed_digest(program, content):  # (kept before keys)
      _warn(path, 'does not match the digest kept beside it (cut short, '
            'changed, another program\'s, or signed with another user\'s '
            'or machine\'s secret); compiled afresh and replaced')
    return None
  try:
    payload, in_tree, out_tree = pickle.loads(content)
    if call is not None and in_tree != call[0]:
      _warn(path, 'holds a program that takes other arguments than its '
            'call; compiled afresh and replaced')
      return None
    # On the device ``find`` compiles for (the process's first): by default
    # it would load onto every device of the process.
    exe = serialize_executable.deserialize_and_load(
        payload, in_tree, out_tree,
        execution_devices=jax.local_devices()[:1])
    if call is not None and tuple(
        jax.tree.leaves(exe.in_avals)) != tuple(call[1]):
      _warn(path, 'holds a program that takes other arguments than its '
            'call; compiled afresh and replaced')
      return None
    return exe
  except Exception:  # pylint: disable=broad-except
    return None  # absent, cut short or of another version: compiled


def _trusted(path) -> bool:
  """Whether ``path`` and every folder above it up to the kept folder's
  parent are this user's (or root's) and writable by no one else; warns
  once per folder that is not. A missing file is not trusted (nothing to
  load)."""
  if not hasattr(os, 'getuid'):  # no owners to check
    return path.exists()
  me = os.getuid()
  for part in (path, path.parent, path.parent.parent):
    try:
      st = part.stat()
    except OSError:
      return False
    if st.st_uid not in (me, 0) or st.st_mode & 0o022:
      if part not in _warned:
        _warned.add(part)
        logging.warning(
            'kept compiled programs: %s is %s; its programs are not loaded '
            '(a kept program is a pickle: loading it runs code). Make it '
            "yours and writable by you only (chmod go-w), or use another "
            '--cache_dir', part, 'another user\'s' if st.st_uid not in (
                me, 0) else 'writable by others')
      return False
  return True


_warned: set = set()


def _write(path, content: bytes) -> bool:
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f'.{os.getpid()}.part')
    part.write_bytes(content)
    os.replace(part, path)
    return True
  except OSError:
    return False  # a cache: a run that cannot keep it is only slower


def _bytes_digest(program: str, content: bytes, key: bytes) -> str:
  """What ``{program}.digest`` holds: the HMAC-SHA256 under ``key`` (this
  user's secret) of the program's key and its file's bytes."""
  return hmac.new(key, program.encode() + b'\n' + content,
                  hashlib.sha256).hexdigest()


def _unkeyed_digest(program: str, content: bytes) -> str:
  """The digest kept before 2026-12-07 (no secret): recognised, so the
  file is replaced without a warning."""
  return hashlib.sha256(program.encode() + b'\n' + content).hexdigest()


_secret = []  # [key bytes or None], read once per process


def _secret_key() -> bytes | None:
  """This user's secret (``paths.key_file()``), made with mode 0600 on
  first use; None, with a warning, where it cannot be made or read, or
  another user may read or write it (no program is then kept or loaded)."""
  if _secret:
    return _secret[0]
  path = paths.key_file()
  key = None
  try:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
      fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
      pass
    else:
      with os.fdopen(fd, 'wb') as f:
        f.write(secrets.token_bytes(32))
    st = path.stat()
    if hasattr(os, 'getuid') and (st.st_uid not in (os.getuid(), 0) or
                                  st.st_mode & 0o077):
      logging.warning('kept compiled programs: the key file %s is %s; no '
                      'program is kept or loaded (chmod 600 it, or set $%s)',
                      path, 'another user\'s' if st.st_uid not in (
                          os.getuid(), 0) else 'readable or writable by '
                      'others', paths.KEY_VARIABLE)
    else:
      key = path.read_bytes()
      if len(key) < 16:
        logging.warning('kept compiled programs: the key file %s holds %d '
                        'bytes (fewer than 16); no program is kept or '
                        'loaded', path, len(key))
        key = None
  except OSError as e:
    logging.warning('kept compiled programs: no key file (%s: %s); no '
                    'program is kept or loaded', path, e)
  _secret.append(key)
  return key


def _warn(path, what: str) -> None:
  logging.warning('kept compiled program %s %s', path, what)


def _digest(*parts) -> str:
  return hashlib.sha256('\n'.join(parts).encode()).hexdigest()[:40]


def _on_device(x, devices: set) -> bool:
  if not isinstance(x, jax.Array):
    return True  # a NumPy array or a Python scalar: placed by the call
  try:
    return x.sharding.device_set == devices
  except Exception:  # pylint: disable=broad-except  # a deleted array
    return False


@functools.lru_cache(maxsize=1)
def _source() -> str:
  """The digest of every module of the package."""
  source = hashlib.sha256()
  package = pathlib.Path(__file__).resolve().parent
  for path in sorted(package.rglob('*.py')):
    source.update(str(path.relative_to(package)).encode() + b'\0')
    source.update(path.read_bytes() + b'\0')
  return source.hexdigest()


def _machine() -> str:
  """What besides the program decides its executable: the libraries, the
  devices, the CPU and JAX's settings."""
  import jaxlib  # pylint: disable=g-import-not-at-top
  versions = (jax.__version__, jaxlib.__version__,
              getattr(sys.modules.get('flax'), '__version__', ''))
  settings = sorted((k, repr(v)) for k, v in jax.config.values.items()
                    if not any(s in k for s in _SETTINGS_SKIPPED))
  # The backend and its runtime (on a GPU the CUDA and driver versions),
  # and the devices (a program runs on this process's first one).
  devices = (jax.default_backend(), _platform_version(), repr(jax.devices()),
             jax.process_index(), repr(jax.local_devices()),
             jax.local_devices()[0].device_kind)
  return '\n'.join([repr(versions), repr(devices), platform.machine(),
                    _cpu_features(), os.environ.get('XLA_FLAGS', ''),
                    repr(settings)])


@functools.lru_cache(maxsize=1)
def _platform_version() -> str:
  """The backend's runtime as XLA reports it (on a GPU, the CUDA runtime
  and driver versions; 'cpu' on a CPU)."""
  try:
    from jax import extend  # pylint: disable=g-import-not-at-top
    return str(extend.backend.get_backend().platform_version)
  except Exception:  # pylint: disable=broad-except
    return ''


@functools.lru_cache(maxsize=1)
def _cpu_features() -> str:
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      for line in f:
        if line.startswith('flags'):
          return line.strip()
  except OSError:
    pass
  return platform.processor()
