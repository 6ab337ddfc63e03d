"""Writes ``runner_flags.json``, the manifest of the runner's flags that
``experiments.common.early`` answers from before jax is imported:

    python -m experiments.common.runner_manifest --write

Kept apart from ``early`` because it imports the runner (``experiments.run``
imports ``early``: the two in one module were an import circle).
"""

import json
import os
import sys

from experiments.common import early


def live() -> dict:
  """The manifest of the flags ``experiments.run`` defines now (imports
  it: slow; in a process of its own, as ``--write`` runs it: a process
  that imported other entry points holds their flags too)."""
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  from experiments import run  # pylint: disable=g-import-not-at-top
  from experiments.common import cli  # pylint: disable=g-import-not-at-top
  from experiments.common import run_flags  # pylint: disable=g-import-not-at-top
  app.define_help_flags()
  names = sorted(set(flags.FLAGS) | set(early.SPECIAL))
  booleans = sorted(n for n in flags.FLAGS if flags.FLAGS[n].boolean)
  values = {}
  for name in sorted(flags.FLAGS):
    parser = flags.FLAGS[name].parser
    kind = type(parser).__name__
    if kind in ('IntegerParser', 'FloatParser'):
      values[name] = {'parser': kind, 'lower': parser.lower_bound,
                      'upper': parser.upper_bound}
    elif kind == 'EnumParser':
      values[name] = {'parser': kind, 'choices': list(parser.enum_values),
                      'case_sensitive': parser.case_sensitive}
    elif kind == 'BooleanParser':
      values[name] = {'parser': kind}
  return {'program': early.PROGRAM, 'names': names, 'booleans': booleans,
          'values': values,
          'help': cli.grouped_help(run.__doc__, run_flags.HELP_GROUPS,
                                   run_flags.HELP_DEFAULTS)}


def main(argv) -> None:
  if argv[1:] != ['--write']:
    sys.exit('usage: python -m experiments.common.runner_manifest --write '
             f'(rewrites {early.MANIFEST.name} from the flags experiments.run '
             'defines)')
  early.MANIFEST.write_text(json.dumps(live(), indent=1, sort_keys=True) +
                            '\n')
  print(f'wrote {os.path.relpath(early.MANIFEST)}')


if __name__ == '__main__':
  main(sys.argv)
