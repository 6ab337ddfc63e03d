r"""Benchmarks of the core: retrieval and fusion + rank-cap against baselines.

    python -m experiments.bench.bench_core

Prints one table and writes JSON. Every number is the median of ``--repeats``
timed runs after one warm-up run, and every ratio is against an anchor timed
in the same process, so the ratios hold on the machine that ran it. The JSON goes to
``results/bench_core/<machine kind>.json`` (the CPU model and its vector
features, ``bench_common.machine_kind``): one file per kind of machine, and
each run says whether the targets below are met on it.

Retrieval (N x D gallery, B queries, top-K): ``retrieve`` against NumPy
(matmul + argpartition + sort) and faiss-cpu ``IndexFlatIP`` when installed;
its FLOP/s share is against the faster of NumPy's and XLA's plain matmul of the
same shape. Fusion: rank-cap on every ring list, TW-RRF and rank-cap on the
fused list for a batch of sessions, against the same rule vectorised over
sessions in NumPy (``plain_loop.numpy_sessions``), a per-session Python loop and
ranx ``fuse(method='wsum')`` over per-list RRF runs when installed (ranx is
given the already rank-capped lists, so it does less work than the others),
with a profile of its parts (rank-cap of the ring lists, fusion alone, the id
sort, an unmasked top-k).

Targets, on every machine kind: retrieve >= 2x NumPy and >= 65% of the best
plain matmul of the same shape (the compute roofline; a blocked top-k cannot
beat it); fusion + rank-cap >= 25,000 sessions/s on one device and >= 3x the
vectorised NumPy.
"""

import functools
import os
import sys

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from experiments.bench import bench_common
from experiments.bench import plain_loop
from experiments.common import cli
from experiments.common import outputs
from recovr_jax.core import fusion
from recovr_jax.core import sharding
from recovr_jax import retrieve
from recovr_jax.run import resources

_SHAPES = flags.DEFINE_list(
    'shapes', ['100000x256', '100000x384', '1000000x256', '1000000x384'],
    'Retrieval gallery shapes, NxD each (the targets are set at these).')
_N = flags.DEFINE_integer('n', 100_000, 'Gallery size N of the fusion rings '
                          "and of the fusion's retrieval anchor.")
_D = flags.DEFINE_integer('d', 256, "Embedding size D of the fusion's "
                          'retrieval anchor.')
_B = flags.DEFINE_integer('b', 256, 'Queries per retrieval call B.')
_K = flags.DEFINE_integer('k', 100, 'List length K (retrieval and fusion).')
_BLOCK = flags.DEFINE_integer('block_size', 16384,
                              'Gallery rows per block in `retrieve`.')
_TUNE = flags.DEFINE_bool(
    'tune_sizes', False, '`retrieve` on the first --shapes at each of '
    '--block_sizes x --group_sizes on this part, beside the sizes the '
    'library uses here (`retrieval.sizes`): which is fastest, and by how '
    'much (the JSON\'s "sizes_on_this_part").')
_BLOCKS = flags.DEFINE_list('block_sizes', ['4096', '8192', '16384', '32768',
                                            '65536'],
                            'Block sizes --tune_sizes times.')
_GROUPS = flags.DEFINE_list('group_sizes', ['0', '8', '16', '32'],
                            'Candidate-group sizes --tune_sizes times (0: '
                            'no pruning).')
_SESSIONS = flags.DEFINE_integer('sessions', 1024,
                                 'Sessions in the fusion benchmark.')
_W = flags.DEFINE_integer('window', 5, 'Ring window W.')
_C = flags.DEFINE_integer('channels', 2, 'Channels C.')
_REPEATS = flags.DEFINE_integer('repeats', 5,
                                'Timed repeats per measurement (>= 5).')
_OUTPUT = flags.DEFINE_string(
    'output_json', None, 'Where to write the JSON results; default '
    '`results/bench_core/<machine kind>.json` (one file per kind of CPU, '
    'named by bench_common.machine_kind); empty writes nothing.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the synthetic inputs.',
                             lower_bound=0)
