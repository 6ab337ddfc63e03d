"""Running an entry point: a refused flag value is one line, not the help;
the help is the entry point's flags grouped by concern.

``app.run`` answers a ``UsageError`` with the module's docstring and every
flag's help (hundreds of lines) before the one line that matters; ``run``
prints that line (one per problem when several are found at once) and where
to find the help instead, and exits with the error's code. A flag absl
cannot parse is one line under the same prefix. Before ``main`` runs, every output file a
flag names (``OUTPUT_FILE_FLAGS``) is checked writable, so a benchmark or
evaluation of many minutes cannot fail at its last line.

With ``groups``, ``--help`` / ``--helpshort`` print the module's docstring
and its flags under one heading per concern (flags defined in shared modules
included; with ``own``, ``--helpshort`` only the entry point's own groups);
``--helpfull`` stays absl's (every flag, absl's own included).
"""

import os
import sys
import textwrap

from absl import app
from absl import flags

from experiments.common import flagfiles

HELP_ARGS = ('--help', '--helpshort', '-h', '-?', '--help=true',
             '--helpshort=true')
HELP_FULL = ('--helpfull', '--helpfull=true')


def _name() -> str:
  name = os.path.basename(sys.argv[0]) or 'experiments'
  if name == '__main__.py' or name.endswith('.py'):
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    name = spec.name if spec is not None else 'experiments'
  return name


def error_lines(e: app.UsageError) -> str:
  """``e`` as the entry point's error lines, one per problem."""
  name = _name()
  lines = str(e).splitlines() or ['(no message)']
  return ''.join(f'{name}: error: {line}\n' for line in lines)


def grouped_help(doc: str, groups, defaults=None) -> str:
  """``doc`` and the flags of ``groups`` (``[(title, [flag names])]``), each
  with its help and default; ``defaults``: flag name -> the default to show
  instead of the flag's own (a preset's)."""
  out = [(doc or '').strip(), '']
  for title, names in groups:
    out.append(f'{title}:')
    for name in names:
      flag = flags.FLAGS[name]
      help_text = ' '.join(flag.help.split())
      out.extend(textwrap.wrap(f'--{name}: {help_text}', 79,
                               initial_indent='  ',
                               subsequent_indent='    '))
      default = (defaults or {}).get(name, flag.default_as_str)
      out.append(f'    (default: {default})')
    out.append('')
  out.append('--helpfull: every flag, absl\'s own included. '
             '--flagfile=F: flags from a file.')
  return '\n'.join(out) + '\n'


def _writable(folder: str, message: str) -> str:
  """``validation.writable_dir`` (the folder created and probed for writing),
  its refusal as a ``UsageError``."""
  from recovr_jax.run import validation  # pylint: disable=g-import-not-at-top
  try:
    return str(validation.writable_dir(folder, message))
  except validation.ConfigError as e:
    raise app.UsageError(str(e)) from None


# Flags that name a file an entry point writes its results to.
OUTPUT_FILE_FLAGS = ('output_json', 'output_md', 'eval_json', 'output',
                     'reference_output', 'screenshot')


def check_output_files(flag_values=None) -> None:
  """Raises ``UsageError`` naming each output-file flag of ``flag_values``
  (default: absl's) whose file cannot be written (its folder is created, as
  the writers would)."""
  flag_values = flags.FLAGS if flag_values is None else flag_values
  problems = []
  for name in OUTPUT_FILE_FLAGS:
    if name not in flag_values or not flag_values[name].value:
      continue
    value = flag_values[name].value
    path = os.path.abspath(value)
    if os.path.isdir(path):
      problems.append(f'--{name} {value}: a directory; expected a file path')
      continue
    try:
      _writable(os.path.dirname(path),
                f'--{name} {value}: cannot write there ({{1}})')
    except app.UsageError as e:
      problems.append(str(e))
  if problems:
    raise app.UsageError('\n'.join(problems))


def writable_dir(flag) -> str:
  """The folder the string flag ``flag`` (a ``FlagHolder``) names, created
  and probed for writing; ``UsageError`` names the flag when it cannot be
  (a trainer checks this before its minutes of training, not at the save)."""
  if not flag.value:
    raise app.UsageError(f'--{flag.name} is empty; name a folder')
  return _writable(flag.value,
                   f'--{flag.name} {flag.value}: cannot write there ({{1}})')


