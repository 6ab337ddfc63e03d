r"""How much of ReCoVR's result is reading: the same sessions read by
several readers, the upper bound on reading (``--reasoner=upper_bound``)
among them.

    python -m experiments.evaluate.reader_share \
        --runs=upper_bound=out/main_ub,grounded=out/main,rules=out/main_rules \
        --output_md=results/reader_share.md

Each ``label=directory`` is a finished run of the same sessions (checked)
under one reader. Per run: turn-5 R@1 of ``--methods`` with its 95%
session-bootstrap interval (``metrics.json``), then the claims traced to
the reader (``READER_CLAIMS``), each read with the paired session bootstrap
of ``experiments.evaluate.fidelity`` (``--resamples``, seed 0) over the
run's ReCoVR and UMIVR. The upper bound is the simulator's truth, an
oracle: its row bounds what a better reader could give, it is no method.
"""

import json
import pathlib

from absl import app
from absl import flags

from experiments.common import cli
from experiments.common import outputs
from recovr_jax.analysis import claims
from recovr_jax.analysis import paper_claims

# The paper's claims whose sign follows the reader (docs/results.md).
READER_CLAIMS = ('recovers_more_than_umivr', 'less_drift')

_RUNS = flags.DEFINE_list('runs', None, 'label=run directory, one per reader '
                          '(the same sessions).')
_METHODS = flags.DEFINE_list('methods', ['recovr', 'history_rewrite', 'umivr'],
                            'The methods whose turn-5 R@1 is listed (those '
                            'of each run that it holds).')
_RESAMPLES = flags.DEFINE_integer('resamples', 10_000, 'Bootstrap resamples '
                                  'of the claims.', lower_bound=1)


def _runs(items) -> dict:
  out = {}
  for item in items:
    label, sep, path = item.partition('=')
    if not sep or not label or not path:
      raise app.UsageError(f'--runs: {item!r} is not label=directory')
    if label in out:
      raise app.UsageError(f'--runs: the label {label!r} is given twice')
    d = pathlib.Path(path)
    for name in ('metrics.json', 'ranks.csv'):
      if not (d / name).is_file():
        raise app.UsageError(f'--runs: {d / name} does not exist (a '
                             'finished run of experiments.run?)')
    out[label] = d
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if not _RUNS.value:
    raise app.UsageError('--runs: give label=directory, one per reader')
  runs = _runs(_RUNS.value)
  wanted = [c for c in paper_claims.CLAIMS if c.key in READER_CLAIMS]
  lines = ['| reader | method | turn-5 R@1 (%) [95%] |', '|---|---|---:|']
  rows, sessions = [], None
  for label, d in runs.items():
    metrics = json.loads((d / 'metrics.json').read_text())
    for method in _METHODS.value:
      if method not in metrics:
        continue
      m = metrics[method]
      t = len(m['R@1']) - 1
      lo, hi = (m['intervals']['R@1'][k][t] for k in ('lower', 'upper'))
      lines.append(f'| {label} | {method} | {100 * m["R@1"][t]:.1f} '
                   f'[{100 * lo:.1f}, {100 * hi:.1f}] |')
    run = claims.load(d)
    if sessions is None:
      sessions = run.sessions
    elif list(run.sessions) != list(sessions):
      raise app.UsageError(f'--runs: {d} holds other sessions than the '
                           'first run')
    if not {'recovr', 'umivr'} <= set(run.ranks):
      raise app.UsageError(f'--runs: {d} lacks recovr or umivr (the claims '
                           'compare them)')
    ev = claims.Evidence({'main': {'main': run}}, _RESAMPLES.value, 0)
    for row in claims.evaluate(wanted, ev):
      rows.append((label, row))
  lines += ['', '| reader | claim | paired check, points [95%] | verdict |',
            '|---|---|---|---|']
  for label, row in rows:
    checks = '; '.join(
        f'{c["label"]}: {100 * c["value"]:+.1f} [{100 * c["lower"]:+.1f}, '
        f'{100 * c["upper"]:+.1f}]' for c in row['checks'])
    lines.append(f'| {label} | {row["key"]} | {checks} | {row["verdict"]} |')
  outputs.write_markdown('\n'.join(lines) + '\n')


if __name__ == '__main__':
  cli.run(main)