_PLATFORM = flags.DEFINE_enum('platform', 'auto', list(resources.PLATFORMS),
                              'Device; a requested absent one is an error.')
_SESSION_DEVICES = flags.DEFINE_integer(
    'session_devices', os.cpu_count() or 1,
    'CPU devices for the session-sharded fusion row (one per core); 1 '
    'skips it. Ignored on GPU/TPU, where the real devices are used.')

RRF_K = plain_loop.RRF_K


def timeit(fn, repeats):
  """Median wall time of ``fn()`` over ``repeats`` runs after one warm-up."""
  return bench_common.timings(fn, repeats)[0]


log = bench_common.log


def numpy_topk(queries, gallery, k):
  """Exact top-k with NumPy: matmul, argpartition, then sort of the k."""
  scores = queries @ gallery.T
  part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
  part_scores = np.take_along_axis(scores, part, axis=1)
  order = np.argsort(-part_scores, axis=1, kind='stable')
  return np.take_along_axis(part, order, axis=1)


RETRIEVE_VS_NUMPY = 2.0  # targets (issue 32), checked in every run
RETRIEVE_SHARE_OF_MATMUL = 0.65
FUSION_SESSIONS_PER_S = 25_000
FUSION_VS_NUMPY = 3.0


def parse_shapes(values):
  """``['100000x256', ...]`` -> ``[(100000, 256), ...]``; UsageError names
  the flag and the value."""
  shapes = []
  for v in values:
    n, sep, d = v.lower().partition('x')
    if not sep or not n.isdigit() or not d.isdigit() or not (
        int(n) > 0 and int(d) > 0):
      raise app.UsageError(f'--shapes: {v!r} is not NxD with positive '
                           'integers, e.g. 100000x256')
    shapes.append((int(n), int(d)))
  return shapes


def tune_sizes(rng, repeats, n, d):
  """``retrieve``'s time over ``--block_sizes`` x ``--group_sizes`` at
  ``n x d`` on this part, with the sizes the library uses on this backend
  (``retrieval.sizes``) and the fastest; every pair's ids checked equal."""
  from recovr_jax.core import retrieval  # pylint: disable=g-import-not-at-top
  b, k = _B.value, _K.value
  gallery = rng.standard_normal((n, d), dtype=np.float32)
  gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
  queries = rng.standard_normal((b, d), dtype=np.float32)
  queries /= np.linalg.norm(queries, axis=1, keepdims=True)
  g_dev, q_dev = jnp.asarray(gallery), jnp.asarray(queries)
  library = tuple(retrieval.sizes())
  pairs = sorted({(int(x), int(y)) for x in _BLOCKS.value
                  for y in _GROUPS.value} | {library})
  seconds, ids = {}, None
  for block, group in pairs:
    log(f'sizes: block {block}, group {group}')
    fn = jax.jit(functools.partial(retrieve, k=k, block_size=block,
                                   group_size=group))
    seconds[f'{block}x{group}'] = timeit(lambda: fn(q_dev, g_dev), repeats)
    got = np.asarray(fn(q_dev, g_dev)[0])
    if ids is not None and not np.array_equal(got, ids):
      raise RuntimeError(f'block {block}, group {group}: other ids')
    ids = got
  best = min(seconds, key=seconds.get)
  used = f'{library[0]}x{library[1]}'
  return {'n': n, 'd': d, 'b': b, 'k': k, 'seconds': seconds,
          'library_sizes': used, 'fastest': best,
          'library_over_fastest': seconds[used] / seconds[best]}


