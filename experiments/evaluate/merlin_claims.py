r"""MERLIN's own claims on the text-start runs, each with its 95% interval
and a verdict (``recovr_jax.analysis.merlin_claims``).

    python -m experiments.run --flagfile=experiments/flagfiles/text_start
    python -m experiments.evaluate.merlin_claims --runs_dir=out/text_start \
        --output_md=results/merlin_claims.md

Reads ``<runs_dir>/merlin_alpha=0.8`` (MERLIN's alpha) and, when present,
``<runs_dir>/merlin_alpha=0.2`` (its sec. 4.4), the same sessions, and
prints the verdicts as ``experiments.evaluate.fidelity`` does.
"""

import pathlib

from absl import app
from absl import flags

from experiments.common import cli
from experiments.common import outputs
from recovr_jax.analysis import claims
from recovr_jax.analysis import merlin_claims

_RUNS = flags.DEFINE_string(
    'runs_dir', 'out/text_start',
    'The directory of experiments/flagfiles/text_start\'s sweep.')
_RESAMPLES = flags.DEFINE_integer('claims_resamples', 10_000,
                                  'Session resamples (>= 1).')
_JSON = flags.DEFINE_string('output_json', None,
                            'Also write every row and check (JSON) here.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _RESAMPLES.value < 1:
    raise app.UsageError(f'--claims_resamples must be >= 1, got '
                         f'{_RESAMPLES.value}')
  root = pathlib.Path(_RUNS.value)
  main_dir, low = root / 'merlin_alpha=0.8', root / 'merlin_alpha=0.2'
  if not main_dir.is_dir():
    raise app.UsageError(f'--runs_dir: {main_dir} does not exist; run '
                         'experiments.run --flagfile=experiments/flagfiles/'
                         f'text_start --output_dir={root} first')
  try:
    runs = {'main': claims.load(main_dir)}
    if low.is_dir():
      runs[merlin_claims.LOW_ALPHA] = claims.load(low)
    evidence = claims.Evidence({'main': runs}, _RESAMPLES.value)
    rows = claims.evaluate(merlin_claims.CLAIMS, evidence)
  except (FileNotFoundError, ValueError) as e:
    raise app.UsageError(f'{root}: {e}') from e
  text = claims.markdown({'text start (I-TVR)': rows},
                             title="MERLIN's claims in its own setting")
  outputs.write_markdown(text)
  if _JSON.value:
    outputs.write_json(_JSON.value, {
        'bootstrap_resamples': _RESAMPLES.value,
        'summary': claims.summary(rows), 'rows': rows})


if __name__ == '__main__':
  cli.run(main)
