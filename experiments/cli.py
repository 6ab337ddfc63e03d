"""Running an entry point: a refused flag value is one line, not the help.

``app.run`` answers a ``UsageError`` with the module's docstring and every
flag's help (hundreds of lines) before the one line that matters; ``run``
prints that line and where to find the help instead, and exits with the
error's code. A flag absl cannot parse is already one line.
"""

import os
import sys

from absl import app


def run(main) -> None:
  """``app.run(main)``, with a ``UsageError`` told in one line."""
  def checked(argv):
    try:
      return main(argv)
    except app.UsageError as e:
      name = os.path.basename(sys.argv[0]) or 'experiments'
      if name == '__main__.py' or name.endswith('.py'):
        name = getattr(sys.modules.get('__main__'), '__spec__', None)
        name = name.name if name is not None else 'experiments'
      sys.stderr.write(f'{name}: error: {e}\n'
                       f'Pass --helpshort to see the flags.\n')
      sys.exit(e.exitcode if e.exitcode else 1)
  app.run(checked)
