"""The runner's command line answered before anything heavy is imported.

``python -m experiments.run`` defines its flags from ``RunConfig``'s fields,
which means importing the whole library, and with it jax (5 s here) before
absl could say a flag is misspelt or print the help. ``answer(argv)`` runs
first, with absl's flag-file reader and value parsers only: ``--help`` /
``--helpshort`` print the runner's grouped help, and a flag the runner does
not define, or a value its parser refuses (a number, its bounds, a choice,
a boolean), is refused under the runner's error prefix, from
``runner_flags.json``, a manifest of the runner's flag names, value parsers
and help written by ``python -m
experiments.common.runner_manifest --write`` (``tests/experiments/early_test.py``
fails when it differs from the flags the runner defines; that module
imports the runner, this one must not). Anything else
goes on to absl, which parses and checks every value again, and then to
the run's own checks (``run_flags.run_config``).
"""

import difflib
import json
import pathlib
import sys

from experiments.common import flagfiles

MANIFEST = pathlib.Path(__file__).with_name('runner_flags.json')
PROGRAM = 'experiments.run'
HELP_ARGS = ('--help', '--helpshort', '-h', '-?', '--help=true',
             '--helpshort=true')
# Flags absl's parser itself handles (not in ``FLAGS``).
SPECIAL = ('flagfile', 'undefok')


def _parser(spec: dict):
  """absl's parser a manifest's ``values`` entry describes."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  kind = spec['parser']
  if kind == 'EnumParser':
    return flags.EnumParser(spec['choices'], spec['case_sensitive'])
  if kind == 'BooleanParser':
    return flags.BooleanParser()
  return getattr(flags, kind)(spec['lower'], spec['upper'])


def _flags(args, manifest: dict):
  """``(flag as given, name, value or None)`` for each flag of ``args``
  (flag files expanded), read as absl reads a command line: ``--name=v``,
  ``--name v`` for a known non-boolean flag (the next token is its value,
  not a flag), ``--[no]name`` for a boolean, ``--`` ends the flags."""
  names, booleans = set(manifest['names']), set(manifest['booleans'])
  rest = iter(args)
  for arg in rest:
    if arg == '--':
      return
    if not arg.startswith('-') or arg == '-':
      continue
    name, eq, value = arg.lstrip('-').partition('=')
    if not eq:
      value = None
      if name in names and name not in booleans:
        value = next(rest, None)
    yield arg.partition('=')[0], name, value


def bad_values(args, manifest: dict) -> list[str]:
  """absl's refusal of each value of ``args`` (flag files expanded) that
  the flag's parser does not take (numbers, their bounds, choices,
  booleans), as absl words it: ``flag --name=value: why``."""
  specs, out = manifest['values'], []
  for _, name, value in _flags(args, manifest):
    if name in specs and value is not None:
      try:
        _parser(specs[name]).parse(value)
      except (ValueError, TypeError) as e:
        out.append(f'flag --{name}={value}: {e}')
  return out


def _error(message: str) -> None:
  from absl import app  # pylint: disable=g-import-not-at-top
  from experiments.common import cli  # pylint: disable=g-import-not-at-top
  sys.stderr.write(cli.error_lines(app.UsageError(message)) +
                   'Pass --helpshort to see the flags.\n')
  sys.exit(1)


def unknown_flags(args, manifest: dict) -> list[tuple[str, str | None]]:
  """``(flag as given, nearest known name or None)`` for each flag of
  ``args`` (flag files expanded) that the runner does not define."""
  names, booleans = set(manifest['names']), set(manifest['booleans'])
  out = []
  for given, name, value in _flags(args, manifest):
    if name in names or (name.startswith('no') and name[2:] in booleans
                         and value is None):
      continue
    close = difflib.get_close_matches(name, sorted(names), n=1)
    out.append((given, close[0] if close else None))
  return out


def answer(argv) -> None:
  """Answers the help and refuses an undefined flag or a value its parser
  refuses in ``argv`` (the runner's command line) at once, exiting;
  returns when absl should parse it. ``argv``'s shipped flag files are
  found first (``flagfiles.shipped``)."""
  flagfiles.shipped(argv)
  if not MANIFEST.is_file():
    return
  manifest = json.loads(MANIFEST.read_text())
  args = list(argv[1:])
  if any(a in HELP_ARGS for a in args):
    sys.stdout.write(manifest['help'])
    sys.exit(0)
  if any(a.lstrip('-').split('=')[0] in ('undefok', 'helpfull', 'helpxml')
         for a in args):
    return  # absl's to answer
  from absl import flags  # pylint: disable=g-import-not-at-top
  from experiments.common import cli  # pylint: disable=g-import-not-at-top
  problem = cli.flagfile_problem(args)
  if problem:
    _error(problem)
  try:
    args = flags.FlagValues().read_flags_from_files(args, force_gnu=False)
  except flags.Error as e:  # a flag file that cannot be read
    _error(str(e).replace('ERROR:: ', '').strip())
  negated = cli.negated_with_value(args, set(manifest['booleans']))
  if negated:
    _error('\n'.join(negated))
  unknown = unknown_flags(args, manifest)
  problems = [f'unknown flag {flag}' + (f'; did you mean --{near}?'
                                         if near else '')
              for flag, near in unknown] + bad_values(args, manifest)
  if problems:
    _error('\n'.join(problems))
