r"""Whole runs, end to end: what a researcher waits for.

    python -m experiments.bench.bench_runs --num_sessions=100 \
        --output_json=results/bench_runs.json

Runs each part of ``--parts`` as ``python -m experiments.run`` in a fresh
process with a fresh ``--cache_dir`` (cold: no embeddings, fits or compiled
programs kept from before), at ``--num_sessions`` sessions (and
``--num_turns`` when given), with ``--run_args`` appended to every run's
flags:

* ``quickstart``: ``experiments/flagfiles/quickstart`` (its host driver),
  then ``quickstart_warm``: the same command once more with the same
  ``--cache_dir``;
* ``main_jit``, ``main_host``: ``experiments/flagfiles/main`` under each
  driver, then ``main_jit_warm``: the jitted run once more with the same
  ``--cache_dir`` (its compiled programs and embeddings kept);
* ``fidelity``: one member of the fidelity family
  (``experiments/flagfiles/fidelity``: ``--suite=fidelity``, 19 runs);
* ``files_host``, ``files_jit``: real files (``--data=files``) under
  each driver (the jitted one is the stepped face, ``drivers.stepped``):
  ``--files_videos`` synthetic videos and ``--num_sessions`` queries in
  WebVid-CoVR's layout (``synthetic_files.write``), the five main
  methods.

Per part: the process's wall time; the session-turns the ranking core
scored (``profile.json``'s count, ``ranking.SCORED``: the host driver
scores every session of a batch each turn, the jitted driver the chunks
of sessions still searching) against those searched; its session-turns (each method's
sessions' turns until they stopped, counted in ``trajectories.jsonl``) per
second; the time by part from the runs' ``profile.json``; and the run's
retrieval FLOPs against the machine. The ranking core scores its C = 2
channels' queries against the whole gallery every turn a session is
active, 2 x C x N x D FLOPs per session-turn (N gallery videos, D = 384);
at the peak rate of a plain XLA matmul of the jitted driver's shape
against the gallery (a chunk's 64 sessions x 2 channels = 128 query rows;
the fastest of 20 timings, measured in this process after the runs; 64
rows until the session after 9abcb1d, whose rate is lower; the median of 5
before 9abcb1d; the rate varies between processes), those FLOPs take the
"compute bound" seconds, reported with their share of the sessions' time
(the ``jitted sessions`` part, or ``ranking`` on the host driver) and of
the wall. What the ranking core alone allows: its time per session-turn
on a chunk of 64 sessions (``ranking_core_rate``: a session's start and 5
turns, both channels, the default loop; also the two channels' exact
top-K and their matmul alone) times the session-turns the run scored,
against the bound: the share the sessions could reach if the user, the
plan and the host cost nothing. Text encoding likewise: the runs count the tokens MiniLM encoded,
those it computed (padding included) and their FLOPs (``profile.json``'s
``counts``, ``TextEncoder._count``); at the peak rate of an XLA matmul of
MiniLM's feed-forward shape (16 texts x 16, 32 or 64 tokens by 384 x 1536,
the fastest of 20 timings) those FLOPs take the text-encoding bound,
reported as a share of the ``text encoding`` part.
"""

import functools
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import bench_common
from experiments.bench import run_files
from experiments.bench import synthetic_files
from experiments.common import cli
from recovr_jax.core import retrieval
from recovr_jax.protocol import ranking

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGFILES = ROOT / 'experiments' / 'flagfiles'
# Each part: (flagfile, extra flags, the part whose cache it reuses).
PARTS = {
    'quickstart': ('quickstart', (), None),
    'quickstart_warm': ('quickstart', (), 'quickstart'),
    'main_jit': ('main', ('--simulation=jit',), None),
    'main_jit_warm': ('main', ('--simulation=jit',), 'main_jit'),
    'main_host': ('main', ('--simulation=host',), None),
    'fidelity': ('fidelity', (), None),
    'files_host': (None, ('--simulation=host',), None),
    'files_jit': (None, ('--simulation=jit',), None),
}

