r"""The reading benchmark: how well each backend's Intent Decomposer and
State Reflector read the simulated user (docs/definitions.md §10).

    python -m experiments.evaluate.eval_reading --backends=rules,grounded \
        --output_json=results/reading.json --output_md=results/reading.md

Requests are drawn as ``experiments.run`` draws them for ReCoVR (every run
flag applies; the default benchmark: captioner captions, the paper's user in
its own words), test split, the first --num_sessions queries (default 200),
once per --noise_rates value. Ground truth is the simulator's: the values an
utterance names, the values it changes and its label of the turn as sigma.
Columns: named values stated by the caption words or training phrasings
(``train``), by dev phrasings (``dev``), by test phrasings (``test``, on
benchmark v3) and all. The test and all columns are reported only with
--test_split: test numbers are computed once per change of a reader, by
the command in docs/reading.md, and committed; no choice is made on them.
Definitions: ``recovr_jax/analysis/reading_benchmark.py`` and docs/reading.md.
"""

import time

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.common import config_flags
from experiments.common import outputs
from experiments.common import run_flags
from recovr_jax.analysis import reading_benchmark
from recovr_jax import drivers
from recovr_jax.envs.world import world_source
from recovr_jax.reasoning import registry
from recovr_jax.run import assemble
from recovr_jax.run import run_config
from recovr_jax.run import runner

_BACKENDS = flags.DEFINE_list(
    'backends', ['rules', 'grounded'],
    f'Backends to evaluate; valid: {", ".join(registry.names())}.')
_NOISE = flags.DEFINE_list(
    'noise_rates', ['0', '0.1'],
    'User surface-noise rates, one evaluation each (in [0, 1]).')
_JSON = flags.DEFINE_string('output_json', 'results/reading.json',
                            'Where to write the report (JSON).')
_GROUNDED_OPTIONS = flags.DEFINE_string(
    'grounded_options', None,
    'A JSON object overriding the grounded reader\'s options '
    '(recovr_jax/envs/world/models/reader_fit.py GROUNDED_OPTIONS: related_depth, '
    'unrelated_penalty, abstain, max_span, template, agree, '
    'wordnet_prototypes, wordnet_glosses, lm_spans, lm_margin, lm_tuned, head_spans, head_min_prob), '
    'for grounded and '
    'grounded_smollm2: how the shipped options were chosen on dev '
    '(docs/reading.md).')
_TEST_SPLIT = flags.DEFINE_bool(
    'test_split', False,
    'Also report the test column (utterances naming a value in a test '
    'phrasing, benchmark v3) and all. Off: train and dev only, for '
    'development. Test numbers are computed once per change of a reader, '
    'by the command in docs/reading.md, and committed; no choice is made '
    'on them.')
_DEFAULT_SESSIONS = 200


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not _BACKENDS.value:
    raise app.UsageError('--backends: name at least one backend to read '
                         'with')
  try:
    registry.check_names(_BACKENDS.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  try:
    rates = [float(x) for x in _NOISE.value]
  except ValueError as e:
    raise app.UsageError(f'--noise_rates: expected numbers, got '
                         f'{",".join(_NOISE.value)}') from e
  if not rates:
    raise app.UsageError('--noise_rates: give at least one rate in [0, 1]')
  if any(not 0.0 <= r <= 1.0 for r in rates):
    raise app.UsageError(f'--noise_rates: each must be in [0, 1], got '
                         f'{",".join(_NOISE.value)}')
  if len(set(rates)) != len(rates):
    raise app.UsageError(f'--noise_rates lists a rate twice, got '
                         f'{",".join(_NOISE.value)}')
  options = None
  if _GROUNDED_OPTIONS.value is not None:
    import json  # pylint: disable=g-import-not-at-top
    try:
      options = json.loads(_GROUNDED_OPTIONS.value)
    except json.JSONDecodeError as e:
      raise app.UsageError(f'--grounded_options: not JSON ({e})') from e
    if not isinstance(options, dict):
      raise app.UsageError('--grounded_options: expected a JSON object, got '
                           f'{_GROUNDED_OPTIONS.value}')
  logging.set_verbosity(logging.WARNING)
  config = run_flags.config_from_flags()
  if not isinstance(config.data, world_source.WorldData):
    raise app.UsageError('eval_reading reads the embedded world\'s '
                         'simulated user: --data=world')
  source = run_config.source(config)

  def reasoner(backend):  # its settings from the reasoner flags
    return reading_benchmark.with_options(run_flags.reasoner_config(
        backend, config_flags.values(run_flags.LEAVES)), options)

  if not drivers.choose(config.simulation, source).STEPWISE:
    raise app.UsageError('eval_reading draws requests in the host loop: '
                         '--simulation=host')
  unread = [b for b in _BACKENDS.value if not registry.get(b).LEXICAL]
  if config.data.world.describe_layout and unread:
    # As a run refuses them: their readers know no layout words.
    raise app.UsageError(f'--describe_layout reads the layout with the '
                         f'lexical reasoners only: --backends='
                         f'{",".join(unread)} would be scored on layout '
                         'values its reader cannot know')
  num = (flags.FLAGS.num_sessions
         if not flags.FLAGS['num_sessions'].using_default_value
         else _DEFAULT_SESSIONS)
  if num is None or num < 1:
    raise app.UsageError(f'--num_sessions must be >= 1, got {num}')
  vocab = source.vocabulary(config.cache_dir)
  for backend in _BACKENDS.value:  # each backend's checks, before any load
    problems = registry.problems(reasoner(backend), vocab)
    if problems:
      raise app.UsageError(f'--backends={backend}: ' + '; '.join(problems))
  run_flags.use_compilation_cache(config)
  built = runner.build(config, source)
  requested, total = num, len(built.env.target)
  if num > total:  # recorded as run, as experiments.run records it
    print(f'--num_sessions={num}: the environment has {total} test '
          f'queries; running {total}', flush=True)
    num = total
  report = {}
  for backend in _BACKENDS.value:
    report[backend] = {}
    for rate in rates:
      start = time.time()
      scored = reading_benchmark.evaluate(assemble.assemble(
          config, built, reasoner(backend)),
                                rate, num)
      report[backend][str(rate)] = (scored if _TEST_SPLIT.value else
                                    reading_benchmark.without_test(scored))
      print(f'{backend} at noise {rate}: {time.time() - start:.0f}s',
            flush=True)
  outputs.write_markdown(reading_benchmark.table(report))
  outputs.write_json(_JSON.value, {
      'num_sessions': num, 'num_sessions_requested': requested,
      'benchmark': flags.FLAGS.benchmark, 'columns': (
          reading_benchmark.COLUMNS if _TEST_SPLIT.value else ('train', 'dev')),
      'user': str(config.data.user), 'grounded_options': options,
      'sigma_of_action': reading_benchmark.SIGMA_OF_ACTION, 'report': report})


if __name__ == '__main__':
  cli.run(main, (('Reading benchmark', ['backends', 'noise_rates',
                                        'test_split', 'grounded_options',
                                        'output_json']),) +
          run_flags.HELP_GROUPS,
          run_flags.HELP_DEFAULTS, own=1)
