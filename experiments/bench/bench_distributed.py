r"""Runs and retrieval over several processes (JAX's distributed runtime).

    python -m experiments.bench.bench_distributed \
        --output_json=results/bench_distributed.json

Two measurements, each against an anchor measured in the same run:

* **sessions**: one `experiments.run` of `--methods` on `--num_sessions`
  sessions, started by `experiments.launch` as 1, 2, ... processes
  (`--processes`); wall time of the whole launch (start-up, build from the
  cache, batches, process 0's outputs) after a warm-up run that fills the
  cache. Reported: session-runs per second, the speed-up over one process
  and the scaling efficiency (speed-up / processes); every launch's
  `metrics.json` must equal the one-process run's byte for byte.
* **sessions_jit**: the same with the jitted driver, per layout of
  processes x CPU devices per process (`--jit_layouts`; each batch's
  sessions are split over one mesh of every process's devices,
  `--session_shards` per process), the first layout the anchor;
  efficiency per device.
* **gallery**: exact top-`--k` retrieval of `--b` queries over a gallery of
  `--gallery_rows` x `--d` float32 rows (random unit vectors), held whole by
  one process vs split over 2 processes (each holds only its rows,
  `core.sharding.shard_gallery_rows`; one CPU device each); queries per
  second (median of `--repeats` after a warm-up), the speed-up, and peak
  resident memory per process. The lists must be equal.

On a machine with C cores, more processes than cores share them: the
efficiency then says what the runtime costs, not what a cluster would gain.
On a GPU/TPU cluster, start one process per host (docs/runner.md).
"""

import hashlib
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from experiments.bench import bench_common
from experiments.common import cli
from experiments import launch
from recovr_jax import methods

ROOT = pathlib.Path(__file__).resolve().parents[2]

_PROCESSES = flags.DEFINE_list('processes', ['1', '2', '4'],
                               'Process counts of the sessions measurement.')
_METHODS = flags.DEFINE_list(
    'bench_methods', ['recovr', 'ivr', 'merlin', 'umivr', 'history_rewrite'],
    "The run's --methods (default: main's five).")
_SESSIONS = flags.DEFINE_integer('bench_sessions', 600,
                                 "The run's --num_sessions.")
_BATCH = flags.DEFINE_integer('bench_batch_size', 50,
                              "The run's --batch_size (batches are what "
                              'processes split).')
_RUN_FLAGS = flags.DEFINE_list(
    'run_flags', ['--data=world', '--reasoner=rules'],
    'More flags for every run (e.g. --simulation=jit).')
_ROWS = flags.DEFINE_integer('gallery_rows', 1_000_000,
                            'Gallery rows of the retrieval measurement.')
_D = flags.DEFINE_integer('d', 256, 'Embedding size D.')
_B = flags.DEFINE_integer('b', 256, 'Queries per call B.')
_K = flags.DEFINE_integer('k', 100, 'List length K.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed retrieval repeats.')
_LAYOUTS = flags.DEFINE_list(
    'jit_layouts', ['1x1', '1x2', '2x1'],
    'The sessions_jit measurement: processes x CPU devices per process, '
    'the jitted driver splitting each batch\'s sessions over one mesh of '
    'every process\'s devices (--session_shards per process).')
_PARTS = flags.DEFINE_list('parts', ['sessions', 'sessions_jit', 'gallery'],
                           'What to measure: sessions, sessions_jit, '
                           'gallery.')
_CACHE = flags.DEFINE_string('cache_dir', 'cache',
                             'Cache of the runs (shared by every launch).')
_JSON = flags.DEFINE_string('output_json', None, 'Write the results here.')