_PARTS = flags.DEFINE_list('parts', list(PARTS),
                           f'Which runs ({", ".join(PARTS)}); '
                           'quickstart_warm needs quickstart before it, '
                           'main_jit_warm main_jit.')
_SESSIONS = flags.DEFINE_integer('num_sessions', 100,
                                 "Every run's --num_sessions.")
_TURNS = flags.DEFINE_integer('num_turns', None,
                              "Every run's --num_turns (default: the "
                              "flagfiles').")
_RUN_ARGS = flags.DEFINE_list(
    'run_args', [], 'Flags appended to every run (e.g. --methods=recovr '
    'for a quick check); they override the flagfiles.')
_FILES_VIDEOS = flags.DEFINE_integer(
    'files_videos', 20_000, 'Videos in the files parts\' synthetic gallery.')
_REPEATS = flags.DEFINE_integer(
    'repeats', 20, 'Timed matmul repeats (at least 20 are taken): the '
    'fastest gives the peak rate of the bounds.')
_KEEP = flags.DEFINE_bool('keep', False, 'Keep the runs\' directories.')
_JSON = flags.DEFINE_string('output_json', None, 'Write the results here.')


def session_turns(out: pathlib.Path) -> int:
  """The session-turns the runs under ``out`` computed: per method and
  session, its turns before it stopped (turn 0 included)."""
  total = 0
  for path in sorted(out.rglob('trajectories.jsonl')):
    for line in path.read_text().splitlines():
      total += sum(t.get('action') != 'stopped'
                   for t in json.loads(line)['turns'])
  return total


def run_part(name: str, root: pathlib.Path) -> dict:
  """Runs part ``name`` as a process; its measurements."""
  flagfile, extra, reuses = PARTS[name]
  out = root / name
  cache = root / (reuses or name) / 'cache'
  source = ([f'--flagfile={FLAGFILES / flagfile}'] if flagfile else
            synthetic_files.write(root / 'files', _FILES_VIDEOS.value,
                                  _SESSIONS.value))
  args = [sys.executable, '-m', 'experiments.run', *source, *extra,
          f'--num_sessions={_SESSIONS.value}', '--noresume',
          f'--output_dir={out / "run"}', f'--cache_dir={cache}']
  if _TURNS.value is not None:
    args.append(f'--num_turns={_TURNS.value}')
  args += list(_RUN_ARGS.value)
  bench_common.log(f'{name}: {" ".join(args[3:])}')
  start = time.perf_counter()
  proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                        check=False)
  wall = time.perf_counter() - start
  if proc.returncode:
    raise RuntimeError(f'{name}: the run exited {proc.returncode}:\n'
                       f'{proc.stderr[-3000:]}')
  shapes = [tuple(map(int, m)) for m in run_files.SHAPE.findall(proc.stdout)]
  if not shapes:
    raise RuntimeError(f'{name}: the run printed no "N sessions x M methods'
                       '" line')
  turns = session_turns(out / 'run')
  parts = run_files.profile_parts(out / 'run')
  gallery = max(s[2] for s in shapes)
  dim = run_files.DIM if flagfile else synthetic_files.DIM
  counts = run_files.profile_counts(out / 'run')
  row = {'wall_s': round(wall, 2), 'runs': len(shapes),
         'sessions': shapes[0][0], 'methods': sum(s[1] for s in shapes),
         'turns': shapes[0][3], 'gallery': gallery, 'dim': dim,
         'session_turns': turns,
         'session_turns_per_s': round(turns / wall, 1),
         'scored_session_turns': int(counts.get(ranking.SCORED, 0)),
         'retrieval_gflop': round(2 * run_files.CHANNELS * gallery * dim * turns / 1e9,
                                  3),
         'profile_s': parts, 'counts': counts}
  bench_common.log(f'{name}: {wall:.1f} s, {turns} session-turns')
  return row


