"""The run's flags of statistics, running, several processes and outputs,
read into ``RunConfig``'s fields; joining the processes, the compilation
cache and the sweep's settings."""

import pathlib

from absl import app
from absl import flags
import jax

from recovr_jax import drivers
from recovr_jax.experiment import config as config_lib
from recovr_jax.experiment import distributed
from recovr_jax.experiment import paper_claims
from recovr_jax.experiment import resources

_RESAMPLES = flags.DEFINE_integer('bootstrap_resamples', 10_000,
                                  'Paired bootstrap resamples.')

_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the bootstrap.', lower_bound=0)

_BOOT_BASELINE = flags.DEFINE_string(
    'bootstrap_baseline', 'umivr',
    'The method the report\'s paired bootstrap compares recovr with '
    '(docs/definitions.md §5: umivr); strongest: the baseline with the '
    'best mean R@1 over feedback turns. Absent from --methods: the '
    'strongest one.')

_BOOT_ALSO = flags.DEFINE_list(
    'bootstrap_also', [],
    'Further methods of --methods the paired bootstrap compares recovr with '
    '(e.g. no_reflection,no_keep,no_avoid); written to bootstrap_also.json '
    'and report.md.')

_NUM_SESSIONS = flags.DEFINE_integer(
    'num_sessions', None, 'Sessions (test triplets) to run; default all.')

_BATCH = flags.DEFINE_integer('batch_size', 100, 'Sessions per batch.')

_SIMULATION = flags.DEFINE_enum(
    'simulation', 'host', list(drivers.NAMES),
    'The driver (recovr_jax/drivers). host: the user and the reasoner run '
    'in Python between jitted ranking steps (every method, backend and '
    'user). jit: whole sessions as one lax.scan inside vmap; on the '
    'embedded world (rules or grounded reasoner; every method, user and '
    'ask policy) the user\'s words are tabulated on the host and '
    '--user_draws=jax is implied; on files the caption user and the '
    'reasoning step on the host between passes.')

_JIT_CHUNK = flags.DEFINE_integer(
    'jit_chunk_size', 64,
    '--simulation=jit: each turn runs the sessions still searching in '
    'vmapped chunks of this many and skips the rest; 0: every session runs '
    'every turn (lax.scan inside vmap). Same results either way.')

_SESSION_SHARDS = flags.DEFINE_integer(
    'session_shards', 1,
    '--simulation=jit: split each batch\'s sessions over this many devices '
    '(world replicated). On a CPU, first export XLA_FLAGS=--xla_force_host_'
    'platform_device_count=<cores>.')

_GALLERY_OVER_PROCESSES = flags.DEFINE_bool(
    'gallery_over_processes', False,
    '--simulation=jit with several processes: split the gallery\'s rows '
    'over the processes (each process\'s devices hold and score only its '
    'rows; the lists merged exactly) instead of every device holding it '
    'whole; each process\'s --session_shards devices split the sessions.')

_PLATFORM = flags.DEFINE_enum(
    'platform', 'auto', list(resources.PLATFORMS),
    'Device to run on; a requested gpu or tpu that JAX cannot find is an '
    'error, not a CPU run.')

_CACHE = flags.DEFINE_string('cache_dir', 'cache',
                             'Progress Memory cache of gallery embeddings.')

_COMPILATION_CACHE = flags.DEFINE_bool(
    'compilation_cache', True,
    'Keep compiled XLA programs in <cache_dir>/xla for later runs (JAX\'s '
    'persistent compilation cache; same programs, same results). Needs '
    '--cache_dir.')

_RESUME = flags.DEFINE_bool('resume', True,
                            'Reuse finished batches in --output_dir.')

_MAX_ERRORS = flags.DEFINE_float(
    'max_error_share', 0.0,
    "Share of a method's sessions that may raise (each is recorded with its "
    'error and counted as a miss) before the run fails: it still writes its '
    'outputs, then exits non-zero. Default 0: any session that raised fails '
    'the run.')

_SWEEP = flags.DEFINE_multi_string(
    'sweep', [],
    'One-factor-at-a-time sweep, repeatable: NAME=V1|V2|... runs every '
    f'value of NAME with the other flags fixed, each in --output_dir/'
    f'NAME=V, and writes sweep.md. Sweepable: '
    f'{", ".join(config_lib.SWEEPABLE)}.')

SUITES = {'fidelity': paper_claims.FIDELITY_PARTS}
_SUITE = flags.DEFINE_enum(
    'suite', None, list(SUITES),
    'Run a named set of configurations, each in its own subdirectory of '
    '--output_dir, with the other flags fixed (the suite sets --methods). '
    'fidelity: every run experiments.fidelity reads (the main methods, the '
    'paper\'s reading of the no-reflection ablation, the degraded users, '
    'the sensitivity settings); docs/benchmark.md lists them.')

_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None,
    'Run as several processes (JAX\'s distributed runtime): host:port of '
    'process 0, the same for every process; "auto" on a cluster JAX '
    'detects itself (SLURM, TPU pods). experiments/launch.py starts local '
    'processes. The host driver gives each process its share of the batches; '
    'the jitted driver runs each batch over every process\'s devices; '
    'process 0 writes the outputs.')

_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', 1, 'Processes of the run (with --coordinator_address).')

_PROCESS_ID = flags.DEFINE_integer(
    'process_id', 0, 'This process, 0..--num_processes-1.')

