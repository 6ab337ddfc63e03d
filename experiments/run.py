r"""The main job: ReCoVR, ablations and baselines under one protocol.

    python -m experiments.run --flagfile=experiments/flagfiles/quickstart

Writes to --output_dir: the resolved flags and environment, per-session
trajectories (JSONL) and ranks (CSV), per-turn metrics per method with 95%
bootstrap intervals (JSON and CSV), failure modes, the paired bootstrap of
recovr against --bootstrap_baseline, a Markdown report, tables.tex and plots
(PNG and PDF, when matplotlib is installed). Progress is checkpointed after
every batch; repeating the command resumes and gives identical results.
Outputs and metrics: README.md and docs/. The flags are derived from
``RunConfig``'s fields (``run_flags``).
"""

import sys

from experiments.common import early

if __name__ == '__main__':
  # The help and a misspelt flag, answered before jax is imported (early.py).
  early.answer(sys.argv)

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging  # pylint: disable=g-import-not-at-top,wrong-import-position

from experiments.common import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from experiments.common import run_flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from recovr_jax.run import runner  # pylint: disable=g-import-not-at-top,wrong-import-position
from recovr_jax.run import validation  # pylint: disable=g-import-not-at-top,wrong-import-position
from recovr_jax.run import sweeps  # pylint: disable=g-import-not-at-top,wrong-import-position



def main(argv):
  try:
    return _main(argv)
  except BaseException as e:  # pylint: disable=broad-except
    count, pid = run_flags.processes()
    if count == 1:
      raise
    # One process of several: say why and leave at once (JAX's shutdown
    # would wait minutes for the others); they stop at their next barrier
    # or when experiments.launch sees this exit.
    import traceback  # pylint: disable=g-import-not-at-top
    if isinstance(e, app.UsageError):
      sys.stderr.write(cli.error_lines(e))
    else:
      traceback.print_exc()
    sys.stderr.write(f'process {pid} of {count} stopped; the same command '
                     'resumes\n')
    cli.exit_now(1)


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  sweep = run_flags.sweep_settings()
  suite = run_flags.suite_parts()
  run_flags.start_processes()
  config = run_flags.config_from_flags()
  run_flags.check_processes_agree(config)
  run_flags.use_compilation_cache(config)
  try:
    if suite is not None:
      sweeps.run_parts(config, suite)
    elif sweep:
      sweeps.sweep(config, sweep)
    else:
      runner.run(config)
  except validation.ConfigError as e:
    raise app.UsageError(str(e)) from e
  except validation.RunFailed as e:
    return f'FAILED: {e}'  # absl exits 1 and prints it


if __name__ == '__main__':
  # A run of one process ends once its outputs are written (cli.exit_now):
  # several wait on JAX's shutdown together.
  cli.run(main, run_flags.HELP_GROUPS, run_flags.HELP_DEFAULTS,
          quick_exit=lambda: run_flags.processes()[0] == 1)