def _sessions(work: pathlib.Path, layouts, extra=()) -> dict:
  """One launch per ``(processes, devices per process)`` layout after a
  warm-up run; the first layout is the anchor."""
  base = [f'--methods={",".join(_METHODS.value)}',
          f'--num_sessions={_SESSIONS.value}',
          f'--batch_size={_BATCH.value}', f'--cache_dir={_CACHE.value}',
          '--noresume', *_RUN_FLAGS.value, *extra]

  def env(devices):
    flags_ = os.environ.get('XLA_FLAGS', '')
    return dict(os.environ, XLA_FLAGS=(
        f'{flags_} --xla_force_host_platform_device_count={devices}'
    ).strip()) if devices > 1 else dict(os.environ)

  bench_common.log('sessions: warm-up run (fills the cache)')
  warm = subprocess.run(
      [sys.executable, '-m', 'experiments.run', *base,
       f'--output_dir={work / "warm"}'], cwd=ROOT, capture_output=True,
      text=True, check=False)
  if warm.returncode:
    raise RuntimeError(f'the warm-up run failed:\n{warm.stderr[-3000:]}')
  rows, reference = {}, None
  for n, d in layouts:
    name = f'{n}x{d}' if extra else str(n)
    out = work / f'p{name}'
    shards = [f'--session_shards={d}'] if d > 1 else []
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, '-m', 'experiments.launch', f'--num_processes={n}',
         '--', *base, *shards, f'--output_dir={out}'], cwd=ROOT,
        capture_output=True, text=True, check=False, env=env(d))
    seconds = time.perf_counter() - start
    if proc.returncode:
      raise RuntimeError(f'{name} failed:\n{proc.stderr[-3000:]}')
    metrics = (out / 'metrics.json').read_bytes()
    reference = reference or metrics
    runs = _SESSIONS.value * len(_METHODS.value)
    rows[name] = {'processes': n, 'devices_per_process': d,
                  'seconds': round(seconds, 2),
                  'session_runs_per_s': round(runs / seconds, 2),
                  'metrics_equal_first': metrics == reference}
    bench_common.log(f'sessions: {n} processes x {d} devices '
                     f'{seconds:.1f} s, {runs / seconds:.2f} session-runs/s')
  first = next(iter(rows.values()))
  for row in rows.values():
    row['speedup'] = round(row['session_runs_per_s'] /
                           first['session_runs_per_s'], 3)
    row['efficiency'] = round(row['speedup'] * first['processes'] *
                              first['devices_per_process'] /
                              (row['processes'] *
                               row['devices_per_process']), 3)
  return {'methods': _METHODS.value, 'num_sessions': _SESSIONS.value,
          'batch_size': _BATCH.value,
          'run_flags': _RUN_FLAGS.value + list(extra), 'by_layout': rows}


def gallery_child(process_id: int, num_processes: int, port: int,
                  rows: int, d: int, b: int, k: int, repeats: int) -> dict:
  """One process of the gallery measurement: its rows, the timed
  retrievals, its peak memory (run in a child by ``_gallery``)."""
  import jax  # pylint: disable=g-import-not-at-top
  if num_processes > 1:
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}',
                               num_processes=num_processes,
                               process_id=process_id)
  from recovr_jax.core import sharding  # pylint: disable=g-import-not-at-top
  mesh = sharding.make_mesh(gallery_shards=len(jax.devices()))
  start, stop = sharding.process_rows(rows, mesh)
  # Row r of the gallery is drawn from seed r // 65536's block, so every
  # process makes the same rows whatever it holds.
  block = 65536
  parts = []
  for first in range(start - start % block, stop, block):
    x = np.random.default_rng(first // block).standard_normal(
        (block, d), dtype=np.float32)
    lo, hi = max(start, first) - first, min(stop, first + block) - first
    parts.append(x[lo:hi])
  local = np.concatenate(parts)
  local /= np.linalg.norm(local, axis=1, keepdims=True)
  queries = np.random.default_rng(10 ** 6).standard_normal((b, d),
                                                           dtype=np.float32)
  gallery, n = sharding.shard_gallery_rows(local, mesh, rows)
  del local, parts
  fn = lambda: sharding.sharded_retrieve(queries, gallery, k, mesh=mesh,
                                         num_valid=n)
  median, times = bench_common.timings(fn, repeats)
  ids, _ = fn()
  return {'process': process_id, 'rows_held': stop - start,
          'median_s': median, 'times_s': times,
          'queries_per_s': b / median,
          'peak_rss_mib': resource.getrusage(
              resource.RUSAGE_SELF).ru_maxrss / 1024,
          'ids_sha256': hashlib.sha256(
              np.asarray(ids, np.int32).tobytes()).hexdigest()}


