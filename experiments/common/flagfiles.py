"""The shipped flag files, found from any folder (a module of its own, with
no imports of the project's, so that ``early`` and ``cli`` both use it)."""

import os
import pathlib

# The folder that holds the ``experiments`` package: the checkout, or
# site-packages after ``pip install``.
SHIPPED = pathlib.Path(__file__).resolve().parents[2]


def shipped(argv: list) -> list:
  """``argv`` (changed in place, and returned) with each
  ``--flagfile=experiments/flagfiles/<name>`` that the working folder
  lacks read from the installed package's copy, so the documented commands
  work from any folder; a path that exists, or that names no shipped
  file, is left for absl."""
  for i, arg in enumerate(argv):
    if not arg.startswith('--flagfile='):
      continue
    path = arg.split('=', 1)[1]
    if (path.startswith('experiments/flagfiles/') and
        not os.path.exists(path) and (SHIPPED / path).is_file()):
      argv[i] = f'--flagfile={SHIPPED / path}'
  return argv