def bench_retrieval(rng, repeats, n, d):
  b, k = _B.value, _K.value
  gallery = rng.standard_normal((n, d), dtype=np.float32)
  gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
  queries = rng.standard_normal((b, d), dtype=np.float32)
  queries /= np.linalg.norm(queries, axis=1, keepdims=True)
  flops = 2.0 * b * n * d
  g_dev, q_dev = jnp.asarray(gallery), jnp.asarray(queries)
  rows = {}

  log('retrieval: plain matmul (the FLOP/s anchor)')
  xla_matmul = jax.jit(lambda q, g: q @ g.T)
  t_xla_mm = timeit(lambda: xla_matmul(q_dev, g_dev), repeats)
  t_np_mm = timeit(lambda: queries @ gallery.T, repeats)
  peak = flops / min(t_xla_mm, t_np_mm)
  rows['matmul_xla'] = t_xla_mm
  rows['matmul_numpy'] = t_np_mm

  log('retrieval: numpy top-k')
  t_np = timeit(lambda: numpy_topk(queries, gallery, k), repeats)
  rows['numpy'] = t_np
  log('retrieval: recovr_jax.retrieve')
  ours = jax.jit(functools.partial(retrieve, k=k, block_size=_BLOCK.value))
  t_ours = timeit(lambda: ours(q_dev, g_dev), repeats)
  rows['retrieve'] = t_ours
  ours_ids = np.asarray(ours(q_dev, g_dev)[0])
  np_ids = numpy_topk(queries, gallery, k)
  agreement = float(np.mean(ours_ids == np_ids))

  faiss_note = None
  try:
    import faiss  # pylint: disable=g-import-not-at-top
  except ImportError:
    faiss_note = 'faiss-cpu not installed: pip install faiss-cpu'
  if faiss_note is None:
    log('retrieval: faiss IndexFlatIP')
    index = faiss.IndexFlatIP(d)
    index.add(gallery)
    rows['faiss'] = timeit(lambda: index.search(queries, k), repeats)

  speedup = t_np / t_ours
  share = (flops / t_ours) / peak
  return {
      'config': dict(n=n, d=d, b=b, k=k, block_size=_BLOCK.value),
      'targets': {'speedup_vs_numpy': RETRIEVE_VS_NUMPY,
                  'share_of_matmul': RETRIEVE_SHARE_OF_MATMUL,
                  'met': bool(speedup >= RETRIEVE_VS_NUMPY
                              and share >= RETRIEVE_SHARE_OF_MATMUL)},
      'seconds': rows,
      'queries_per_s': {name: b / t for name, t in rows.items()
                        if not name.startswith('matmul')},
      'speedup_vs_numpy': {name: t_np / t for name, t in rows.items()
                           if not name.startswith('matmul')},
      'matmul_peak_gflops': peak / 1e9,
      'retrieve_gflops': flops / t_ours / 1e9,
      'retrieve_share_of_matmul_peak': (flops / t_ours) / peak,
      'top_k_id_agreement_with_numpy': agreement,
      'faiss_note': faiss_note,
  }


def make_rings(rng, sessions, w, c, k, n):
  """Realistic rings: each session's lists draw from a shared candidate pool,
  so ids recur across lists and turns as they do in a real session."""
  pool_size = 3 * k
  ids = np.empty((sessions, w, c, k), np.int32)
  for s in range(sessions):
    pool = rng.choice(n, pool_size, replace=False)
    for a in range(w):
      for ch in range(c):
        ids[s, a, ch] = rng.choice(pool, k, replace=False)
  scores = -np.sort(-rng.random((sessions, w, c, k), dtype=np.float32), -1)
  valid = np.ones((sessions, w, c), bool)
  # The demotion set of turn 5: five displayed top-1s, most of them listed.
  demote = ids[:, :, 0, 0].copy()
  demote[:, -1] = rng.integers(0, n, sessions)  # one not in any list
  caps = np.tile(np.array([11, 4, 4, 4, 4], np.int32), (sessions, 1))
  return ids, scores, valid, demote, caps


