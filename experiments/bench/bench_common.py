"""Helpers shared by the benchmark scripts: full-speed NumPy baselines, the
environment record, progress lines, timing, and one CPU device per core."""

import json
import os
import pathlib
import platform
import statistics
import sys
import time

from absl import app
import jax
import numpy as np

# Set on some machines of this kind; they slow a current NumPy's OpenBLAS
# (XLA does not use OpenBLAS), which would inflate every ratio against NumPy.
BLAS_VARS = ('OPENBLAS_CORETYPE', 'OPENBLAS_L2_SIZE')
_REMOVED = 'RECOVR_BENCH_REMOVED_BLAS_ENV'
_RECORDED_ENV = BLAS_VARS + ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS',
                             'MKL_NUM_THREADS', 'XLA_FLAGS', 'JAX_PLATFORMS')


def full_speed_blas():
  """Re-runs this benchmark process without ``BLAS_VARS`` when any is set
  (OpenBLAS reads them when NumPy loads, so unsetting them later is too
  late). Benchmarks only: tests and CI keep the environment they are given.
  ``environment()`` records what was removed."""
  bad = {v: os.environ[v] for v in BLAS_VARS if v in os.environ}
  if not bad:
    return
  env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
  env[_REMOVED] = json.dumps(bad)
  log(f'benchmark: re-running without {", ".join(sorted(bad))} (they slow '
      "NumPy's OpenBLAS; the JSON records them)")
  os.execve(sys.executable, sys.orig_argv, env)


# The CPU features that change the kernels XLA and OpenBLAS choose.
CPU_FLAGS = ('sse4_2', 'avx', 'avx2', 'fma', 'avx512f', 'avx512bw',
             'avx512vl', 'avx512_vnni', 'avx512_bf16', 'amx_tile', 'asimd',
             'sve')


def cpu() -> dict:
  """The CPU's model name and which of ``CPU_FLAGS`` it has (Linux:
  /proc/cpuinfo; elsewhere the platform's processor string and no flags),
  so a result says which kind of machine it was measured on."""
  model, flags = platform.processor() or platform.machine(), set()
  try:
    text = pathlib.Path('/proc/cpuinfo').read_text()
  except OSError:
    text = ''
  for line in text.splitlines():
    key, _, value = line.partition(':')
    key = key.strip()
    if key in ('model name', 'Model', 'CPU part') and value.strip():
      model = value.strip()
    elif key in ('flags', 'Features'):
      flags |= set(value.split())
  return {'model': model, 'flags': [f for f in CPU_FLAGS if f in flags]}


def machine_kind(info: dict) -> str:
  """A file-name-safe name for the kind of CPU in ``environment()``'s
  ``info``: its model and the widest vector unit it has, e.g.
  ``amd-epyc_avx512``."""
  model = info['cpu']['model'].lower()
  slug = ''.join(ch if ch.isalnum() else '-' for ch in model)
  slug = '-'.join(part for part in slug.split('-') if part)[:40] or 'cpu'
  flags = info['cpu']['flags']
  unit = next((name for name, flag in (('avx512', 'avx512f'), ('avx2', 'avx2'),
                                       ('neon', 'asimd'), ('neon', 'neon'))
               if flag in flags), 'novector')
  return f'{slug}_{unit}'


def environment() -> dict:
  """The machine (CPU model and features), the versions, the BLAS NumPy
  uses (threadpoolctl) and the environment variables that change the
  baselines' speed."""
  info = {'platform': platform.platform(), 'cpu': cpu(),
          'cpu_count': os.cpu_count(),
          'python': platform.python_version(), 'numpy': np.__version__,
          'jax': jax.__version__, 'backend': jax.default_backend(),
          'devices': [str(x) for x in jax.devices()],
          'env': {k: os.environ.get(k) for k in _RECORDED_ENV},
          'blas_env_removed': json.loads(os.environ.get(_REMOVED, '{}'))}
  try:
    from threadpoolctl import threadpool_info  # pylint: disable=g-import-not-at-top
  except ImportError:
    info['blas'] = 'threadpoolctl not installed: pip install -e ".[bench]"'
  else:
    info['blas'] = [{k: lib.get(k) for k in (
        'user_api', 'internal_api', 'version', 'num_threads', 'architecture',
        'threading_layer', 'filepath')} for lib in threadpool_info()]
  return info