def _gallery() -> dict:
  out = {}
  for n in (1, 2):
    port = launch.free_port()
    env = dict(os.environ, JAX_PLATFORMS='cpu')
    args = (f'{_ROWS.value}, {_D.value}, {_B.value}, {_K.value}, '
            f'{_REPEATS.value}')
    procs = [subprocess.Popen(
        [sys.executable, '-c',
         'import json; from experiments.bench.bench_distributed import '
         f'gallery_child; print(json.dumps(gallery_child({i}, {n}, {port}, '
         f'{args})))'], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(n)]
    results = []
    for p in procs:
      stdout, stderr = p.communicate()
      if p.returncode:
        raise RuntimeError(f'gallery, {n} processes:\n{stderr[-3000:]}')
      results.append(json.loads(stdout.strip().splitlines()[-1]))
    out[str(n)] = results
    bench_common.log(f'gallery: {n} processes, '
                     f'{results[0]["queries_per_s"]:.1f} queries/s')
  one, two = out['1'][0], out['2'][0]
  return {'rows': _ROWS.value, 'd': _D.value, 'b': _B.value, 'k': _K.value,
          'by_processes': out,
          'speedup_2_over_1': round(two['queries_per_s'] /
                                    one['queries_per_s'], 3),
          'lists_equal': all(r['ids_sha256'] == one['ids_sha256']
                             for r in out['2'])}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  bench_common.list_values(_PARTS,
                           valid=('sessions', 'sessions_jit', 'gallery'))
  bench_common.list_values(_METHODS, valid=methods.names())
  try:
    layouts = [tuple(int(x) for x in v.split('x')) for v in _LAYOUTS.value]
    if any(len(v) != 2 or min(v) < 1 for v in layouts):
      raise ValueError
  except ValueError as e:
    raise app.UsageError(f'--jit_layouts: expected PROCESSESxDEVICES '
                         f'(e.g. 2x1), got {_LAYOUTS.value}') from e
  try:
    counts = [int(p) for p in _PROCESSES.value]
  except ValueError as e:
    raise app.UsageError(f'--processes must be integers, got '
                         f'{_PROCESSES.value}') from e
  if not counts or min(counts) < 1:
    raise app.UsageError(f'--processes must be >= 1, got {counts}')
  for name, values in (('--processes', counts), ('--jit_layouts', layouts)):
    if len(set(values)) != len(values):
      raise app.UsageError(f'{name} lists a value twice, got {values}')
  for name, value in (('--bench_sessions', _SESSIONS.value),
                      ('--bench_batch_size', _BATCH.value),
                      ('--gallery_rows', _ROWS.value), ('--d', _D.value),
                      ('--b', _B.value), ('--k', _K.value),
                      ('--repeats', _REPEATS.value)):
    if value < 1:
      raise app.UsageError(f'{name} must be >= 1, got {value}')
  if _K.value > _ROWS.value // 2:
    raise app.UsageError(f'--k must be <= --gallery_rows / 2, got {_K.value}')
  bench_common.full_speed_blas()
  results = {}
  work = pathlib.Path(tempfile.mkdtemp(prefix='bench_distributed_'))
  try:
    if 'sessions' in _PARTS.value:
      results['sessions'] = _sessions(work, [(n, 1) for n in counts])
    if 'sessions_jit' in _PARTS.value:
      results['sessions_jit'] = _sessions(work / 'jit', layouts,
                                          ('--simulation=jit',))
    if 'gallery' in _PARTS.value:
      results['gallery'] = _gallery()
  finally:
    shutil.rmtree(work, ignore_errors=True)
  if _JSON.value:
    bench_common.write_results(_JSON.value, results)
  else:
    print(json.dumps(results, indent=2))


if __name__ == '__main__':
  cli.run(main)
