r"""Per-module quality of the reasoning backends on held-out world prompts.

    python -m experiments.evaluate.eval_reasoners --backends=rules,flax_lm,smollm2,smollm2_world

Requests come from simulated turns on the *test* split (captioner-style
captions, the user's own words; ``reasoner_training.sample_requests``, seed
offset 10,000 as in ``train_reasoner``). Per backend and module: first-pass
validity, exact match and field accuracy against the rules backend's reply,
and, where the world has a ground truth, precision against the session's
target attributes: share of the ``keep`` constraints the target has, of the
``avoid`` constraints it lacks, and of the attribute values named in
``search`` that it has (parsed with the world lexicon). Writes
``--output_json``.
"""

import json
import time

from absl import app
from absl import flags
import numpy as np

from experiments.common import cli
from experiments.common import outputs
from experiments.common import world_flags
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import reasoner_training
from recovr_jax.envs.world import world_source
from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import prompts
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import schemas

_BACKENDS = flags.DEFINE_list(
    'backends', ['rules', 'flax_lm', 'smollm2', 'smollm2_world'],
    f'Backends to evaluate; valid: {", ".join(registry.names())}.')
_NUM = flags.DEFINE_integer('eval_requests', 120, 'Held-out requests.',
                            lower_bound=1)
_SEED = flags.DEFINE_integer('eval_seed', 0, 'Seed of the requests.',
                             lower_bound=0)
_JSON = flags.DEFINE_string('eval_json', 'results/reasoners.json',
                            'Where to write the report.')
_WORDING = flags.DEFINE_enum('wording', '1',
                             [str(w) for w in prompts.WORDINGS],
                             'smollm2*: prompt wording.')


flags.adopt_module_key_flags(world_flags)  # the world's flags in --helpshort

def _truth_scores(module, obj, target):
  out = {}
  if module == 'reflect':
    for key, want in (('keep', True), ('avoid', False)):
      parsed = [lexicon.parse_constraint(c) for c in obj[key]]
      parsed = [p for p in parsed if p is not None]
      if parsed:
        out[f'{key}_precision'] = np.mean(
            [(target[a] == v) == want for a, v in parsed])
  if module in ('intent', 't2v_init'):
    named = lexicon.parse(obj['search'])
    if named:
      out['search_precision'] = np.mean(
          [target[a] == v for a, v in named.items()])
  return out


def evaluate(backend, pairs, truths, reference, world):
  # Its wording, and its own batch of 16, where the backend reads them.
  config = registry.config_of(backend, like=chat_lm.ChatConfig(
      wording=int(_WORDING.value), batch_size=16))
  reasoner = registry.make(config, world_source.world_vocabulary(world.config))
  report = {}
  start = time.time()
  for module in schemas.MODULES:
    idx = [i for i, (m, _) in enumerate(pairs) if m == module]
    if not idx:  # a small --eval_requests may draw none of a module
      report[module] = {'requests': 0}
      continue
    out = reasoner.call(module, [pairs[i][1] for i in idx])
    first = out.first_pass or [True] * len(idx)
    exact, fields, truth = 0, {}, {}
    for i, obj, ok in zip(idx, out.objects, first):
      exact += obj == reference[i]
      for key in reference[i]:
        fields[key] = fields.get(key, 0) + (obj[key] == reference[i][key])
      for key, v in _truth_scores(module, obj, truths[i]).items():
        truth.setdefault(key, []).append(v)
    report[module] = {
        'requests': len(idx),
        'first_pass_valid': float(np.mean(first)),
        'exact_vs_rules': exact / len(idx),
        'field_vs_rules': {k: v / len(idx) for k, v in fields.items()},
        'truth_precision': {k: float(np.mean(v)) for k, v in truth.items()},
        'truth_scored': {k: len(v) for k, v in truth.items()}}
  report['seconds'] = round(time.time() - start, 1)
  if hasattr(reasoner, 'speed'):
    report['speed'] = reasoner.speed()
  return report


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  world_flags.require_seven_attributes(
      'experiments.evaluate.eval_reasoners',
      'its requests are drawn from the seven-attribute world (eval_reading '
      'reads a layout world with the rules)')
  if not _BACKENDS.value:
    raise app.UsageError('--backends: name at least one backend to '
                         'evaluate')
  try:
    registry.check_names(_BACKENDS.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  world = generator.make_world(world_flags.world_config())
  pairs, truths = reasoner_training.sample_requests(
      world, np.flatnonzero(world.is_test), _NUM.value,
      _SEED.value + 10_000, with_targets=True)
  pairs = [(m, reasoner_training.preprocess(r)) for m, r in pairs]
  reference = [json.loads(t) for t in reasoner_training.targets_of(pairs)]
  results = {}
  for backend in _BACKENDS.value:
    print(f'evaluating {backend} on {len(pairs)} requests ...', flush=True)
    results[backend] = evaluate(backend, pairs, truths, reference, world)
    print(json.dumps(results[backend]), flush=True)
  print('| backend | module | valid | exact vs rules | fields vs rules | '
        'precision vs target |')
  print('|---|---|---:|---:|---|---|')
  for backend, r in results.items():
    for module in schemas.MODULES:
      m = r[module]
      if not m['requests']:
        print(f'| {backend} | {module} | no request drawn | | | |')
        continue
      f = ', '.join(f'{k} {100 * v:.0f}' for k, v in m['field_vs_rules'].items())
      t = ', '.join(f'{k} {100 * v:.0f}' for k, v in
                    m['truth_precision'].items()) or '-'
      print(f'| {backend} | {module} | {100 * m["first_pass_valid"]:.0f} | '
            f'{100 * m["exact_vs_rules"]:.0f} | {f} | {t} |')
  outputs.write_json(_JSON.value, {'eval_requests': _NUM.value,
                                   'wording': int(_WORDING.value),
                                   'results': results})


if __name__ == '__main__':
  cli.run(main)