def bench_fusion(rng, repeats):
  s, w, c, k, n = (_SESSIONS.value, _W.value, _C.value, _K.value, _N.value)
  ids, scores, valid, demote, caps = make_rings(rng, s, w, c, k, n)
  weights = [(w - a) / w for a in range(w)]
  rows = {}

  def batched(num_ids):
    step = functools.partial(fusion.fuse_with_rank_cap, k=RRF_K,
                             num_ids=num_ids)
    return jax.jit(jax.vmap(step))

  args = tuple(jnp.asarray(x) for x in (ids, scores, valid, demote, caps))
  log('fusion: recovr_jax batched, one-pass id sort (num_ids=N)')
  one_pass = batched(n)
  rows['recovr_jax'] = timeit(lambda: one_pass(*args), repeats)
  log('fusion: recovr_jax batched, two-pass id sort (num_ids=None)')
  two_pass = batched(None)
  rows['recovr_jax_two_pass'] = timeit(lambda: two_pass(*args), repeats)

  devices = len(jax.devices('cpu')) if jax.default_backend() == 'cpu' else (
      len(jax.devices()))
  sharded_agreement = None
  if devices > 1 and s % devices == 0:
    log(f'fusion: recovr_jax batched, sessions split over {devices} devices')
    mesh = sharding.make_mesh(gallery_shards=1, session_shards=devices)
    placed = tuple(jax.device_put(x, NamedSharding(mesh, P('session')))
                   for x in args)
    over = sharding.over_sessions(jax.vmap(functools.partial(
        fusion.fuse_with_rank_cap, k=RRF_K, num_ids=n)), mesh)
    rows['recovr_jax_sessions_sharded'] = timeit(lambda: over(*placed),
                                                 repeats)
    sharded_agreement = bool(np.array_equal(
        np.asarray(over(*placed)[0]), np.asarray(one_pass(*args)[0])))

  log('fusion: NumPy, vectorised over sessions')
  t_vec = timeit(lambda: plain_loop.numpy_sessions(ids, demote, caps,
                                                   weights, k), repeats)
  rows['numpy_vectorised'] = t_vec
  vec_agreement = float(np.mean(
      plain_loop.numpy_sessions(ids, demote, caps, weights, k)
      == np.asarray(one_pass(*args)[0])))

  log('fusion: where the time goes (each part jitted alone)')
  profile = fusion_profile(args, s, w, c, k, repeats)

  log('fusion: per-session Python loop')
  ids_list = ids.tolist()
  demote_list, caps_list = demote.tolist(), caps.tolist()
  loop = lambda: [plain_loop.python_session(ids_list[i], demote_list[i], caps_list[i],
                                 weights, k) for i in range(s)]
  rows['python_loop'] = timeit(loop, repeats)
  got = np.asarray(one_pass(*args)[0])
  agreement = float(np.mean(got == np.asarray(loop())))

  ranx_note = None
  try:
    import ranx  # pylint: disable=g-import-not-at-top
  except ImportError:
    ranx_note = 'ranx not installed: pip install ranx'
  if ranx_note is None:
    log('fusion: ranx wsum over per-list RRF runs')
    capper = jax.jit(jax.vmap(jax.vmap(jax.vmap(
        fusion.demotion.rank_cap, in_axes=(0, 0, None, None)),
        in_axes=(0, 0, None, None))))
    capped_ids = np.asarray(capper(args[0], args[1], args[3], args[4])[0])
    rrf = (1.0 / (RRF_K + np.arange(1, k + 1))).tolist()
    qids = [str(i) for i in range(s)]

    def ranx_fuse():
      runs = []
      for a in range(w):
        for ch in range(c):
          runs.append(ranx.Run({
              qids[i]: dict(zip(map(str, capped_ids[i, a, ch].tolist()), rrf))
              for i in range(s)}))
      return ranx.fuse(runs, norm=None, method='wsum',
                       params={'weights': [weights[a] for a in range(w)
                                           for _ in range(c)]})

    rows['ranx'] = timeit(ranx_fuse, repeats)

  # The anchor for "cost under 10% of one turn's retrieval": retrieving both
  # channels' lists (2 x sessions queries) from the N x D gallery.
  log('fusion: one turn of retrieval for all sessions (anchor)')
  gallery = rng.standard_normal((n, _D.value), dtype=np.float32)
  queries = rng.standard_normal((c * s, _D.value), dtype=np.float32)
  ours = jax.jit(functools.partial(retrieve, k=k, block_size=_BLOCK.value))
  g_dev, q_dev = jnp.asarray(gallery), jnp.asarray(queries)
  t_turn = timeit(lambda: ours(q_dev, g_dev), repeats)
  rate = s / rows['recovr_jax']
  return {
      'config': dict(sessions=s, window=w, channels=c, k=k, n=n),
      'targets': {'sessions_per_s': FUSION_SESSIONS_PER_S,
                  'vs_numpy_vectorised': FUSION_VS_NUMPY,
                  'met': bool(rate >= FUSION_SESSIONS_PER_S and
                              t_vec / rows['recovr_jax'] >= FUSION_VS_NUMPY)},
      'profile_seconds': profile,
      'fused_id_agreement_with_numpy_vectorised': vec_agreement,
      'seconds': rows,
      'sessions_per_s': {name: s / t for name, t in rows.items()},
      'speedup_of_recovr_jax': {name: t / rows['recovr_jax']
                                for name, t in rows.items()},
      'turn_retrieval_seconds': t_turn,
      'share_of_turn_retrieval': rows['recovr_jax'] / t_turn,
      'fused_id_agreement_with_python': agreement,
      'sharded_equals_unsharded': sharded_agreement,
      'session_devices': devices,
      'ranx_note': ranx_note,
  }


