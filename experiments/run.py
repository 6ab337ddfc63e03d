r"""The main job: ReCoVR, ablations and baselines under one protocol.

    python -m experiments.run --flagfile=experiments/flagfiles/quickstart

Writes to --output_dir: the resolved flags and environment, per-session
trajectories (JSONL) and ranks (CSV), per-turn metrics per method with 95%
bootstrap intervals (JSON and CSV), failure modes, the paired bootstrap of
recovr against --bootstrap_baseline, a Markdown report, tables.tex and plots
(PNG and PDF, when matplotlib is installed). Progress is checkpointed after
every batch; repeating the command resumes and gives identical results.
Outputs and metrics: README.md and docs/. The flags live by concern in
``source_flags``, ``protocol_flags``, ``reasoner_flags``, ``user_flags``
and ``running_flags``.
"""

import sys

from absl import app
from absl import flags
from absl import logging

from experiments import cli
from experiments import protocol_flags
from experiments import reasoner_flags
from experiments import running_flags
from experiments import source_flags
from experiments import user_flags
from recovr_jax.experiment import config as config_lib
from recovr_jax.experiment import runner
from recovr_jax.experiment import sweeps
from recovr_jax.methods import base as methods_base
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import asking
from recovr_jax.world import simulated_user

# --help: the flags by concern (tests/cli_test.py checks that every flag the
# run reads is in one group).
HELP_GROUPS = (*source_flags.HELP_GROUPS, protocol_flags.HELP_GROUP,
               reasoner_flags.HELP_GROUP, user_flags.HELP_GROUP,
               *running_flags.HELP_GROUPS)
# Defaults that come from the --benchmark preset, as --help shows them.
HELP_DEFAULTS = {
    name: 'the --benchmark preset\'s: ' + ', '.join(
        f'{b}: {config_lib.BENCHMARKS[b][name]}' for b in config_lib.BENCHMARKS)
    for name in ('renditions', 'captions', 'user_style', 'user_language')}
HELP_DEFAULTS['reasoner'] = ('grounded on --data=world, rules with '
                             '--describe_layout and on real data')
# Kept for the entry points built on the run.
use_compilation_cache = running_flags.use_compilation_cache


def run_config() -> config_lib.RunConfig:
  """The ``RunConfig`` of the flags (every flag is read here, once).

  Raises ``app.UsageError`` naming every problem found at once: each part
  (data source, loop, ask policy, settings, user) is built on its own, a
  part that fails is replaced by its default so that the rest is still
  checked, and then ``runner.validate`` checks the whole."""
  problems = []

  def part(build, default):
    try:
      return build()
    except ValueError as e:
      problems.extend(str(e).splitlines())
      return default

  data = part(source_flags.data_config, None)
  loop = part(protocol_flags.loop, ranking.LoopConfig())
  ask = part(protocol_flags.ask, asking.AskPolicy())
  settings = part(lambda: protocol_flags.settings(ask),
                  methods_base.Settings())
  user = part(lambda: user_flags.user(running_flags.user_draws()),
              simulated_user.UserConfig())
  fields = dict(
      methods=protocol_flags.method_names(), loop=loop, settings=settings,
      user=user, user_seed=user_flags.seed(), **reasoner_flags.fields(data),
      **running_flags.fields(), **source_flags.permissions(),
      flags_text=flags.FLAGS.flags_into_string())
  if data is not None:
    fields['data'] = data
  config = part(lambda: config_lib.RunConfig(**fields), None)
  if problems:
    if config is not None and data is not None:  # what the whole adds
      try:
        runner.validate(config, create=False)
      except runner.ConfigError as e:
        problems.extend(str(e).splitlines())
    raise app.UsageError('\n'.join(problems))
  return config


def main(argv):
  try:
    return _main(argv)
  except BaseException as e:  # pylint: disable=broad-except
    count, pid = running_flags.processes()
    if count == 1:
      raise
    # One process of several: say why and leave at once (JAX's shutdown
    # would wait minutes for the others); they stop at their next barrier
    # or when experiments.launch sees this exit.
    import os  # pylint: disable=g-import-not-at-top
    import traceback  # pylint: disable=g-import-not-at-top
    if isinstance(e, app.UsageError):
      sys.stderr.write(cli.error_lines(e))
    else:
      traceback.print_exc()
    sys.stderr.write(f'process {pid} of {count} stopped; the same command '
                     'resumes\n')
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)  # pylint: disable=protected-access


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  sweep = running_flags.sweep_settings()
  suite = running_flags.suite_parts()
  running_flags.start_processes()
  config = run_config()
  running_flags.use_compilation_cache(config)
  try:
    if suite is not None:
      sweeps.run_parts(config, suite)
    elif sweep:
      sweeps.sweep(config, sweep)
    else:
      runner.run(config)
  except runner.ConfigError as e:
    raise app.UsageError(str(e)) from e
  except runner.RunFailed as e:
    return f'FAILED: {e}'  # absl exits 1 and prints it


if __name__ == '__main__':
  cli.run(main, HELP_GROUPS, HELP_DEFAULTS)
