r"""The sweep, side by side: `main` jitted at each size from a primed cache,
its time split into the device's (the turn programs, blocked on) and the
host's (the rest), against the same runs of another commit.

    python -m experiments.bench.bench_sweep                    # 1,000, 10,000
    python -m experiments.bench.bench_sweep --sessions=1000,4000 \
        --baseline=<commit>

For each size S (``--sessions``), in one cache per size under
``--work_dir``:

1. a priming run of `main` (``experiments/flagfiles/main
   --simulation=jit --num_sessions=S --query_repeats=ceil(S / 500)``) by
   this checkout, then by the baseline's worktree when there is one, so
   each commit's compiled programs and caches are in place (the priming
   runs are timed and reported, not compared);
2. the warm run of each, into a new output folder, timed from outside
   (the process's wall time, imports included) and from its own
   ``profile.json``: ``device_s`` is its ``device programs`` part, the
   jitted drivers' turn programs blocked on until their outputs are ready
   (``profiling.DEVICE``; a baseline whose runner does not time it gets the
   same part by wrapping its ``jit_runner._Programs.__call__`` the same
   way), and the host time is the wall time less the device's. Loading a
   kept program or compiling one inside such a call is the host's
   (``profiling.PROGRAMS``, its own part; a baseline from before it gets
   the same part around ``executables.find``).

Per run it reports the wall time, device and host seconds, host
microseconds per session-method, the output folder's bytes and the
process's peak resident set (``ru_maxrss`` of the run's own process).
With ``--baseline`` it prints, per size, the ratios baseline / now. The
JSON goes to ``--output_json`` (default ``results/bench_sweep.json``).

The targets (issue "a sweep is device work"), checked and recorded as
pass/fail: at the largest size, host time at most 50 microseconds per
session-method and at most 20% of the wall time, and the warm wall time at
most half the baseline's; the host time at the largest size at most 1.1x
the size ratio times that at the smallest (no quadratic term).
"""

import hashlib
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from experiments.bench import bench_common
from experiments.bench import run_files
from experiments.common import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
QUERIES = 500  # the world's test queries (main's --num_test_triplets)
# The baseline's runner timed as this one times its own (a commit from
# before ``profiling.DEVICE`` gets the same part around the same call, and
# one from before ``profiling.PROGRAMS`` its loading and compiling of kept
# programs as host time, as here).
_LAUNCH = '''
import runpy, sys
from recovr_jax import profiling
from recovr_jax.drivers import jit_runner
if not hasattr(profiling, 'DEVICE'):
  call = jit_runner._Programs.__call__
  def timed(self, *args, **kwargs):
    with profiling.part('device programs'):
      return profiling.sync(call(self, *args, **kwargs))
  jit_runner._Programs.__call__ = timed
if not hasattr(profiling, 'PROGRAMS'):  # loading or compiling: the host's
  from recovr_jax import executables
  find = executables.find
  def found(*args, **kwargs):
    with profiling.part('programs (load or compile)'):
      return find(*args, **kwargs)
  executables.find = found
sys.argv = ['experiments.run'] + sys.argv[1:]
runpy.run_module('experiments.run', run_name='__main__', alter_sys=True)
'''
DEVICE_PART = 'device programs'

_SESSIONS = flags.DEFINE_list('sessions', ['1000', '10000'],
                              '--num_sessions of each size.')
_BASELINE = flags.DEFINE_string(
    'baseline', None, 'A commit to run the same in a worktree of '
    '(git worktree add), printing the ratios baseline / now.')
_WORK = flags.DEFINE_string(
    'work_dir', None, 'Where the caches, outputs and worktree go (default: '
    'a temporary folder, removed afterwards). A folder whose caches are '
    'primed already skips nothing: each priming run is quick on a primed '
    'cache.')
_RUN_ARGS = flags.DEFINE_list('run_args', [], 'Flags appended to every run '
                              '(e.g. --methods=recovr,ivr for a short check).')
_JSON = flags.DEFINE_string('output_json',
                            str(ROOT / 'results' / 'bench_sweep.json'),
                            'Where to write the results.')