def fusion_profile(args, s, w, c, k, repeats):
  """Seconds of the parts of ``fuse_with_rank_cap`` on the benchmark's rings,
  each jitted and timed alone: rank-cap of the W x C ring lists, fusion
  without rank-cap, and in it the packed-id sort and the top-k."""
  ids, scores, valid, demote, caps = args
  p = w * c * k
  capper = jax.jit(jax.vmap(jax.vmap(fusion.demotion.rank_cap,
                                     in_axes=(0, 0, None, None))))
  flat = (ids.reshape(s, w * c, k), scores.reshape(s, w * c, k))
  fuse_only = jax.jit(jax.vmap(functools.partial(
      fusion.fuse, k=RRF_K, num_ids=_N.value)))
  pos_bits = (p - 1).bit_length()
  keys = ((ids.reshape(s, p).astype(jnp.uint32) << pos_bits)
          | jnp.arange(p, dtype=jnp.uint32))
  sort = jax.jit(lambda x: jnp.sort(x, axis=1))
  rng = np.random.default_rng(1)
  # Fused-score-like input: a third of the entries finite (one per id).
  fused = np.where(rng.random((s, p)) < 0.3, rng.random((s, p)), -np.inf)
  fused = jnp.asarray(fused.astype(np.float32))
  top_k = jax.jit(lambda x: jax.lax.top_k(x, k))
  return {
      'rank_cap_ring_lists': timeit(lambda: capper(*flat, demote, caps),
                                    repeats),
      'fuse_without_rank_cap': timeit(lambda: fuse_only(ids, scores, valid),
                                      repeats),
      'id_sort': timeit(lambda: sort(keys), repeats),
      'top_k_unmasked': timeit(lambda: top_k(fused), repeats),
  }