_OUTPUT = flags.DEFINE_string('output_dir', 'out/run', 'Output directory.')

_EXPORT_TREC = flags.DEFINE_bool(
    'export_trec', False,
    'Also write TREC run files (<output_dir>/trec/<method>.turn<t>.run: '
    'qid Q0 docid rank score tag, score = K + 1 - rank) and qrels.txt for '
    'ranx, ir_measures or trec_eval.')

HELP_GROUPS = (
    ('Statistics', [
        'bootstrap_baseline', 'bootstrap_also', 'bootstrap_resamples',
        'seed']),
    ('Running', [
        'num_sessions', 'batch_size', 'simulation', 'jit_chunk_size',
        'session_shards', 'platform', 'cache_dir', 'compilation_cache',
        'resume', 'max_error_share', 'sweep', 'suite']),
    ('Several processes (docs/runner.md)', [
        'coordinator_address', 'num_processes', 'process_id',
        'gallery_over_processes']),
    ('Outputs', ['output_dir', 'export_trec']),
)


def user_draws() -> str | None:
  """The simulated user's draws the --simulation driver imposes."""
  return drivers.user_draws(_SIMULATION.value)


def fields() -> dict:
  """``RunConfig``'s statistics, running, process and output fields."""
  return dict(
      output_dir=_OUTPUT.value, export_trec=_EXPORT_TREC.value,
      cache_dir=_CACHE.value, num_sessions=_NUM_SESSIONS.value,
      batch_size=_BATCH.value, bootstrap_resamples=_RESAMPLES.value,
      bootstrap_baseline=_BOOT_BASELINE.value,
      bootstrap_also=tuple(_BOOT_ALSO.value), seed=_SEED.value,
      max_error_share=_MAX_ERRORS.value, resume=_RESUME.value,
      simulation=_SIMULATION.value, jit_chunk_size=_JIT_CHUNK.value,
      session_shards=_SESSION_SHARDS.value, platform=_PLATFORM.value,
      num_processes=_PROCESSES['count'], process_id=_PROCESSES['id'],
      coordinator_address=_COORDINATOR.value,
      gallery_over_processes=_GALLERY_OVER_PROCESSES.value)


def sweep_settings():
  """The --sweep settings, parsed and checked."""
  return parse_sweep(_SWEEP.value)


def suite_parts():
  """The --suite's parts with their values parsed (``None`` without
  --suite); it excludes --sweep and --methods."""
  if _SUITE.value is None:
    return None
  clash = [f'--{n}' for n in ('sweep', 'methods') if flags.FLAGS[n].present]
  if clash:
    raise app.UsageError(f'--suite={_SUITE.value} sets the methods and '
                         f'settings of each run; drop {" and ".join(clash)}')
  parts = []
  for sub, methods, settings in SUITES[_SUITE.value]:
    parts.append((sub, methods, [(n, text, flags.FLAGS[n].parser.parse(text))
                                 for n, text in settings]))
  return parts


def processes() -> tuple[int, int]:
  """``(num_processes, process_id)`` of the joined run."""
  return _PROCESSES['count'], _PROCESSES['id']


_PROCESSES = {'count': 1, 'id': 0}


def start_processes() -> None:
  """Joins the run's processes (--coordinator_address) before JAX starts
  its backend; checks the process flags first."""
  n, pid = _NUM_PROCESSES.value, _PROCESS_ID.value
  if n < 1:
    raise app.UsageError(f'--num_processes must be >= 1, got {n}')
  if not 0 <= pid < n:
    raise app.UsageError(f'--process_id must be in 0..{n - 1}, got {pid}')
  if n > 1 and not _COORDINATOR.value:
    raise app.UsageError('--num_processes > 1 needs --coordinator_address '
                         '(or start them with experiments/launch.py)')
  try:
    _PROCESSES['count'], _PROCESSES['id'] = distributed.initialize(
        _COORDINATOR.value, n, pid)
  except (RuntimeError, ValueError) as e:
    raise app.UsageError(f'--coordinator_address={_COORDINATOR.value}: '
                         f'cannot join the run\'s processes ({e})') from e


def use_compilation_cache(config: config_lib.RunConfig):
  """Compiled XLA programs (MiniLM per padded width, the captioner, the
  ranking core) kept beside Progress Memory (--compilation_cache): a later
  run loads them instead of compiling; the programs and so the results are
  the same."""
  if _COMPILATION_CACHE.value and config.cache_dir:
    jax.config.update('jax_compilation_cache_dir', str(
        pathlib.Path(config.cache_dir).absolute() / 'xla'))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.2)


def parse_sweep(specs):
  """``['NAME=V1|V2']`` -> ``[(NAME, [(V1, parsed V1), ...])]``, checked."""
  out = []
  for spec in specs:
    name, sep, values = spec.partition('=')
    if not sep or not values:
      raise app.UsageError(f'--sweep {spec!r}: expected NAME=V1|V2|...')
    if name not in config_lib.SWEEPABLE:
      raise app.UsageError(f'--sweep {name!r} is not sweepable; valid: '
                           f'{", ".join(config_lib.SWEEPABLE)}')
    parsed = []
    for v in values.split('|'):
      try:
        parsed.append((v, flags.FLAGS[name].parser.parse(v)))
      except ValueError as e:
        raise app.UsageError(f'--sweep {name}={v}: {e}') from e
    out.append((name, parsed))
  return out