def matmul_rate(gallery: int, repeats: int, dim: int = run_files.DIM) -> dict:
  """The best FLOP/s of a plain XLA matmul of the jitted driver's shape
  against a gallery of ``gallery`` x ``dim`` float32 rows (the ranking
  core's FLOPs): a chunk's ``run_files.CHUNK`` sessions' ``run_files.CHANNELS`` queries, the
  rows one vmapped turn multiplies at once; the fastest of ``repeats`` (at
  least 20) timings, a peak rate, so that the bound is one (and a rate a
  noisy timing does not halve)."""
  rng = np.random.default_rng(0)
  rows = run_files.CHUNK * run_files.CHANNELS
  q = jnp.asarray(rng.normal(size=(rows, dim)), jnp.float32)
  g = jnp.asarray(rng.normal(size=(gallery, dim)), jnp.float32)
  # At the retrieval's precision (exact float32): on an accelerator the
  # default would be a TF32 or bfloat16 rate, not the work the runs do.
  matmul = jax.jit(lambda a, b: jnp.dot(a, b.T,
                                        precision=jax.lax.Precision.HIGHEST))
  _, times = bench_common.timings(lambda: matmul(q, g), max(repeats, 20))
  seconds = min(times)
  return {'gallery': gallery, 'dim': dim, 'rows': rows, 'precision': 'highest',
          'seconds': seconds,
          'gflops': 2 * rows * gallery * dim / seconds / 1e9}


def ranking_core_rate(gallery: int, repeats: int, dim: int = run_files.DIM,
                      turns: int = 5) -> dict:
  """Seconds per session-turn of the ranking core alone on a chunk of
  ``run_files.CHUNK`` sessions, as the jitted driver runs it, with no user, plan or
  host work: each session's start and ``turns`` feedback turns
  (``ranking.start_step`` and ``ranking.turn_step`` vmapped; both
  channels valid, the default loop: TW-RRF over a window of 5, rank-cap
  on every list; sigma cycling neg, neu, pos), and of two of its parts:
  both channels' exact top-K (``retrieval.top_k_blocks``) and their
  matmul alone. A gallery of ``gallery`` random unit rows; each query a
  gallery row plus noise (cosine about 0.8), so that the top-K's floors
  prune as on embeddings whose queries resemble their targets. Each the
  fastest of ``repeats`` (at least 20) timings."""
  rng = np.random.default_rng(2)
  rows = rng.normal(size=(gallery, dim)).astype(np.float32)
  rows /= np.linalg.norm(rows, axis=1, keepdims=True)
  g = jnp.asarray(rows)
  config = ranking.LoopConfig(num_turns=turns, num_ids=gallery)

  def inputs(turn):
    near = rows[rng.integers(0, gallery, (run_files.CHUNK, run_files.CHANNELS))]
    q = near + 0.8 / np.sqrt(dim) * rng.normal(size=near.shape)
    q /= np.linalg.norm(q, axis=2, keepdims=True)
    return ranking.TurnInputs(
        queries=jnp.asarray(q, jnp.float32),
        valid=jnp.ones((run_files.CHUNK, run_files.CHANNELS), bool),
        exclude=jnp.asarray(rng.integers(0, gallery, run_files.CHUNK), jnp.int32),
        sigma=jnp.full((run_files.CHUNK,), turn % 3, jnp.int32),
        stop=jnp.zeros((run_files.CHUNK,), bool))
  every = [inputs(t) for t in range(turns + 1)]
  init = jax.vmap(lambda _: ranking.init_state(config))(jnp.arange(run_files.CHUNK))
  start = jax.jit(jax.vmap(functools.partial(ranking.start_step, config),
                           in_axes=(None, 0, 0)))
  step = jax.jit(jax.vmap(functools.partial(ranking.turn_step, config),
                          in_axes=(None, 0, 0)))

  def session():
    state = start(g, init, every[0])
    for t in range(1, turns + 1):
      state = step(g, state, every[t])
    return state
  queries = every[1].queries.reshape(run_files.CHUNK * run_files.CHANNELS, dim)
  exclude = jnp.repeat(every[1].exclude, run_files.CHANNELS)
  top_k = jax.jit(lambda q, e: retrieval.top_k_blocks(
      q, g, e, k=config.list_length,
      block_size=min(ranking.block_rows(), gallery)))
  matmul = jax.jit(lambda q: q @ g.T)
  repeats = max(repeats, 20)
  out = {'gallery': gallery, 'dim': dim, 'sessions': run_files.CHUNK,
         'turns': turns + 1}
  for name, fn, per in (
      ('matmul', lambda: matmul(queries), run_files.CHUNK),
      ('retrieval', lambda: top_k(queries, exclude), run_files.CHUNK),
      ('ranking_core', session, run_files.CHUNK * (turns + 1))):
    _, times = bench_common.timings(fn, repeats)
    out[f'{name}_us_per_session_turn'] = round(1e6 * min(times) / per, 2)
  return out