def table(retrievals, fused):
  f = fused
  lines = [
      '| benchmark | method | median s | rate | vs anchor |',
      '|---|---|---:|---:|---:|',
  ]
  for r in retrievals:
    cfg = r['config']
    name = (f"retrieval N={cfg['n']:,} D={cfg['d']} B={cfg['b']} "
            f"K={cfg['k']}")
    for m in ('retrieve', 'numpy', 'faiss'):
      if m in r['seconds']:
        lines.append(f"| {name} | {m} | {r['seconds'][m]:.4f} | "
                     f"{r['queries_per_s'][m]:,.0f} q/s | "
                     f"{r['speedup_vs_numpy'][m]:.2f}x NumPy |")
    met = 'met' if r['targets']['met'] else 'MISSED'
    lines.append(
        f"| {name} | plain matmul (best of XLA, NumPy) | "
        f"{min(r['seconds']['matmul_xla'], r['seconds']['matmul_numpy']):.4f}"
        f" | {r['matmul_peak_gflops']:.0f} GFLOP/s | retrieve reaches "
        f"{100 * r['retrieve_share_of_matmul_peak']:.0f}% (targets >= "
        f"{RETRIEVE_VS_NUMPY:g}x NumPy and >= "
        f"{100 * RETRIEVE_SHARE_OF_MATMUL:.0f}%: {met}) |")
  cfg = f['config']
  name = (f"fusion+rank-cap S={cfg['sessions']:,} W={cfg['window']} "
          f"C={cfg['channels']} K={cfg['k']}")
  for m in ('recovr_jax', 'recovr_jax_sessions_sharded',
            'recovr_jax_two_pass', 'numpy_vectorised', 'python_loop', 'ranx'):
    if m in f['seconds']:
      if m == 'recovr_jax':
        versus = 'anchor'
      elif m == 'recovr_jax_sessions_sharded':
        versus = f"{1 / f['speedup_of_recovr_jax'][m]:.1f}x the anchor's rate"
      else:
        versus = f"recovr_jax {f['speedup_of_recovr_jax'][m]:.1f}x faster"
      lines.append(f"| {name} | {m} | {f['seconds'][m]:.4f} | "
                   f"{f['sessions_per_s'][m]:,.0f} sess/s | {versus} |")
  lines.append(f"| {name} | one turn of retrieval (anchor) | "
               f"{f['turn_retrieval_seconds']:.4f} | | fusion costs "
               f"{100 * f['share_of_turn_retrieval']:.1f}% of it |")
  for part, t in f['profile_seconds'].items():
    lines.append(f"| {name} | profile: {part.replace('_', ' ')} | {t:.4f} | "
                 f"| {100 * t / f['seconds']['recovr_jax']:.0f}% of "
                 'recovr_jax |')
  met = 'met' if f['targets']['met'] else 'MISSED'
  lines.append(f"| {name} | targets: >= {FUSION_SESSIONS_PER_S:,} sess/s and "
               f">= {FUSION_VS_NUMPY:g}x numpy_vectorised | | | {met} |")
  return '\n'.join(lines)


def main(argv):
  del argv
  bench_common.full_speed_blas()
  bench_common.split_cpu_devices(_SESSION_DEVICES.value)
  if _REPEATS.value < 5:
    raise app.UsageError('--repeats must be >= 5 (medians of at least 5)')
  try:
    resources.select_device(_PLATFORM.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  shapes = parse_shapes(bench_common.list_values(_SHAPES))
  machine = bench_common.environment()
  output = _OUTPUT.value
  if output is None:
    output = f'results/bench_core/{bench_common.machine_kind(machine)}.json'
  rng = np.random.default_rng(_SEED.value)
  retrievals = []
  for n, d in shapes:
    retrievals.append(bench_retrieval(rng, _REPEATS.value, n, d))
  fused = bench_fusion(rng, _REPEATS.value)
  tuned = tune_sizes(rng, _REPEATS.value, *shapes[0]) if _TUNE.value else None
  result = {
      'command': 'python -m experiments.bench.bench_core ' + ' '.join(sys.argv[1:]),
      'machine': machine,
      'machine_kind': bench_common.machine_kind(machine),
      'repeats': _REPEATS.value,
      'retrieval': retrievals,
      'fusion': fused,
  }
  if tuned:
    result['sizes_on_this_part'] = tuned
  print(table(retrievals, fused))
  print(bench_common.blas_line(result['machine']))
  agree = min(r['top_k_id_agreement_with_numpy'] for r in retrievals)
  print(f"top-{_K.value} ids equal to NumPy's: {100 * agree:.3f}% (lowest "
        'shape); fused ids equal to the float64 Python loop: '
        f"{100 * fused['fused_id_agreement_with_python']:.3f}%, to the "
        'vectorised NumPy: '
        f"{100 * fused['fused_id_agreement_with_numpy_vectorised']:.3f}%")
  if tuned:
    print(f"retrieve's block x group sizes at {tuned['n']} x {tuned['d']} "
          f"on this part: the library uses {tuned['library_sizes']}, "
          f"fastest {tuned['fastest']} ({tuned['library_over_fastest']:.2f}x "
          "the fastest's time); " + ', '.join(
              f'{p} {t * 1e3:.1f} ms' for p, t in tuned['seconds'].items()))
  for note in (retrievals[0]['faiss_note'], fused['ranx_note']):
    if note:
      print(f'note: {note}')
  if output:
    outputs.write_json(output, result)


if __name__ == '__main__':
  cli.run(main)
