"""Everything about a run that can be checked before any work.

``validate(config)`` finds every independent problem of a ``RunConfig``
(the run-wide settings here, the data source's own through its ``Source``)
and raises one ``ConfigError`` with a line each; the front ends print them.
"""

import os
import pathlib

import jax

from recovr_jax import checksums
from recovr_jax import drivers
from recovr_jax import methods
from recovr_jax.reasoning import registry
from recovr_jax.run import run_config
from recovr_jax.run import resources


class RunFailed(RuntimeError):
  """A run that finished and wrote its outputs but must not pass: too
  many sessions raised."""


class OutputsNotWritten(RunFailed):
  """A run whose sessions finished but whose outputs could not be written
  (a full disk): its batches are saved and ``INCOMPLETE`` is kept, so the
  same command writes them again."""


class ConfigError(ValueError):
  """A setting that cannot run, found before any work; the message names
  the flag to change."""


def fail(msg):
  raise ConfigError(msg)


def validate(config: run_config.RunConfig, source,
             create: bool = True) -> pathlib.Path | None:
  """Everything that can be checked before any work; returns the output
  directory (created and writable; with ``create=False`` neither it nor
  --cache_dir is created and ``None`` is returned). ``source``: the run's
  data source (``run_config.source(config)``, made once by the run's
  entry). Every independent problem is found before the one
  ``ConfigError`` (a line each) is raised."""
  problems = []
  checksums.allow_unverified(config.allow_unverified_checkpoints)

  def check(fn, *args):
    try:
      fn(*args)
      return True
    except ConfigError as e:
      problems.append(str(e))
      return False

  methods_ok = check(_check_methods, config)
  for name, value in (('batch_size', config.batch_size),
                      ('bootstrap_resamples', config.bootstrap_resamples),
                      ('session_shards', config.session_shards)):
    check(_at_least, name, value, 1)
  for name in ('seed', 'user_seed'):
    check(_at_least, name, getattr(config, name), 0)
  if config.jit_chunk_size is not None:
    check(_at_least, 'jit_chunk_size', config.jit_chunk_size, 0)
  if config.num_sessions is not None:
    check(_at_least, 'num_sessions', config.num_sessions, 1)
  check(_at_least, 'rrf_k', config.loop.rrf_k, 0)
  if not 0.0 <= config.max_error_share <= 1.0:
    problems.append('--max_error_share must be in [0, 1], got '
                    f'{config.max_error_share}')
  problems.extend(source.problems(create, config.num_sessions))
  driver = None
  try:
    driver = drivers.choose(config.simulation, source)
  except ValueError as e:
    problems.append(str(e))
  if driver is not None:
    check(_check_sharding, config, driver)
  check(_check_reasoner, config, source)
  if not config.output_dir or not str(config.output_dir).strip():
    problems.append('--output_dir is empty; name a directory for the '
                    'outputs')
  if config.cache_dir and create:
    check(writable_dir, config.cache_dir,
          '--cache_dir {} cannot be used as a directory: {}')
  try:
    resources.select_device(config.platform)
    from recovr_jax.core import retrieval  # pylint: disable=g-import-not-at-top
    retrieval.check_precision(config.loop.retrieval_precision)
  except ValueError as e:
    problems.append(str(e))
  if driver is not None and methods_ok:
    problems.extend(driver.problems(config, source))
  if problems:
    raise ConfigError('\n'.join(problems))
  if not create:
    return None
  return writable_dir(config.output_dir,
                      '--output_dir {} cannot be written: {}')


def _at_least(name: str, value, least) -> None:
  if value < least:
    fail(f'--{name} must be >= {least}, got {value}')


def _check_methods(config) -> None:
  unknown = [m for m in config.methods if m not in methods.REGISTRY]
  if unknown or not config.methods:
    fail(f'unknown --methods {", ".join(unknown) or "(none)"}; valid: '
         f'{", ".join(methods.names())}')
  for name, values in (('methods', config.methods),
                       ('bootstrap_also', config.bootstrap_also)):
    twice = sorted({m for m in values if list(values).count(m) > 1})
    if twice:
      fail(f'--{name} lists a method twice: {", ".join(twice)}')
  if config.bootstrap_baseline != 'strongest' and (
      config.bootstrap_baseline not in methods.REGISTRY):
    fail(f'unknown --bootstrap_baseline {config.bootstrap_baseline!r}; '
         'valid: strongest, '
         f'{", ".join(m for m in methods.names() if m != "recovr")}')
  if config.bootstrap_baseline == 'recovr' or 'recovr' in config.bootstrap_also:
    fail('--bootstrap_baseline and --bootstrap_also name the methods recovr '
         'is compared with; recovr minus itself is 0 (got recovr)')
  also = [m for m in config.bootstrap_also if m not in config.methods]
  if also or (config.bootstrap_also and 'recovr' not in config.methods):
    fail('--bootstrap_also compares recovr with methods of --methods; '
         f'not in --methods: {", ".join(also or ["recovr"])}')


def _check_sharding(config, driver) -> None:
  if config.session_shards > 1 and not driver.SHARDS:
    fail('--session_shards needs --simulation=jit')
  if config.gallery_over_processes and (not driver.SHARDS or
                                       config.num_processes < 2):
    fail('--gallery_over_processes needs --simulation=jit and '
         f'--num_processes >= 2 (got --simulation={config.simulation}, '
         f'--num_processes={config.num_processes})')
  if config.session_shards > len(jax.local_devices()):
    fail(f'--session_shards={config.session_shards} but JAX sees '
         f'{len(jax.local_devices())} device(s); on a CPU export XLA_FLAGS='
         '--xla_force_host_platform_device_count=N first')


def _check_reasoner(config, source) -> None:
  """--reasoner and its checkpoints, before any model loads: whether the
  source offers it, the flags it reads, then its backend's own checks
  (``reasoning.registry``)."""
  name = config.reasoner.name
  if name not in registry.REGISTRY:
    fail(f'unknown --reasoner {name!r}; valid: '
         f'{", ".join(registry.names())}')
  if not isinstance(config.reasoner, registry.get(name).CONFIG):
    fail(f'--reasoner={name} reads a {registry.get(name).CONFIG.__name__}, '
         f'got a {type(config.reasoner).__name__}')
  checkpoint = getattr(config.reasoner, 'checkpoint', None)
  if checkpoint and not os.path.isdir(checkpoint):
    fail(f'--reasoner_checkpoint {checkpoint} is not a directory')
  problems = registry.problems(config.reasoner,
                               source.vocabulary(config.cache_dir))
  if problems:
    fail('\n'.join(problems))


def writable_dir(path, message: str) -> pathlib.Path:
  """``path`` as an absolute directory, created and probed for writing;
  ``message.format(path, error)`` when it cannot be."""
  path = pathlib.Path(path).absolute()
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / f'.write_test.{os.getpid()}'  # one per process
    probe.write_text('ok')
    probe.unlink()
  except OSError as e:
    fail(message.format(path, e))
  return path


def check_driver(config, source) -> None:
  """What the run's driver (``--simulation``) cannot run, named by flag."""
  problems = drivers.choose(config.simulation, source).problems(config,
                                                                source)
  if problems:
    fail('\n'.join(problems))