def minilm_rate(repeats: int) -> dict:
  """The best FLOP/s of an XLA matmul of MiniLM's feed-forward shape (16
  texts x W tokens of width 384 by its 384 x 1536 weight, W = 16, 32, 64:
  the widths texts are padded to), each the fastest of ``repeats`` (at
  least 20) timings: a peak rate, so that the bound is one."""
  rng = np.random.default_rng(1)
  w = jnp.asarray(rng.normal(size=(384, 1536)), jnp.float32)
  matmul = jax.jit(lambda a, b: a @ b)
  best = None
  for width in (16, 32, 64):
    x = jnp.asarray(rng.normal(size=(16 * width, 384)), jnp.float32)
    _, times = bench_common.timings(lambda: matmul(x, w), max(repeats, 20))
    rate = 2 * 16 * width * 384 * 1536 / min(times) / 1e9
    if best is None or rate > best['gflops']:
      best = {'shape': [16 * width, 384, 1536], 'seconds': min(times),
              'gflops': rate}
  return best


def _markdown(columns, rows) -> str:
  """A markdown table: ``columns`` ``(name, '---' or '---:')``, ``rows``
  lists of cells."""
  lines = ['| ' + ' | '.join(name for name, _ in columns) + ' |',
           '|' + '|'.join(align for _, align in columns) + '|']
  lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
  return '\n'.join(lines)


def _share(part: float, whole: float | None, unit: str = '') -> str:
  return f'{100 * part / whole:.1f}%{unit}' if whole else '-'


def text_table(results: dict) -> str:
  rows = []
  for name, row in results['parts'].items():
    counts, spent = row['counts'], row['profile_s'].get('text encoding')
    bound = row['text_bound_s']
    rows.append([name, f"{counts.get('text encoding: tokens', 0):,}",
                 f"{counts.get('text encoding: tokens computed', 0):,}",
                 f"{counts.get('text encoding: GFLOP', 0.0):.1f}",
                 f'{spent:.1f}' if spent else '-', f'{bound:.2f}',
                 _share(bound, spent)])
  return _markdown([('part', '---'), ('tokens', '---:'),
                    ('tokens computed', '---:'), ('text GFLOP', '---:'),
                    ('text encoding s', '---:'), ('FLOP bound s', '---:'),
                    ('bound / text encoding', '---:')], rows)


def ceiling_table(results: dict) -> str:
  """What the ranking core alone allows: its time on the session-turns
  each run scored against the compute bound."""
  rows = []
  for name, row in results['parts'].items():
    core, bound = row['ranking_core'], row['compute_bound_s']
    rows.append([
        name, f"{row['scored_session_turns']:,}",
        ' / '.join(f"{core[f'{p}_us_per_session_turn']:.1f}"
                   for p in ('matmul', 'retrieval', 'ranking_core')),
        f"{row['ranking_core_s']:.2f}", f'{bound:.2f}',
        _share(bound, row['ranking_core_s']),
        _share(bound, _sessions_part(row))])
  return _markdown([
      ('part', '---'), ('scored session-turns', '---:'),
      ('matmul / retrieval / ranking core us per session-turn', '---'),
      ('ranking core alone s', '---:'), ('compute bound s', '---:'),
      ('bound / ranking core', '---:'), ('bound / sessions part', '---:')],
                   rows)


