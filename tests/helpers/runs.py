"""Runs of the runner that the tests share, through the library: ``config_of``
builds the ``RunConfig`` of flag values with no flag parsed, ``run_of``
runs it; ``tiny_config`` / ``run_tiny`` the same for the tiny run (``TINY``).
The few tests of the command line itself start ``experiments.run``."""

import pathlib
import tempfile

from absl import app

from experiments.common import run_flags
from recovr_jax.run import runner
from recovr_jax.run import sweeps
from recovr_jax.run import validation

# The runner's mechanics are tested on the first benchmark (no captioner to
# load per run); BenchmarkPresetTest runs the default, v3, end to end.
# Two full batches: a partial last batch would compile its programs again.
TINY = dict(benchmark='v1', num_test_triplets=12, num_train_triplets=20,
            gallery_size=300, num_sessions=10, batch_size=5, num_turns=3,
            bootstrap_resamples=200, plots=False,
            # JAX's persistent compilation cache is process-wide: left off,
            # so the test process does not write into a temporary cache.
            compilation_cache=False)


def _values(output_dir, overrides: dict) -> dict:
  values = dict(TINY, output_dir=str(output_dir),
                cache_dir=str(pathlib.Path(output_dir).parent / 'cache'))
  values.update(overrides)
  data = values.get('data')
  if run_flags.run_config.DATA_ALIASES.get(data, data) == 'files':
    # the world's flags are refused
    for name in run_flags.SOURCE_FLAGS['world']:
      values.pop(name, None)
  return values


def _flag_text(name: str, value) -> str:
  """``--name=value`` as absl writes it into flags.txt."""
  if isinstance(value, bool):
    return f'--{name}' if value else f'--no{name}'
  if isinstance(value, (list, tuple)):
    value = ','.join(str(v) for v in value)
  return f'--{name}={value}'


def config_of(**values):
  """The ``RunConfig`` of flag values ``values`` (the others at their
  defaults; ``benchmark`` the preset), made by
  ``run_flags.config_from_values``: what ``experiments.run`` would run
  with those flags, no flag parsed. ``validation.ConfigError`` names what
  is wrong."""
  values = dict(values)
  # The command line's own (JAX's process-wide cache): off in the library.
  if values.pop('compilation_cache', False):
    raise ValueError("--compilation_cache is the command line's: start "
                     'experiments.run')
  benchmark = values.pop('benchmark', run_flags.run_config.DEFAULT_BENCHMARK)
  unknown = sorted(set(values) - {leaf.name for leaf in run_flags.LEAVES})
  if unknown:
    raise ValueError(f'no flag {", ".join(unknown)}')
  full = {leaf.name: leaf.default for leaf in run_flags.LEAVES}
  full.update(values)
  text = run_flags.absolute_paths(''.join(
      _flag_text(n, v) + '\n' for n, v in sorted(
          dict(values, benchmark=benchmark).items())))
  return run_flags.config_from_values(full, benchmark, set(values),
                                      flags_text=text)


def run_of(**values):
  """``config_of(**values)`` run through the library (``runner.run``, or
  ``sweeps.sweep`` for a ``sweep`` of ``NAME=V1|V2`` texts): None, or
  ``'FAILED: ...'`` as the command line returns it; a refused config
  raises ``app.UsageError`` as the command line does."""
  sweep = values.pop('sweep', None)
  try:
    made = config_of(**values)
    if sweep:
      sweeps.sweep(made, run_flags.parse_sweep(sweep))
    else:
      runner.run(made)
  except validation.ConfigError as e:
    raise app.UsageError(str(e)) from e
  except validation.RunFailed as e:
    return f'FAILED: {e}'
  return None


def tiny_config(output_dir, **overrides):
  """The tiny run's ``RunConfig`` with ``overrides`` (flag name -> value),
  made by ``run_flags.config_from_values`` from the flags' defaults: what
  ``experiments.run`` would run with those flags, no flag parsed.
  ``validation.ConfigError`` names what is wrong."""
  return config_of(**_values(output_dir, overrides))


def run_tiny(output_dir, **overrides):
  """The tiny run through the library (``runner.run``, or ``sweeps.sweep``
  for a ``sweep`` of ``NAME=V1|V2`` texts): None, or ``'FAILED: ...'`` as
  the command line returns it; a refused config raises
  ``app.UsageError`` as the command line does."""
  return run_of(**_values(output_dir, overrides))


def smoke_run(cls) -> None:
  """A test class's shared tiny run of ReCoVR and IVR (in ``setUpClass``):
  ``cls.root`` a new folder, ``cls.out`` the run's output directory,
  ``cls.returned`` what the run returned."""
  cls.root = pathlib.Path(tempfile.mkdtemp())
  cls.out = cls.root / 'smoke'
  cls.returned = run_tiny(cls.out, methods=['recovr', 'ivr'])