def blas_line(info: dict) -> str:
  """One line naming the CPU, the BLAS libraries and threads, for the
  printed table."""
  if isinstance(info['blas'], str):
    libs = info['blas']
  else:
    libs = 'BLAS: ' + ', '.join(
        f"{b['internal_api']} {b['version']} {b.get('architecture') or ''} "
        f"{b['num_threads']} threads" for b in info['blas'])
  removed = info['blas_env_removed']
  machine = info.get('cpu') or {}
  where = (f"{machine.get('model')} ({' '.join(machine.get('flags', []))}); "
           if machine else '')
  return where + libs + (f'; removed from the environment: {removed}'
                         if removed else '')


def write_results(path, results: dict):
  """Prints ``results`` (with ``environment()`` under ``machine``) as JSON,
  logs the BLAS line and writes the JSON to ``path``."""
  results['machine'] = environment()
  out = json.dumps(results, indent=2)
  print(out)
  log(blas_line(results['machine']))
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(out + '\n')


def positive_int(text: str) -> int:
  """``int(text)`` when it is >= 1; else ``ValueError``."""
  value = int(text)
  if value < 1:
    raise ValueError(text)
  return value


def list_values(flag, convert=str, valid=None, what: str = 'valid',
                distinct: bool = True):
  """The values of the list flag ``flag`` (a ``FlagHolder``) through
  ``convert``. ``UsageError`` names the flag when it is empty, when a value
  does not convert (``what`` says what was expected), is not in ``valid``
  or (``distinct``) is listed twice."""
  if not flag.value:
    raise app.UsageError(f'--{flag.name}: give at least one value')
  out = []
  for text in flag.value:
    try:
      value = convert(text)
    except ValueError:
      raise app.UsageError(f'--{flag.name}: {text!r} is not {what}') from None
    if valid is not None and value not in valid:
      raise app.UsageError(f'--{flag.name}: unknown {text!r}; valid: '
                           f'{", ".join(map(str, valid))}')
    if distinct and value in out:
      raise app.UsageError(f'--{flag.name} lists {text!r} twice')
    out.append(value)
  return out


def log(msg):
  print(msg, file=sys.stderr, flush=True)


def timings(fn, repeats):
  """``(median, all)`` wall times of ``fn()`` over ``repeats`` runs after
  one warm-up, waiting for JAX results."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times), times


def split_cpu_devices(count: int):
  """Makes JAX's CPU backend show ``count`` devices (one per core), so rows
  that split sessions over devices use every core (XLA:CPU runs a batched
  sort or ``top_k`` on one thread). Call before JAX starts its backend;
  single-device work still runs on device 0. No-op for ``count <= 1`` or when
  ``XLA_FLAGS`` already sets a device count."""
  flags = os.environ.get('XLA_FLAGS', '')
  if count > 1 and 'device_count' not in flags:
    os.environ['XLA_FLAGS'] = (
        f'{flags} --xla_force_host_platform_device_count={count}').strip()


def world_run(world_config, user_config, cache_dir, simulation='jit'):
  """The assembled run (``run.assemble.Run``) the method and session
  benchmarks time: the generated world of ``world_config`` with the
  shipped v1 encoders and its true captions, the ``rules`` reasoner and
  the simulated user of ``user_config``, prepared for ``simulation``."""
  from recovr_jax.run import assemble  # pylint: disable=g-import-not-at-top
  from recovr_jax.run import run_config  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world import world_source  # pylint: disable=g-import-not-at-top
  config = run_config.RunConfig(
      methods=('recovr',), output_dir='', cache_dir=cache_dir or None,
      data=world_source.WorldData(world=world_config,
                                  checkpoint_dir=encoders.DEFAULT_CHECKPOINT_DIR,
                                  captions='oracle', user=user_config),
      simulation=simulation)  # the rules reasoner
  return assemble.assemble(config, assemble.build(config,
                                                  run_config.source(config)))