def _sessions_part(row: dict) -> float | None:
  """The sessions' seconds: the jitted driver's ``jitted sessions`` with
  the ``device programs`` timed inside it (``profiling.DEVICE``), or the
  host driver's ``ranking``."""
  parts = row['profile_s']
  if 'jitted sessions' in parts:
    return parts['jitted sessions'] + parts.get('device programs', 0.0)
  return parts.get('ranking')


def table(results: dict) -> str:
  rows = []
  for name, row in results['parts'].items():
    bound, part = row['compute_bound_s'], _sessions_part(row)
    rows.append([
        name, str(row['runs']),
        f"{row['sessions']} x {row['methods']} x {row['turns']}",
        f"{row['wall_s']:.1f}", f"{row['session_turns_per_s']:.1f}",
        f"{row['scored_session_turns'] / row['session_turns']:.2f}",
        f"{row['retrieval_gflop']:.1f}", f'{bound:.2f}',
        _share(bound, part, f' of {part:.1f} s' if part else ''),
        f"{100 * bound / row['wall_s']:.2f}%"])
  return _markdown([
      ('part', '---'), ('runs', '---:'),
      ('sessions x methods x turns', '---'), ('wall s', '---:'),
      ('session-turns / s', '---:'), ('scored / searched', '---:'),
      ('retrieval GFLOP', '---:'), ('compute bound s', '---:'),
      ('bound / sessions part', '---:'), ('bound / wall', '---:')], rows)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  bench_common.full_speed_blas()  # the runs inherit the environment
  parts = bench_common.list_values(_PARTS, valid=tuple(PARTS))
  for name in parts:
    reuses = PARTS[name][2]
    if reuses and (reuses not in parts or
                   parts.index(reuses) > parts.index(name)):
      raise app.UsageError(f'--parts: {name} reuses the cache of {reuses}, '
                           f'which must come before it')
  for flag in (_SESSIONS, _REPEATS) + ((_TURNS,) if _TURNS.value is not None
                                       else ()):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  for arg in _RUN_ARGS.value:
    if not arg.startswith('--'):
      raise app.UsageError(f'--run_args: {arg!r} is not a flag (--name=...)')
  root = pathlib.Path(tempfile.mkdtemp(prefix='bench-runs-'))
  try:
    results = {'config': {'num_sessions': _SESSIONS.value,
                          'num_turns': _TURNS.value,
                          'run_args': list(_RUN_ARGS.value)},
               'parts': {name: run_part(name, root) for name in parts}}
  finally:
    if not _KEEP.value:
      shutil.rmtree(root, ignore_errors=True)
  rates, cores = {}, {}
  for row in results['parts'].values():  # one per gallery shape
    shape = (row['gallery'], row['dim'])
    if shape not in rates:
      rates[shape] = matmul_rate(*shape[:1], _REPEATS.value, dim=shape[1])
      cores[shape] = ranking_core_rate(shape[0], _REPEATS.value,
                                       dim=shape[1])
    row['compute_bound_s'] = round(
        row['retrieval_gflop'] / rates[shape]['gflops'], 6)
    row['ranking_core'] = cores[shape]
    row['ranking_core_s'] = round(
        row['scored_session_turns'] *
        cores[shape]['ranking_core_us_per_session_turn'] / 1e6, 6)
  results['matmul'] = list(rates.values())
  text_rate = minilm_rate(_REPEATS.value)
  results['minilm_matmul'] = text_rate
  for row in results['parts'].values():
    row['text_bound_s'] = round(row['counts'].get(
        'text encoding: GFLOP', 0.0) / text_rate['gflops'], 6)
  print(table(results))
  print(ceiling_table(results))
  print(text_table(results))
  if _JSON.value:
    bench_common.write_results(_JSON.value, results)


if __name__ == '__main__':
  cli.run(main)
