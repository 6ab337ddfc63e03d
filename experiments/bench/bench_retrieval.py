r"""Retrieval at scale: ``retrieve`` vs NumPy vs faiss, with peak memory.

    python -m experiments.bench.bench_retrieval --output_json=results/bench_retrieval.json

For each gallery size N, every method runs in its own child process, which
creates its gallery (random unit vectors, float32; bfloat16 for
``retrieve_bf16``), runs one warm-up and ``--repeats`` timed queries of B
vectors for the top K, and reports the median time and its peak resident
memory: the gallery's bytes plus the largest growth of the resident set
while the method runs (the high-water mark is reset once the gallery
exists, so the libraries, the interpreter and the gallery's creation do not
count; compiling does, on the warm-up). The FLOP/s
anchor is the faster of XLA's and NumPy's plain ``[B, D] x [D, N]`` matmul,
timed in its own child. ``retrieve_bf16`` and ``retrieve_approx``
(``recall_target=--recall_target``, ``lax.approx_max_k``; exact on CPU and
GPU, approximate on TPU) also report their recall@K against the exact
float32 ids of the same queries and gallery.
"""

import json
import os
import subprocess
import sys

from absl import app
from absl import flags

from experiments.bench import bench_common
from experiments.common import cli
from experiments.common import outputs
from recovr_jax.run import resources

_SIZES = flags.DEFINE_list('sizes', ['10000', '100000', '1000000'],
                           'Gallery sizes N.')
_D = flags.DEFINE_integer('d', 384, 'Embedding size D.')
_B = flags.DEFINE_integer('b', 256, 'Queries per call B.')
_K = flags.DEFINE_integer('k', 100, 'List length K.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed repeats (>= 5).')
METHODS = ('matmul_xla', 'matmul_numpy', 'retrieve', 'retrieve_bf16',
           'retrieve_approx', 'numpy', 'faiss')
_METHODS = flags.DEFINE_list('methods', list(METHODS),
                             f'What to time, of {", ".join(METHODS)}.')
_RECALL_TARGET = flags.DEFINE_float(
    'recall_target', 0.95, "retrieve_approx's recall_target, in (0, 1].")
_PLATFORM = flags.DEFINE_enum('platform', 'auto', list(resources.PLATFORMS),
                              'Device; a requested absent one is an error.')
_OUTPUT = flags.DEFINE_string('output_json', 'results/bench_retrieval.json',
                              'Where to write the JSON results.')

_CHILD = r'''
import json, statistics, sys, time
import numpy as np

def rss(field):
  for line in open('/proc/self/status'):
    if line.startswith(field):
      return int(line.split()[1]) * 1024
  return 0

method, n, d, b, k, repeats = sys.argv[1], *map(int, sys.argv[2:7])
recall_target = float(sys.argv[7])
import jax, jax.numpy as jnp
from recovr_jax import retrieve
rng = np.random.default_rng(0)
queries = rng.standard_normal((b, d), dtype=np.float32)
queries /= np.linalg.norm(queries, axis=1, keepdims=True)
base = rss('VmRSS:')
out = {}

def jax_gallery(dtype):
  g = jax.random.normal(jax.random.key(1), (n, d), jnp.float32)
  g = g / jnp.linalg.norm(g, axis=1, keepdims=True)
  return g.astype(dtype).block_until_ready()

def np_gallery():
  g = np.asarray(jax_gallery(jnp.float32)).copy()
  return g

if method in ('retrieve', 'retrieve_bf16', 'retrieve_approx', 'matmul_xla'):
  gallery = jax_gallery(jnp.bfloat16 if method == 'retrieve_bf16'
                        else jnp.float32)
  q = jnp.asarray(queries)
  if method == 'matmul_xla':
    f = jax.jit(lambda a, g: a @ g.T)
    run = lambda: f(q, gallery)
  else:
    target = recall_target if method == 'retrieve_approx' else None
    f = jax.jit(lambda a, g: retrieve(a, g, k, recall_target=target))
    run = lambda: f(q, gallery)
else:
  gallery = np_gallery()
  if method == 'matmul_numpy':
    run = lambda: queries @ gallery.T
  elif method == 'numpy':
    def run():
      s = queries @ gallery.T
      part = np.argpartition(-s, k - 1, axis=1)[:, :k]
      ps = np.take_along_axis(s, part, axis=1)
      return np.take_along_axis(part, np.argsort(-ps, axis=1, kind='stable'),
                                axis=1)
  else:
    import faiss
    index = faiss.IndexFlatIP(d)
    index.add(gallery)
    run = lambda: index.search(queries, k)
gallery_bytes = int(np.prod(gallery.shape)) * gallery.dtype.itemsize
# Peak memory of the method itself: reset the high-water mark once the
# gallery exists (the creation's temporaries do not count), then add the
# gallery's own bytes back.
import gc
gc.collect()
try:
  with open('/proc/self/clear_refs', 'w') as clear_refs:
    clear_refs.write('5')
  reset = True
except OSError:
  reset = False
with_gallery = rss('VmRSS:')
jax.block_until_ready(run())
times = []
for _ in range(repeats):
  t = time.perf_counter()
  jax.block_until_ready(run())
  times.append(time.perf_counter() - t)
extra = rss('VmHWM:') - (with_gallery if reset else base + gallery_bytes)
out = {'seconds': statistics.median(times),
       'peak_bytes': gallery_bytes + max(extra, 0),
       'peak_measured_from_reset': reset,
       'gallery_bytes': gallery_bytes}
if method in ('retrieve_bf16', 'retrieve_approx'):
  ids16 = np.asarray(f(q, gallery)[0])
  del gallery
  full = jax_gallery(jnp.float32)
  ids32 = np.asarray(jax.jit(lambda a, g: retrieve(a, g, k))(q, full)[0])
  out['recall_vs_float32'] = float(np.mean(
      [len(set(a) & set(b)) / k for a, b in zip(ids16, ids32)]))
print('RESULT ' + json.dumps(out))
'''