def _run(code: pathlib.Path, args: list[str]) -> dict:
  """One run of the runner in checkout ``code``: wall seconds, exit status,
  peak RSS (MiB) and its output."""
  env = dict(os.environ, PYTHONPATH=str(code))
  start = time.perf_counter()
  with tempfile.TemporaryFile('w+') as log:
    proc = subprocess.Popen([sys.executable, '-c', _LAUNCH, *args],
                            cwd=code, stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    log.seek(0)
    text = log.read()
  if proc.returncode:
    raise RuntimeError(f'{" ".join(args)} in {code} exited '
                       f'{proc.returncode}:\n{text[-3000:]}')
  return {'wall_s': wall, 'peak_rss_mib': usage.ru_maxrss / 1024,
          'log': text}


def _code_digest(code: pathlib.Path) -> str:
  """A digest of a checkout's library sources: a benchmark whose code
  changes under it (an edit while it runs) measures nothing."""
  h = hashlib.sha256()
  for path in sorted((code / 'recovr_jax').rglob('*.py')):
    h.update(str(path.relative_to(code)).encode() + b'\0' +
             path.read_bytes() + b'\0')
  return h.hexdigest()


def _bytes(folder: pathlib.Path) -> int:
  return sum(p.stat().st_size for p in folder.rglob('*') if p.is_file())


def measure(code: pathlib.Path, sessions: int, cache: pathlib.Path,
            out: pathlib.Path) -> dict:
  """A priming run, then the warm run, of `main` at ``sessions`` by the
  checkout ``code``."""
  queries = QUERIES
  for arg in _RUN_ARGS.value:  # a smaller world's queries (the CPU test)
    if arg.startswith('--num_test_triplets='):
      queries = int(arg.split('=', 1)[1])
  args = ['--flagfile=experiments/flagfiles/main', '--simulation=jit',
          f'--num_sessions={sessions}',
          f'--query_repeats={math.ceil(sessions / queries)}', '--noplots',
          '--noresume', f'--cache_dir={cache}', *_RUN_ARGS.value]
  before = _code_digest(code)
  priming = _run(code, args + [f'--output_dir={out}_priming'])
  warm = _run(code, args + [f'--output_dir={out}'])
  if _code_digest(code) != before:
    raise RuntimeError(f'the library in {code} changed while `main` at '
                       f'{sessions} sessions ran: its warm run was not warm '
                       '(its caches are keyed by the code); run again '
                       'without editing the checkout')
  shape = run_files.SHAPE.findall(warm['log'])
  methods = int(shape[0][1])
  profile = json.loads((out / 'profile.json').read_text())
  device = profile['parts'].get(DEVICE_PART, {}).get('seconds', 0.0)
  host = warm['wall_s'] - device
  return {'sessions': sessions, 'methods': methods,
          'priming_wall_s': round(priming['wall_s'], 2),
          'wall_s': round(warm['wall_s'], 2),
          'profile_wall_s': profile['wall_s'],
          'device_s': round(device, 2), 'host_s': round(host, 2),
          'host_share': round(host / warm['wall_s'], 4),
          'host_us_per_session_method': round(
              1e6 * host / (sessions * methods), 1),
          'output_bytes': _bytes(out),
          'peak_rss_mib': round(warm['peak_rss_mib'], 1),
          'profile_s': {k: v['seconds'] for k, v in profile['parts'].items()}}


def table(results: dict) -> str:
  lines = ['| code | sessions | wall s | device s | host s | host share | '
           'host us / session-method | outputs MB | peak RSS MiB | '
           'priming s |', '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
  for label in ('baseline', 'now'):
    for r in results.get(label) or []:
      lines.append(
          f'| {label} | {r["sessions"]:,} | {r["wall_s"]:.1f} | '
          f'{r["device_s"]:.1f} | {r["host_s"]:.1f} | '
          f'{100 * r["host_share"]:.0f}% | '
          f'{r["host_us_per_session_method"]:,.0f} | '
          f'{r["output_bytes"] / 1e6:.1f} | {r["peak_rss_mib"]:,.0f} | '
          f'{r["priming_wall_s"]:.1f} |')
  for t in results['targets']:
    lines.append(f'- {t["target"]}: {t["figure"]} '
                 f'({"pass" if t["passed"] else "FAIL"})')
  for r in results.get('ratios', []):
    lines.append(f'- {r["sessions"]:,} sessions, baseline / now: wall '
                 f'{r["wall"]:.2f}x, host {r["host"]:.2f}x, device '
                 f'{r["device"]:.2f}x')
  return '\n'.join(lines)


def _commit() -> str | None:
  """This checkout's commit, marked ``+dirty`` when its tracked files
  differ from it (what "now" measured)."""
  def git(*args):
    return subprocess.run(['git', *args], cwd=ROOT, capture_output=True,
                          text=True, check=False).stdout.strip()
  head = git('rev-parse', 'HEAD')
  if not head:
    return None
  return head + ('+dirty' if git('status', '--porcelain',
                                 '--untracked-files=no') else '')


def _worktree(commit: str, where: pathlib.Path) -> pathlib.Path:
  subprocess.run(['git', 'worktree', 'add', '--detach', '-f', str(where),
                  commit], cwd=ROOT, check=True, capture_output=True)
  return where


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  sizes = sorted(int(s) for s in _SESSIONS.value)
  if not sizes or sizes[0] < 1:
    raise app.UsageError(f'--sessions: positive integers, got '
                         f'{_SESSIONS.value}')
  temporary = None
  if _WORK.value:
    work = pathlib.Path(_WORK.value).absolute()
    work.mkdir(parents=True, exist_ok=True)
  else:
    temporary = tempfile.TemporaryDirectory(prefix='bench_sweep_')
    work = pathlib.Path(temporary.name)
  base = None
  try:
    if _BASELINE.value:
      base = _worktree(_BASELINE.value, work / 'baseline_code')
    results = {'environment': bench_common.environment(),
               'commit': _commit(), 'baseline_commit': _BASELINE.value,
               'now': [],
               'baseline': [] if base else None}
    for s in sizes:
      cache = work / f'cache_{s}'
      print(f'{s:,} sessions: this checkout', flush=True)
      results['now'].append(measure(ROOT, s, cache, work / f'now_{s}'))
      print(json.dumps(results['now'][-1]), flush=True)
      if base:
        print(f'{s:,} sessions: baseline {_BASELINE.value}', flush=True)
        results['baseline'].append(measure(base, s, cache,
                                           work / f'baseline_{s}'))
        print(json.dumps(results['baseline'][-1]), flush=True)
    if base:
      results['ratios'] = [
          {'sessions': b['sessions'], 'wall': b['wall_s'] / n['wall_s'],
           'host': b['host_s'] / n['host_s'],
           'device': b['device_s'] / max(n['device_s'], 1e-9)}
          for b, n in zip(results['baseline'], results['now'])]
    results['targets'] = run_files.sweep_targets(results['now'],
                                                 results['baseline'])
  finally:
    if base is not None:
      subprocess.run(['git', 'worktree', 'remove', '--force', str(base)],
                     cwd=ROOT, check=False, capture_output=True)
    if temporary is not None:
      temporary.cleanup()
  path = pathlib.Path(_JSON.value)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(results, indent=2) + '\n')
  print(table(results))
  print(f'wrote {path}')


if __name__ == '__main__':
  cli.run(main)  # --help exits 0, as every entry point's
