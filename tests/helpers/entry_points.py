"""The entry points by their script name: ``module('fidelity')`` is
``'experiments.evaluate.fidelity'`` (each script name is unique)."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def path(name: str) -> pathlib.Path:
  """The file of entry point ``name`` under ``experiments/``."""
  found = sorted((ROOT / 'experiments').rglob(f'{name}.py'))
  if len(found) != 1:
    raise ValueError(f'entry point {name!r}: {len(found)} files')
  return found[0]


def module(name: str) -> str:
  """``python -m``'s dotted name of entry point ``name``."""
  return '.'.join(path(name).relative_to(ROOT).with_suffix('').parts)
