"""The paper's claims, each with its 95% interval and a verdict.

  for s in 1.0 0.5 0.0; do
    python -m experiments.run --flagfile=experiments/flagfiles/fidelity \\
        --scene_shared=$s --output_dir=out/fidelity/scene_shared=$s
  done
  python -m experiments.run --flagfile=experiments/flagfiles/fidelity \\
      --describe_layout --output_dir=out/fidelity/describe_layout
  python -m experiments.evaluate.fidelity --output_md=fidelity.md \\
      --output_json=fidelity.json

Every checkable claim of the paper's text (``recovr_jax.run.
paper_claims``: the sentence, where it stands, the paper's number) is read
off each family member's runs as paired comparisons on the same sessions:
reproduced, contradicted, inconclusive (its interval holds the boundary),
untestable here (with the reason) or not run (its runs are missing from the
directory). A member directory holds ``main/``, ``stagnation/``,
``degraded/<setting>/`` and ``sensitivity/<setting>/`` as
``experiments.run --suite=fidelity`` writes them; ``main/`` is required.
"""

import json
import pathlib

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.common import outputs
from recovr_jax.analysis import claims
from recovr_jax.analysis import paper_claims

_DIRS = flags.DEFINE_list(
    'fidelity_dirs',
    [f'out/fidelity/scene_shared={s}' for s in ('1.0', '0.5', '0.0')] + [
        'out/fidelity/describe_layout'],
    'Family members: each a directory written by experiments.run '
    '--suite=fidelity, or the .npz --save_sessions_dir wrote of one (the '
    'setting is named by the directory or file).')
_RESAMPLES = flags.DEFINE_integer(
    'fidelity_resamples', 10_000,
    'Session resamples per run group (the same for every method and setting '
    'of the group).')
_SEED = flags.DEFINE_integer('fidelity_seed', 0,
                             'Seed of the resampled sessions.', lower_bound=0)
_SAVE = flags.DEFINE_string(
    'save_sessions_dir', None,
    'Also write each member\'s per-session outcomes (what the claims read: '
    'target ranks, top-1 codes, rank-cap firing; with the runs\' resolved '
    'configs) to DIR/<member>.npz, which --fidelity_dirs reads back.')
_JSON = flags.DEFINE_string('output_json', None,
                            'Also write every row and check (JSON) here.')


def groups_of(member: pathlib.Path) -> tuple[dict, dict]:
  """``(groups, meta)`` of a family member: a directory written by
  ``experiments.run --suite=fidelity``, or the ``.npz`` that
  ``--save_sessions_dir`` wrote of one (``claims.save_groups``)."""
  if member.suffix == '.npz':
    return claims.load_groups(member)
  if not (member / 'main').is_dir():
    raise app.UsageError(f'{member / "main"} does not exist: run '
                         'experiments.run --flagfile=experiments/flagfiles/'
                         f'fidelity --output_dir={member} first')
  main = {name: claims.load(member / name)
          for name in paper_claims.MAIN_RUNS if (member / name).is_dir()}
  groups = {'main': main}
  for group in ('degraded', 'sensitivity'):
    if (member / group).is_dir():
      groups[group] = {p.name: claims.load(p)
                       for p in sorted((member / group).iterdir())
                       if p.is_dir()}
  meta = {}
  for config in sorted(member.glob('**/resolved_config.json')):
    meta[str(config.parent.relative_to(member))] = json.loads(
        config.read_text())
  return groups, {'member': member.name, 'resolved_configs': meta}


def evidence(groups: dict, num_resamples: int,
             seed: int) -> tuple[claims.Evidence, bool]:
  """The ``Evidence`` of a member's groups, and whether it holds the
  paper's reading of the no-reflection ablation (``stagnation``)."""
  if 'main' not in groups.get('main', {}):
    raise ValueError('no main run (main/)')
  stagnation = 'stagnation' in groups['main']
  return claims.Evidence(groups, num_resamples, seed), stagnation


# The benchmark a member's user language belongs to (docs/benchmark.md).
_BENCHMARK_OF_LANGUAGE = {'lexicon': 'v1', 'own': 'v2', 'own_v3': 'v3'}


def code_of(config: dict) -> str:
  """The code a run came from, as its ``resolved_config.json`` records it:
  the commit's first 10 hex digits, ``+dirty`` (with the changes' digest's
  first 8 where recorded) when the tree had uncommitted changes;
  ``unknown`` where nothing is recorded."""
  env = config.get('environment') or {}
  commit = env.get('git_commit')
  if not commit:
    return (f'code {env["code_sha256"][:10]}' if env.get('code_sha256')
            else 'unknown')
  label = commit[:10]
  if env.get('git_dirty') or env.get('git_diff_sha256'):
    diff = env.get('git_diff_sha256')
    label += f'+dirty:{diff[:8]}' if diff else '+dirty'
  return label


def code_warning(setups: dict) -> str | None:
  """A sentence naming the members whose runs come from more than one code
  (commit, or uncommitted changes), or that differ from each other; None
  when every run of every member comes from the same code."""
  codes = {name: s['code'] for name, s in setups.items()}
  every = {c for cs in codes.values() for c in cs}
  if len(every) <= 1:
    return None
  mixed = [f'{name} ({len(cs)}: {", ".join(cs)})'
           for name, cs in codes.items() if len(cs) > 1]
  return ('Warning: the members come from different code (' +
          ', '.join(f'{n}: {", ".join(cs)}' for n, cs in codes.items()
                    if len(cs) == 1) +
          (('; runs of one member from several: ' + '; '.join(mixed))
           if mixed else '') +
          '): a difference between members, or between the runs a claim '
          'pairs, may be the code\'s. Rerun the members from one commit.')


