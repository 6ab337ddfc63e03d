r"""Table 4 from the study's logs: human versus simulated feedback.

    python -m experiments.study_report --flagfile=experiments/flagfiles/study

reads ``<output_dir>/logs/*.jsonl`` (``experiments/study.py``), runs the
simulated user (the runner's, from the same flags) with the study's method
and with --reference_method (IVR) on the same finished instances and the
same number of turns, and writes ``<output_dir>/report/``: ``table4.md``,
``table4.json`` (R@1 per turn with 95% bootstrap intervals, paired
differences, feedback lengths, system time per turn) and the human and
simulated trajectories in the runner's JSONL format.
"""

import dataclasses
import json
import pathlib

from absl import app
from absl import flags
from absl import logging
import numpy as np

from experiments.common import cli
from experiments.common import run_flags
from experiments import study  # pylint: disable=unused-import  (its flags)
from recovr_jax import methods
from recovr_jax.run import assemble
from recovr_jax.run import integrity
from recovr_jax.run import reporting
from recovr_jax.run import run_config
from recovr_jax.run import runner
from recovr_jax.study import report

_SIMULATED = flags.DEFINE_bool(
    'simulated', True, 'Run the simulated user on the same instances (off: '
    'the human column only, no models loaded).')
_REFERENCE = flags.DEFINE_string(
    'reference_method', 'ivr', 'The baseline shown with simulated feedback '
    '(paper: IVR); empty: none.')


def simulate(config, method_names, sessions, num_turns, built=None):
  """``{method: BatchResult}`` of the runner's simulated user on
  ``sessions`` (the study's driver, a turn at a time; the run's own seeds
  per session)."""
  run_ = assemble.assemble(config, built if built is not None else
                           runner.build(config, run_config.source(config)))
  loop = dataclasses.replace(run_.loop, num_turns=num_turns)
  out = {}
  for name in method_names:
    print(f'simulated user x {name} on {len(sessions)} instances', flush=True)
    errors = {}
    out[name] = run_.driver.run_batch(run_, run_.method(name),
                                      np.asarray(sessions), loop,
                                      f'the study\'s {name}', errors)
    if errors:
      raise RuntimeError(f'the simulated user x {name}: {len(errors)} '
                         f'instance(s) raised: {errors}')
  return out


def write_report(config, runs: report.HumanRuns, simulated: dict,
                 out: pathlib.Path) -> dict:
  """Writes the report files and returns ``table4.json``'s content."""
  method = runs.header['method']
  label = f'{method}, {runs.header.get("participants_are", "human")}'
  columns = {label: runs.displayed}
  texts = {label: report.human_feedback(runs)}
  traj = []
  for name, result in simulated.items():
    sim = f'{name}, simulated'
    columns[sim] = result.displayed[:, :, :report.LIST]
    texts[sim] = [rec['feedback'] for recs in result.records
                    for rec in recs[1:] if rec['action'] != 'stopped']
    for i, s in enumerate(runs.sessions):
      traj.append({'method': name, 'session': int(s),
                   'target': int(runs.targets[i]),
                   'turns': [dict(rec, top10=result.displayed[
                       i, t, :10].tolist())
                             for t, rec in enumerate(result.records[i])]})
  result = report.table(columns, runs.targets,
                            config.bootstrap_resamples, config.seed)
  stats = {'lengths': {n: report.lengths(t) for n, t in texts.items()},
           'waits': report.waits(runs), 'unfinished': runs.unfinished,
           'errors': runs.errors, 'damaged_logs': list(runs.damaged)}
  content = dict(result, instances=len(runs.rows), **stats,
                 study=runs.header)
  out.mkdir(parents=True, exist_ok=True)
  (out / 'table4.json').write_text(reporting.dumps(content))
  text = report.markdown(result, len(runs.rows), stats)
  if runs.damaged:
    text += ('\n**Left out** (damaged logs; the study recovers them up to '
             'their last good line when it next starts):\n' + ''.join(
                 f'* {d}\n' for d in runs.damaged))
  (out / 'table4.md').write_text(text)
  with (out / 'trajectories_human.jsonl').open('w') as f:
    for row in report.trajectories(runs):
      f.write(json.dumps(row, sort_keys=True) + '\n')
  with (out / 'trajectories_simulated.jsonl').open('w') as f:
    for row in traj:
      f.write(json.dumps(row, sort_keys=True) + '\n')
  print(text)
  print(f'wrote {out}')
  return content


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  config = study.config_from_flags()
  root = pathlib.Path(config.output_dir).absolute()
  try:
    runs = report.load(root / 'logs')
  except (FileNotFoundError, ValueError) as e:
    raise app.UsageError(str(e)) from e
  if not runs.rows:
    raise app.UsageError(f'{root / "logs"}: no finished instance yet '
                         f'({runs.unfinished} unfinished)')
  names = []
  if _SIMULATED.value:
    names = [runs.header['method']]
    if _REFERENCE.value and _REFERENCE.value not in names:
      names.append(_REFERENCE.value)
    unknown = [n for n in names if n not in methods.REGISTRY]
    if unknown:
      raise app.UsageError(f'--reference_method {unknown[0]!r} is not a '
                           f'method; valid: {", ".join(methods.names())}')
    identity = integrity.resolved_config(
        config, run_config.source(config))['identity']
    if identity != runs.header['identity']:
      raise app.UsageError(
          'the flags describe another environment or loop than the one the '
          f'study in {root / "logs"} ran under (identity {identity} vs '
          f'{runs.header["identity"]}); give the study\'s flagfile')
    run_flags.use_compilation_cache(config)
  simulated = simulate(config, names, runs.sessions,
                       runs.header['num_turns']) if names else {}
  write_report(config, runs, simulated, root / 'report')


if __name__ == '__main__':
  cli.run(main, (('Study report', ['simulated', 'reference_method']),) +
          run_flags.HELP_GROUPS, run_flags.HELP_DEFAULTS, own=1)
