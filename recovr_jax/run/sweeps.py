"""Sweeps: one factor at a time, each value a run of its own directory."""

import dataclasses
import os
import pathlib

from recovr_jax import readers
from recovr_jax.run import run_config
from recovr_jax.run import runner
from recovr_jax.run import validation


def sweep(config: run_config.RunConfig, settings) -> str:
  """Runs every ``(name, [values])`` of ``settings`` one factor at a time,
  each in ``output_dir/NAME=V``; writes and returns ``sweep.md``. Values are
  ``(text, parsed)`` pairs. Every setting is checked before the first run
  (what the driver cannot run of the sweep's own config is named first,
  without a setting). Members share a build where what it reads is the
  same (``_member``): a sweep of the user's settings builds once."""
  source = run_config.source(config)
  validation.check_driver(config, source)
  configs = []
  for name, values in settings:
    for text, value in values:
      try:
        c = run_config.with_setting(config, name, value)
        c = dataclasses.replace(
            c, output_dir=os.path.join(config.output_dir, f'{name}={text}'),
            flags_text=config.flags_text + f'# sweep setting: --{name}={text}\n')
        validation.check_driver(c, source)
      except ValueError as e:
        validation.fail(f'--sweep {name}={text}: {e}')
      configs.append((name, text, c))
  # The sweep's own directory, once its settings are good.
  validation.validate(config, source)
  builds, rows, failed = {}, [], []
  for name, text, c in configs:
    print(f'== sweep {name}={text}', flush=True)
    try:
      rows.append((name, text, runner.run(c, _member(builds, c))))
    except validation.RunFailed as e:  # its outputs are written; the sweep goes on
      failed.append(f'{name}={text}: {e}')
      rows.append((name, text, readers.read_json(
          pathlib.Path(c.output_dir) / 'metrics.json', 'metrics file')))
  if config.process_id != 0:  # process 0 writes the sweep's table
    return None
  num_turns = len(next(iter(rows[0][2].values()))['R@1'])
  # Ask scores (run/ask_scores.py) where the source knows the truth.
  asks = any('asking' in m for _, _, pm in rows for m in pm.values())
  ask_cols = (' | Ask-F1 | what-accuracy | questions / session'
              if asks else '')
  lines = ['# Sweep (one factor at a time)', '',
           '| setting | method | ' + ' | '.join(
               f'R@1 T{t}' for t in range(num_turns)) +
           f' | gain T0->T{num_turns - 1} | BRI last{ask_cols} |',
           '|---|---|' + '---:|' * (num_turns + 2 + 3 * asks)]
  pct = lambda x: '-' if x is None else f'{100 * x:.1f}'
  for name, text, per_method in rows:
    for method, m in per_method.items():
      r1 = m['R@1']
      ask = ''
      if asks:
        a = m.get('asking')
        ask = (f" | {pct(a['ask_f1'])} | {pct(a['what_accuracy'])} | "
               f"{a['questions_per_session']:.2f}") if a else ' | - | - | -'
      lines.append(f'| {name}={text} | {method} | ' + ' | '.join(
          f'{100 * v:.1f}' for v in r1) +
                   f" | {100 * (r1[-1] - r1[0]):+.1f} | {m['BRI'][-1]:.3f}"
                   f'{ask} |')
  summary = '\n'.join(lines) + '\n'
  pathlib.Path(config.output_dir).mkdir(parents=True, exist_ok=True)
  (pathlib.Path(config.output_dir) / 'sweep.md').write_text(summary)
  print(summary)
  if failed:
    raise validation.RunFailed('; '.join(failed))
  return summary


def _member(builds: dict, config: run_config.RunConfig):
  """A member's build: its own data source (its user settings are in its
  data config, ``RunConfig.data.user``) over the build of what that build
  reads (``Source.build_reads``), made once and kept in ``builds``."""
  source = run_config.source(config)
  key = source.build_reads()
  if key not in builds:
    builds[key] = runner.build(config, source)
  return dataclasses.replace(builds[key], source=source)


def run_parts(config: run_config.RunConfig, parts) -> None:
  """Runs a suite: each ``(subdirectory, methods, [(name, text, value)])``
  of ``parts`` in ``output_dir/subdirectory`` with those methods and
  sweepable settings (values parsed). Every part is checked before the
  first runs; the parts share builds as a sweep's members do. A part that
  fails still writes its outputs and the suite goes on;
  ``RunFailed`` at the end names the failed parts."""
  source, configs = run_config.source(config), []
  for sub, methods, settings in parts:
    c = dataclasses.replace(
        config, methods=tuple(methods), bootstrap_also=(),
        output_dir=os.path.join(config.output_dir, sub),
        flags_text=config.flags_text + f'# suite part: {sub}\n')
    try:
      for name, _, value in settings:
        c = run_config.with_setting(c, name, value)
      validation.validate(c, source, create=False)
    except (ValueError, validation.ConfigError) as e:
      validation.fail(f'suite part {sub}: {e}')
    configs.append((sub, c))
  validation.validate(config, source)
  builds, failed = {}, []
  for i, (sub, c) in enumerate(configs):
    print(f'== part {i + 1} of {len(configs)}: {sub} '
          f'({", ".join(c.methods)})', flush=True)
    try:
      runner.run(c, _member(builds, c))
    except validation.RunFailed as e:
      failed.append(f'{sub}: {e}')
  if failed:
    raise validation.RunFailed('; '.join(failed))