def setup_of(meta: dict) -> dict:
  """What a member ran, from its main run's ``resolved_config.json``: the
  reader (``--reasoner``), the benchmark version (by the user's language),
  the sessions, the scene sharing and whether the layout is described;
  and the code of each of its runs (``code_of``, sorted)."""
  config = meta.get('resolved_configs', {}).get('main')
  if config is None:
    raise ValueError('no resolved_config.json of its main run to say what '
                     'it ran')
  try:
    world = config['data'].get('world') or {}
    # The user's config: in the data source's (an older run's: the run's).
    language = (config['data'].get('user') or config['user'])['language']
    reader, sessions = config['reasoner'], config['num_sessions']
    if isinstance(reader, dict):  # the backend's config (its name first)
      reader = reader['name']
  except (KeyError, AttributeError, TypeError) as e:
    raise ValueError(f'its main run\'s resolved_config.json lacks {e} (a '
                     'run of an older version?)') from e
  codes = sorted({code_of(c) for c in meta['resolved_configs'].values()})
  return {'reader': reader, 'code': codes,
          'benchmark': _BENCHMARK_OF_LANGUAGE.get(language, language),
          'sessions': sessions,
          'scene_shared': world.get('scene_shared'),
          'describe_layout': world.get('describe_layout')}


def not_run(setup: dict) -> dict:
  """The claims a member does not run, with why: ``reasoner_swapped``
  where the reader it swaps to is the member's own (its run restates the
  main run)."""
  swapped = paper_claims.REASONER_RUN.split('=', 1)[1]
  if setup.get('reader') == swapped:
    return {'reasoner_swapped': (
        f'the reader it swaps to ({swapped}) is this member\'s own reader: '
        'its run restates the main run')}
  return {}


def markdown(results: dict, setups: dict | None = None) -> str:
  """``results``: member -> rows (``claims.markdown``), after a table of
  what each member ran (``setups``: member -> ``setup_of``)."""
  if not setups:
    return claims.markdown(results)
  lines = ['What each member ran (code: the commit of each of its runs, '
           '+dirty with uncommitted changes):', '',
           '| member | reader | benchmark | sessions | scene sharing | '
           'layout described | code |', '|---|---|---|---:|---:|---|---|']
  for name, s in setups.items():
    lines.append(f'| {name} | {s["reader"]} | {s["benchmark"]} | '
                 f'{s["sessions"]:,} | {s["scene_shared"]} | '
                 f'{"yes" if s["describe_layout"] else "no"} | '
                 f'{", ".join(s.get("code", ["unknown"]))} |')
  warning = code_warning(setups)
  if warning:
    lines += ['', f'**{warning}**']
  title, rest = claims.markdown(results).split('\n', 1)
  return title + '\n\n' + '\n'.join(lines) + '\n' + rest


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _RESAMPLES.value < 1:
    raise app.UsageError(f'--fidelity_resamples must be >= 1, got '
                         f'{_RESAMPLES.value}')
  if _SAVE.value:
    cli.writable_dir(_SAVE)
  members = [pathlib.Path(d) for d in _DIRS.value]
  if not members:
    raise app.UsageError('--fidelity_dirs is empty')
  for m in members:
    if not m.exists():
      raise app.UsageError(f'--fidelity_dirs: {m} does not exist')
    if not (m.is_dir() or (m.suffix == '.npz' and m.is_file())):
      raise app.UsageError(f'--fidelity_dirs: {m} is neither a run '
                           'directory nor a .npz file')
  names = [m.stem if m.suffix == '.npz' else m.name for m in members]
  if len(set(names)) != len(names):
    raise app.UsageError('--fidelity_dirs: each member is named by its '
                         'directory or file, and two share a name '
                         f'({", ".join(names)})')
  results, setups = {}, {}
  for m, name in zip(members, names):
    try:
      groups, meta = groups_of(m)
      setups[name] = setup_of(meta)
      if _SAVE.value:
        claims.save_groups(pathlib.Path(_SAVE.value) / f'{name}.npz',
                               groups, meta)
      ev, stagnation = evidence(groups, _RESAMPLES.value, _SEED.value)
      results[name] = claims.evaluate(
          paper_claims.CLAIMS, ev, 'stagnation' if stagnation else None,
          not_run(setups[name]),
          placement_run=(paper_claims.PLACEMENT_RUN
                         if paper_claims.PLACEMENT_RUN in groups['main']
                         else None),
          placement_free=paper_claims.PLACEMENT_FREE)
    except (FileNotFoundError, ValueError) as e:
      raise app.UsageError(f'{m}: {e}') from e
  warning = code_warning(setups)
  if warning:
    logging.warning('%s', warning)
  outputs.write_markdown(markdown(results, setups))
  if _JSON.value:
    outputs.write_json(_JSON.value, {
        'margins': {'points': claims.MARGIN_POINTS,
                    'bri': claims.MARGIN_BRI},
        'bootstrap_resamples': _RESAMPLES.value, 'seed': _SEED.value,
        'members': setups, 'code_warning': warning,
        'summary': {m: claims.summary(r) for m, r in results.items()},
        'rows': results})


if __name__ == '__main__':
  cli.run(main)
