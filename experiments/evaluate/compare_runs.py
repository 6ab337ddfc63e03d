r"""Compares one method across runs on the same sessions (paired bootstrap).

    python -m experiments.evaluate.compare_runs --runs=out/lm_rules,out/lm_smollm2 \
        --method=recovr --output_md=out/compare.md

Reads each run's ``trajectories.jsonl``; R@1 per turn is whether the shown
top-1 is the target. The first run is the reference: every other run's
per-turn R@1 difference to it gets a paired session bootstrap (10,000
resamples, 95% percentile interval). Runs must hold the same sessions with
the same targets (checked). Also prints each run's ``reasoner_speed.json``.
"""

import pathlib

from absl import app
from absl import flags
import jax
import numpy as np

from experiments.common import cli
from experiments.common import outputs
from recovr_jax import readers
from recovr_jax import trajectory_files
from recovr_jax.core import resampling

_RUNS = flags.DEFINE_list('runs', None, 'Run directories; the first is the '
                          'reference.')
_LABELS = flags.DEFINE_list('labels', None, 'Row labels (default: the '
                            'directory names).')
_METHOD = flags.DEFINE_string('method', 'recovr', 'The method to compare.')
_REF_METHOD = flags.DEFINE_string(
    'first_method', None, "The first run's method (default: --method), "
    'e.g. --runs=out/main,out/main --first_method=umivr_rankcap for '
    'recovr against a baseline of the same run.')
_RESAMPLES = flags.DEFINE_integer('resamples', 10_000, 'Bootstrap resamples.')


def hits(run_dir: pathlib.Path, method: str):
  """``(sessions, targets, [S, T+1] R@1 hits)`` of ``method`` in a run."""
  try:
    path = trajectory_files.path(run_dir)
    readers.require_finished(run_dir, (path.name,))
    records = trajectory_files.read(run_dir)
  except (OSError, ValueError) as e:
    raise app.UsageError(f'--runs: {e}') from e
  rows = []
  for n, d in enumerate(records, 1):
    if not (isinstance(d, dict) and {'method', 'session', 'target', 'turns'}
            <= set(d) and all(isinstance(t, dict) and t.get('top10')
                              for t in d['turns'])):
      raise app.UsageError(f'{path}, line {n}: not a session record '
                           '(method, session, target and turns with their '
                           'top10 lists); not a run of experiments.run?')
    if d['method'] == method:
      if d.get('error'):
        raise app.UsageError(f'{path} line {n}: session {d["session"]} '
                             f'raised ({d["error"]}); not comparable')
      rows.append((d['session'], d['target'],
                   [t['top10'][0] == d['target'] for t in d['turns']]))
  if not rows:
    raise app.UsageError(f'{path}: no sessions of method {method!r}')
  rows.sort()
  return ([r[0] for r in rows], [r[1] for r in rows],
          np.asarray([r[2] for r in rows], np.float32))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if _RESAMPLES.value < 1:
    raise app.UsageError(f'--resamples must be >= 1, got {_RESAMPLES.value}')
  if not _RUNS.value or len(_RUNS.value) < 2:
    raise app.UsageError('--runs needs at least two run directories')
  dirs = [pathlib.Path(r) for r in _RUNS.value]
  ref_method = _REF_METHOD.value or _METHOD.value
  run_methods = [ref_method] + [_METHOD.value] * (len(dirs) - 1)
  pairs = [(d.resolve(), m) for d, m in zip(dirs, run_methods)]
  if len(set(pairs)) != len(pairs):
    raise app.UsageError('--runs lists a run twice with the same method '
                         '(its paired difference is 0); give --first_method '
                         'to compare two methods of one run')
  labels = _LABELS.value or [d.name for d in dirs]
  if not _LABELS.value and len(set(labels)) != len(labels):
    labels = [f'{d.name} ({m})' for d, m in zip(dirs, run_methods)]
  if len(labels) != len(dirs):
    raise app.UsageError('--labels needs one label per run')
  if len(set(labels)) != len(labels):
    raise app.UsageError(f'two runs share a label ({",".join(labels)}); '
                         'name them apart with --labels')
  loaded = [hits(d, ref_method if i == 0 else _METHOD.value)
            for i, d in enumerate(dirs)]
  sessions, targets, ref = loaded[0]
  for d, (s, t, _) in zip(dirs[1:], loaded[1:]):
    if s != sessions or t != targets:
      raise app.UsageError(f'--runs: {d} holds other sessions or targets '
                           f'than {dirs[0]}')
  turns = ref.shape[1]
  head = ' | '.join(f'T{t}' for t in range(turns))
  title = (_METHOD.value if ref_method == _METHOD.value else
           f'{_METHOD.value} (first run: {ref_method})')
  lines = [f'R@1 (%) per turn of {title}, {len(sessions)} sessions',
           '', f'| run | {head} | s/turn | decoded tokens/s |',
           '|' + '|'.join(['---'] + ['---:'] * (turns + 2)) + '|']
  for i, (label, d, (_, _, h)) in enumerate(zip(labels, dirs, loaded)):
    speed_path = d / 'reasoner_speed.json'
    speed = (readers.read_json(speed_path).get(
        ref_method if i == 0 else _METHOD.value)
             if speed_path.is_file() else None)
    cells = ' | '.join(f'{100 * v:.1f}' for v in h.mean(0))
    extra = (f'{speed["seconds_per_turn"]:.2f} | '
             f'{speed["decoded_tokens_per_s"]:.1f}') if speed else '- | -'
    lines.append(f'| {label} | {cells} | {extra} |')
  lines += ['', f'Paired bootstrap of R@1 minus {labels[0]} (points, 95% '
            'interval)', '', f'| run | {head} |',
            '|' + '|'.join(['---'] + ['---:'] * turns) + '|']
  for label, (_, _, h) in zip(labels[1:], loaded[1:]):
    b = resampling.paired_bootstrap(h, ref, _RESAMPLES.value, jax.random.key(0))
    lines.append(f'| {label} | ' + ' | '.join(
        f'{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]'
        for m, lo, hi in zip(np.asarray(b.mean), np.asarray(b.lower),
                             np.asarray(b.upper))) + ' |')
  outputs.write_markdown('\n'.join(lines) + '\n')


if __name__ == '__main__':
  cli.run(main)
