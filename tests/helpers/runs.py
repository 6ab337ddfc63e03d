"""Runs of the runner that the tests share, through the library: ``config_of``
builds the ``RunConfig`` of flag values with no flag parsed, ``run_of``
runs it; ``tiny_config`` / ``run_tiny`` the same for the tiny run (``TINY``).
The few tests of the command line itself start ``experiments.run``."""

import os
import pathlib
import shutil
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


# The benchmarks' tiny `main` (bench_device, bench_sweep): their --run_args,
# a world of 6 test queries, one method, 2 turns.
TINY_MAIN_RUN_ARGS = (
    '--run_args=--methods=recovr,--num_test_triplets=6,'
    '--num_train_triplets=20,--gallery_size=300,--benchmark=v1,'
    '--num_turns=2,--bootstrap_resamples=20,--bootstrap_also=,'
    '--nocompilation_cache')


# The suite's shared cache (tests/conftest.py): the derived files a tiny
# run writes into its cache directory (the gallery's Progress Memory, the
# text embeddings, the grounded reader's fits), kept once per session so
# that each tiny run given no cache directory starts from them instead of
# rendering, encoding and fitting again. Loading them is the library's own
# warm path (each file checked on load; the outputs are the same cold or
# warm: tests/experiments/bundle_test.py). A test of the cache itself
# passes its own ``cache_dir``.
SHARED_CACHE = 'RECOVR_TESTS_SHARED_CACHE'


def _cache_files(directory: pathlib.Path) -> dict:
  """``name -> path`` of the derived files in a cache directory (not its
  compiled programs, nor a file still being written)."""
  if not directory.is_dir():
    return {}
  return {p.name: p for p in directory.iterdir()
          if p.is_file() and not p.name.startswith('.')
          and not p.name.endswith('.tmp.npz')}


def seed_cache(cache) -> None:
  """Copies the shared cache's files into a new cache directory ``cache``
  (also for a run a test starts as a process; one that exists is left as
  it is)."""
  cache = pathlib.Path(cache)
  shared = os.environ.get(SHARED_CACHE)
  if not shared or cache.exists():
    return
  cache.mkdir(parents=True)
  for name, path in _cache_files(pathlib.Path(shared)).items():
    shutil.copyfile(path, cache / name)


def _share(cache: pathlib.Path) -> None:
  """Adds a run's cache files to the shared cache: a file it lacks, or
  text embeddings holding more texts (each written atomically, so another
  worker reads a whole file)."""
  shared = os.environ.get(SHARED_CACHE)
  if not shared:
    return
  held = _cache_files(pathlib.Path(shared))
  for name, path in _cache_files(cache).items():
    if name in held and not (name.startswith('text-') and
                             path.stat().st_size > held[name].stat().st_size):
      continue
    tmp = pathlib.Path(shared) / f'.{os.getpid()}.{name}'
    shutil.copyfile(path, tmp)
    os.replace(tmp, pathlib.Path(shared) / name)


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
  ``app.UsageError`` as the command line does. Given no ``cache_dir``, its
  cache starts from the suite's shared one (``SHARED_CACHE``)."""
  values = _values(output_dir, overrides)
  cache = pathlib.Path(values['cache_dir'])
  own = 'cache_dir' in overrides or cache.exists()
  if not own:
    seed_cache(cache)
  try:
    return run_of(**values)
  finally:
    if not own:
      _share(cache)


def smoke_run(cls) -> None:
  """A test class's shared tiny run of ReCoVR and IVR (in ``setUpClass``):
  ``cls.root`` a new folder, ``cls.out`` the run's output directory,
  ``cls.returned`` what the run returned."""
  cls.root = pathlib.Path(tempfile.mkdtemp())
  cls.out = cls.root / 'smoke'
  cls.returned = run_tiny(cls.out, methods=['recovr', 'ivr'])