def child(method, n):
  proc = subprocess.run(
      [sys.executable, '-c', _CHILD, method, str(n), str(_D.value),
       str(_B.value), str(_K.value), str(_REPEATS.value),
       str(_RECALL_TARGET.value)],
      capture_output=True, text=True)
  for line in proc.stdout.splitlines():
    if line.startswith('RESULT '):
      return json.loads(line[len('RESULT '):])
  return {'error': proc.stderr.strip().splitlines()[-1] if proc.stderr
          else f'exit {proc.returncode}'}


def main(argv):
  del argv
  bench_common.full_speed_blas()  # the children inherit the environment
  if _REPEATS.value < 5:
    raise app.UsageError('--repeats must be >= 5 (medians of at least 5)')
  for flag in (_B, _D, _K):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  if not 0 < _RECALL_TARGET.value <= 1:
    raise app.UsageError('--recall_target must be in (0, 1], got '
                         f'{_RECALL_TARGET.value}')
  sizes = bench_common.list_values(_SIZES, bench_common.positive_int,
                                   what='a positive integer')
  bench_common.list_values(_METHODS, valid=METHODS)
  if _PLATFORM.value != 'auto':
    try:  # checked here; each method then runs on it in its own process
      resources.select_device(_PLATFORM.value)
    except ValueError as e:
      raise app.UsageError(str(e)) from e
    if _PLATFORM.value == 'cpu':  # an accelerator is JAX's default anyway
      os.environ['JAX_PLATFORMS'] = 'cpu'
  b, d = _B.value, _D.value
  results = {}
  lines = ['| N | method | median s | queries/s | vs NumPy | share of matmul '
           'FLOP/s | peak memory / gallery | recall@K vs exact float32 |',
           '|---:|---|---:|---:|---:|---:|---:|---:|']
  for n in sizes:
    row = {}
    for method in _METHODS.value:
      print(f'N={n:,} {method} ...', file=sys.stderr, flush=True)
      row[method] = child(method, n)
    results[n] = row
    flops = 2.0 * b * n * d
    anchors = [row[m]['seconds'] for m in ('matmul_xla', 'matmul_numpy')
               if 'seconds' in row.get(m, {})]
    peak = flops / min(anchors) if anchors else None
    numpy_s = row.get('numpy', {}).get('seconds')
    for method in ('retrieve', 'retrieve_bf16', 'retrieve_approx', 'numpy',
                   'faiss'):
      r = row.get(method)
      if r is None:
        continue
      if 'error' in r:
        lines.append(f'| {n:,} | {method} | failed: {r["error"][:60]} | | | '
                     '| | |')
        continue
      share = f'{100 * flops / r["seconds"] / peak:.0f}%' if peak else ''
      vs = f'{numpy_s / r["seconds"]:.2f}x' if numpy_s else ''
      mem = r['peak_bytes'] / r['gallery_bytes']
      recall = (f'{100 * r["recall_vs_float32"]:.2f}%'
                if 'recall_vs_float32' in r else '')
      lines.append(f'| {n:,} | {method} | {r["seconds"]:.4f} | '
                   f'{b / r["seconds"]:,.0f} | {vs} | {share} | {mem:.2f}x | '
                   f'{recall} |')
      r['share_of_matmul_peak'] = flops / r['seconds'] / peak if peak else None
  table = '\n'.join(lines)
  print(table)
  machine = bench_common.environment()
  print(bench_common.blas_line(machine))
  outputs.write_json(_OUTPUT.value, {
      'machine': machine,
      'command': 'python -m experiments.bench.bench_retrieval ' +
                 ' '.join(sys.argv[1:]),
      'config': {'d': d, 'b': b, 'k': _K.value, 'repeats': _REPEATS.value,
                 'recall_target': _RECALL_TARGET.value},
      'results': {str(n): r for n, r in results.items()}, 'table': table})


if __name__ == '__main__':
  cli.run(main)