def run(main, groups=None, defaults=None, own: int | None = None,
        quick_exit=None) -> None:
  """``app.run(main)``, with a ``UsageError`` told in a line per problem and,
  with ``groups``, the help grouped (``grouped_help``). ``own``: the first
  ``own`` groups are the entry point's own flags, the rest the runner's
  (which apply too): ``--helpshort`` shows only its own, ``--help`` all.
  ``quick_exit``: a function saying, once ``main`` has returned None (its
  work done, every file it wrote closed), whether the process may end at
  once (``exit_now``) instead of through Python's teardown."""
  flagfiles.shipped(sys.argv)
  asked = [a for a in sys.argv[1:] if a in HELP_ARGS + HELP_FULL]
  if groups is not None and set(asked) - set(HELP_FULL):
    doc = getattr(sys.modules.get('__main__'), '__doc__', '')
    short = own is not None and any(a.startswith('--helpshort')
                                    for a in asked)
    text = grouped_help(doc, groups[:own] if short else groups, defaults)
    if short:
      text += ('Every flag of experiments.run applies too: --help lists '
               'them here, grouped.\n')
    sys.stdout.write(text)
    sys.exit(0)
  if asked:  # absl's help, which exits 1 as if the help were an error
    app.usage(shorthelp=not set(asked) & set(HELP_FULL),
              writeto_stdout=True, exitcode=0)

  def checked(argv):
    try:
      check_output_files()
      result = main(argv)
      if result is None and quick_exit is not None and quick_exit():
        exit_now(0)
      return result
    except app.UsageError as e:
      sys.stderr.write(error_lines(e) + 'Pass --helpshort to see the flags.\n')
      sys.exit(e.exitcode if e.exitcode else 1)
  app.run(checked, flags_parser=_parse_flags)


def flagfile_problem(args) -> str | None:
  """The first ``--flagfile`` of ``args`` (or one a flag file names, as
  absl follows them) that is not UTF-8 text, told in a line naming the file
  and the byte (absl would raise a ``UnicodeDecodeError`` without the
  file's name); None when every one reads."""
  pending, seen = [a for a in args if a.startswith('--flagfile=')], set()
  while pending:
    path = os.path.abspath(os.path.expanduser(
        pending.pop().split('=', 1)[1]))
    if path in seen or not os.path.isfile(path):
      continue  # absl names a missing one itself
    seen.add(path)
    try:
      with open(path, 'rb') as f:
        text = f.read().decode('utf-8')
    except UnicodeDecodeError as e:
      return (f'--flagfile={path}: not UTF-8 text (byte '
              f'0x{e.object[e.start]:02x} at offset {e.start}); save it as '
              'UTF-8')
    except OSError:
      continue
    pending += [line.strip() for line in text.splitlines()
                if line.strip().startswith('--flagfile=')]
  return None


def negated_with_value(args, booleans) -> list[str]:
  """A line per ``--no<name>=value`` of ``args`` where ``<name>`` is one
  of ``booleans`` (absl raises a bare ``ValueError`` for it, or calls the
  flag unknown): a negated flag takes no value."""
  out = []
  for arg in args:
    if arg == '--':
      break
    name, eq, value = arg.lstrip('-').partition('=')
    if (arg.startswith('--no') and eq and name[2:] in booleans):
      out.append(f'{arg}: --no{name[2:]} takes no value; write '
                 f'--{name[2:]}={value} (or --{name[2:]} / --no{name[2:]})')
  return out


def _parse_flags(argv):
  """absl's flag parsing, a refused value told under the entry point's
  error prefix (``error_lines``) like every other error."""
  booleans = {name for name, f in flags.FLAGS._flags().items()  # pylint: disable=protected-access
              if f.boolean}
  problem = flagfile_problem(argv[1:]) or '\n'.join(
      negated_with_value(argv[1:], booleans))
  if problem:
    sys.stderr.write(error_lines(app.UsageError(problem)) +
                     'Pass --helpshort to see the flags.\n')
    sys.exit(1)
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    sys.stderr.write(error_lines(app.UsageError(str(e))) +
                     'Pass --helpshort to see the flags.\n')
    sys.exit(1)


def exit_now(code: int) -> None:
  """Flushes the logs and the standard streams and ends the process with
  ``code`` at once: no atexit handlers, no interpreter teardown (freeing
  every object of a run that loaded MiniLM, the world and its text cache
  took 0.75 s of a 25 s `main`). Only for a process whose files are all
  written and closed, and that no other process waits on (or one of
  several that failed and must not wait for the others)."""
  import logging as std_logging  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.flush()
  std_logging.shutdown()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


def require(modules, who: str, extra: str) -> None:
  """``UsageError`` naming the first of ``modules`` that is not installed
  and the extra (``pip install -e ".[extra]"``) that brings it."""
  for module in modules:
    try:
      __import__(module)
    except ImportError as e:
      raise app.UsageError(f'{who} needs {module}: pip install -c '
                           f'constraints.txt -e ".[{extra}]"') from e


def is_loopback(host: str) -> bool:
  """Whether ``host`` is this machine only (localhost, 127.0.0.1, ::1)."""
  import ipaddress  # pylint: disable=g-import-not-at-top
  if host == 'localhost':
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def check_port(host: str, port: int) -> None:
  """``UsageError`` when ``host:port`` cannot be bound (before any model
  loads)."""
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind((host, port))
    except OSError as e:
      raise app.UsageError(f'--host={host} --port={port} cannot be used '
                           f'({e.strerror}); is another server on it?') from e
