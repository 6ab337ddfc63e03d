"""The run's flags, derived from ``RunConfig``'s tree, and
``config_from_flags()``, which reads them into one ``RunConfig``
(``config_from_values``: the same from a dict, with no flags).

Every setting is declared once, as a field of its config (type, default,
help in the ``#:`` comment above it, choices, sweepable or not;
``recovr_jax.config_tree``); ``config_flags`` defines the flag from it. The
flags defined here by hand steer the command rather than configure a run:
--benchmark (a preset of several settings), --sweep, --suite and
--compilation_cache. Also here: joining the processes, the compilation cache
and parsing the sweep's settings.
"""

import os
import pathlib

from absl import app
from absl import flags
import jax

from experiments.common import config_flags
from experiments.common import world_flags  # pylint: disable=unused-import  (the world's flags: its key flags)
from recovr_jax.analysis import paper_claims
from recovr_jax import config_tree
from recovr_jax import drivers
from recovr_jax.envs.world.benchmark import generator
from recovr_jax import executables
from recovr_jax import paths
from recovr_jax.envs.files import files_source
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world import world_source
from recovr_jax.methods import base
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import registry
from recovr_jax.run import run_config
from recovr_jax.run import distributed
from recovr_jax.run import validation

LEAVES = config_flags.define(run_config.RunConfig, __name__)

_BENCHMARK = flags.DEFINE_enum(
    'benchmark', run_config.DEFAULT_BENCHMARK, list(run_config.BENCHMARKS),
    'The embedded benchmark; sets --renditions, --checkpoint_dir, '
    '--captions, --user_style and --user_language unless given explicitly. '
    "v3 (the default): v2 with the user's test phrasings in its bank "
    '(docs/benchmark.md). '
    'v2: 4 renditions per combination with their encoders, '
    "captions written by the captioning VLM, the paper's user in its own "
    'words. v1 (the first benchmark, for comparison): one video per '
    'combination, ground-truth captions, the template user speaking the '
    "rules reasoner's lexicon.")

_COMPILATION_CACHE = flags.DEFINE_bool(
    'compilation_cache', True,
    'Keep compiled XLA programs in <cache_dir>/xla for later runs (JAX\'s '
    'persistent compilation cache, and the ranking core\'s programs whole in '
    '<cache_dir>/xla/executables, called without tracing; same programs, '
    'same results). Needs --cache_dir.')

_SWEEP = flags.DEFINE_multi_string(
    'sweep', [],
    'One-factor-at-a-time sweep, repeatable: NAME=V1|V2|... runs every '
    f'value of NAME with the other flags fixed, each in --output_dir/'
    f'NAME=V, and writes sweep.md. Sweepable: '
    f'{", ".join(run_config.SWEEPABLE)}.')

SUITES = {'fidelity': paper_claims.FIDELITY_PARTS}
_SUITE = flags.DEFINE_enum(
    'suite', None, list(SUITES),
    'Run a named set of configurations, each in its own subdirectory of '
    '--output_dir, with the other flags fixed (the suite sets --methods). '
    'fidelity: every run experiments.evaluate.fidelity reads (the main methods, the '
    'paper\'s reading of the no-reflection ablation, the degraded users, '
    'the sensitivity settings); docs/benchmark.md lists them.')

# Each source's own flags (an error with another --data).
SOURCE_FLAGS = {
    name: [leaf.name for leaf in LEAVES if leaf.variant == name]
    for name in run_config.DATA}

# --help: the flags by concern (tests/experiments/cli_test.py checks that every flag the
# run reads is in one group).
# --help's order of the groups (a new one goes last).
_ORDER = ('Benchmark and world', 'Files', 'Methods and the protocol',
          'Reasoner', 'Simulated user', 'Statistics', 'Running', 'Several',
          'Outputs')
HELP_GROUPS = tuple(sorted(
    config_flags.help_groups(LEAVES, extra=(
        ('Benchmark and world', ['data', 'benchmark']),
        ('Running', ['compilation_cache', 'sweep', 'suite']))),
    key=lambda group: next((i for i, o in enumerate(_ORDER)
                            if group[0].startswith(o)), len(_ORDER))))
# Defaults that come from the --benchmark preset, as --help shows them.
HELP_DEFAULTS = {
    name: 'the --benchmark preset\'s: ' + ', '.join(
        f'{b}: {run_config.BENCHMARKS[b][name]}' for b in run_config.BENCHMARKS)
    for name in ('renditions', 'captions', 'user_style', 'user_language')}
HELP_DEFAULTS['reasoner'] = ('grounded on --data=world, rules with '
                             '--describe_layout and on real data')


def given(name: str) -> bool:
  return config_flags.given(name)


def _data(values: dict, benchmark: str, given,
          user: simulated_user.UserConfig):
  """``RunConfig.data`` of ``values`` (``user``: the world's user);
  ``ValueError`` (a line per flag) when flags of another source are
  ``given``."""
  name = run_config.DATA_ALIASES.get(values['data'], values['data'])
  wrong = [f'--{flag} is for --data={other}, not --data={name}'
           for other, names in SOURCE_FLAGS.items() if other != name
           for flag in names
           if flag not in SOURCE_FLAGS[name] and flag in given]
  if wrong:
    raise ValueError('\n'.join(wrong))
  if name == files_source.FilesData.NAME:
    return files_source.FilesData(
        **config_tree.kwargs(files_source.FilesData, values))
  return world_source.WorldData.preset(
      benchmark, world_fields=config_tree.kwargs(generator.WorldConfig,
                                                 values),
      user=user,
      **config_tree.kwargs(world_source.WorldData, values, nested=False))


def _user(values: dict, benchmark: str) -> simulated_user.UserConfig:
  """The world's user's config: the ``benchmark`` preset's style and
  language unless given, the draws the driver imposes
  (``drivers.user_draws``) or --user_draws."""
  fields = config_tree.kwargs(simulated_user.UserConfig, values)
  preset = run_config.BENCHMARKS[benchmark]
  for field, flag in (('style', 'user_style'), ('language', 'user_language')):
    fields.setdefault(field, preset[flag])
  fields['draws'] = drivers.user_draws(values['simulation']) or fields.get(
      'draws', 'numpy')
  return simulated_user.UserConfig(**fields)


# The flags that name a file or folder: flags.txt holds them absolute, so
# the viewer (and a resumed run) started elsewhere finds what the run read.
PATH_FLAGS = ('annotations', 'cache_dir', 'captioner_checkpoint',
              'checkpoint_dir', 'clip_dir', 'output_dir', 'reasoner_adapter',
              'reasoner_checkpoint', 'text_encoder_dir')


def absolute_paths(text: str) -> str:
  """``flags_into_string()`` with every ``PATH_FLAGS`` value made
  absolute (relative to the working directory)."""
  out = []
  for line in text.splitlines():
    name, eq, value = line.partition('=')
    if eq and name.lstrip('-') in PATH_FLAGS and value and not (
        os.path.isabs(value)):
      line = f'{name}={os.path.abspath(value)}'
    out.append(line)
  return '\n'.join(out) + ('\n' if text.endswith('\n') else '')


def config_from_flags() -> run_config.RunConfig:
  """The ``RunConfig`` of the flags (every flag is read here, once;
  ``config_from_values``); ``app.UsageError`` names every problem."""
  values = config_flags.values(LEAVES)
  try:
    return config_from_values(
        values, _BENCHMARK.value, {n for n in values if given(n)},
        flags_text=absolute_paths(flags.FLAGS.flags_into_string()),
        processes=processes())
  except validation.ConfigError as e:
    raise app.UsageError(str(e)) from e


def config_from_values(
    values: dict, benchmark: str = run_config.DEFAULT_BENCHMARK,
    given=frozenset(), flags_text: str = '',
    processes: tuple[int, int] = (1, 0)) -> run_config.RunConfig:
  """The ``RunConfig`` of ``values`` (flag name -> value, every flag of
  ``LEAVES``; ``given``: the names set explicitly, which the ``benchmark``
  preset leaves alone and another source refuses).

  Raises ``validation.ConfigError`` naming every problem found at once:
  each part (user, data source, loop, ask policy, settings) is built on
  its own, a part that fails is replaced by its default so that the rest
  is still checked, and then ``validation.validate`` checks the whole."""
  problems = []

  def part(build, default):
    try:
      return build()
    except ValueError as e:
      problems.extend(str(e).splitlines())
      return default

  kwargs = config_tree.kwargs
  user = part(lambda: _user(values, benchmark), simulated_user.UserConfig())
  data = part(lambda: _data(values, benchmark, given, user), None)
  loop = part(lambda: ranking.LoopConfig(**kwargs(ranking.LoopConfig, values)),
              ranking.LoopConfig())
  ask = part(lambda: asking.AskPolicy(**kwargs(asking.AskPolicy, values)),
             asking.AskPolicy())
  settings = part(lambda: base.Settings(
      **kwargs(base.Settings, values, nested=False), ask=ask),
                  base.Settings())
  fields = kwargs(run_config.RunConfig, values, nested=False)
  name = values['reasoner']
  if name is None:  # the source's default
    source_data = world_source.WorldData.preset() if data is None else data
    name = run_config.source_of(source_data).default_reasoner()
  reasoner = part(lambda: reasoner_config(name, values, given),
                  registry.ReasonerConfig())
  count, pid = processes
  fields.update(loop=loop, settings=settings, reasoner=reasoner,
                num_processes=count, process_id=pid, flags_text=flags_text)
  if 'cache_dir' in fields:  # unset: the per-user cache
    fields['cache_dir'] = paths.cache_dir(fields['cache_dir'])
  if data is not None:
    fields['data'] = data
  config = part(lambda: run_config.RunConfig(**fields), None)
  if problems:
    if config is not None and data is not None:  # what the whole adds
      try:
        validation.validate(config, run_config.source(config),
                            create=False)
      except validation.ConfigError as e:
        problems.extend(str(e).splitlines())
    raise validation.ConfigError('\n'.join(problems))
  return config


def reasoner_config(name: str, values: dict, given=frozenset()
                    ) -> registry.ReasonerConfig:
  """The config of reasoner backend ``name``, its settings from ``values``
  (flag name -> value); ``ValueError`` for an unknown backend, or for
  --reasoner_adapter ``given`` to one that reads no adapter."""
  if name not in registry.REGISTRY:
    raise ValueError(f'unknown --reasoner {name!r}; valid: '
                     f'{", ".join(registry.names())}')
  config_type = registry.get(name).CONFIG
  settings = config_tree.kwargs(config_type, values, nested=False)
  if 'reasoner_adapter' in given and 'adapter' not in settings:
    raise ValueError(f'--reasoner_adapter is for --reasoner='
                     f'{registry.or_list(registry.reading("adapter"))}, '
                     f'not --reasoner={name}')
  return config_type(name=name, **settings)


def _parsed(name: str, text: str):
  """A --sweep or --suite value of setting ``name``: a backend's name is
  its config, with the reasoner flags' values."""
  if name == 'reasoner':
    return reasoner_config(text, config_flags.values(LEAVES))
  return flags.FLAGS[name].parser.parse(text)


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
    parts.append((sub, methods, [(n, text, _parsed(n, text))
                                 for n, text in settings]))
  return parts


def processes() -> tuple[int, int]:
  """``(num_processes, process_id)`` of the joined run."""
  return _PROCESSES['count'], _PROCESSES['id']


_PROCESSES = {'count': 1, 'id': 0}


def start_processes() -> None:
  """Joins the run's processes (--coordinator_address) before JAX starts
  its backend; checks the process flags first."""
  n, pid = flags.FLAGS.num_processes, flags.FLAGS.process_id
  coordinator = flags.FLAGS.coordinator_address
  if n < 1:
    raise app.UsageError(f'--num_processes must be >= 1, got {n}')
  if not 0 <= pid < n:
    raise app.UsageError(f'--process_id must be in 0..{n - 1}, got {pid}')
  if n > 1 and not coordinator:
    raise app.UsageError('--num_processes > 1 needs --coordinator_address '
                         '(or start them with experiments/launch.py)')
  try:
    _PROCESSES['count'], _PROCESSES['id'] = distributed.initialize(
        coordinator, n, pid)
  except (RuntimeError, ValueError) as e:
    raise app.UsageError(f'--coordinator_address={coordinator}: '
                         f'cannot join the run\'s processes ({e})') from e


def check_processes_agree(config: run_config.RunConfig) -> None:
  """Every process of the run was started with the same --num_processes
  and the same flags (its --process_id aside): checked by one collective
  before any work."""
  settings = '\n'.join(line for line in config.flags_text.splitlines()
                       if not line.startswith('--process_id='))
  try:
    distributed.check_agreement(
        flags.FLAGS.num_processes, settings,
        {name: flags.FLAGS[name].value for name in flags.FLAGS
         if name != 'process_id'})
  except ValueError as e:
    raise app.UsageError(str(e)) from e


def use_compilation_cache(config: run_config.RunConfig):
  """Compiled XLA programs (MiniLM per padded width, the captioner, the
  ranking core) kept beside Progress Memory (--compilation_cache): a later
  run loads them instead of compiling; the programs and so the results are
  the same. Every program is kept, however fast it compiled: a warm `main`
  compiled 53 small ones (metrics, bootstrap) again in 1.1 s that it loads
  in 0.1 s. The ranking core's programs are kept whole in
  ``executables/`` (``recovr_jax.executables``): a later run calls them
  without tracing them (about 2 s of a warm `main`)."""
  if _COMPILATION_CACHE.value and config.cache_dir:
    xla = pathlib.Path(config.cache_dir).absolute() / 'xla'
    jax.config.update('jax_compilation_cache_dir', str(xla))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
    executables.keep_in(xla / 'executables')


def parse_sweep(specs):
  """``['NAME=V1|V2']`` -> ``[(NAME, [(V1, parsed V1), ...])]``, checked."""
  out = []
  for spec in specs:
    name, sep, values = spec.partition('=')
    if not sep or not values:
      raise app.UsageError(f'--sweep {spec!r}: expected NAME=V1|V2|...')
    if name not in run_config.SWEEPABLE:
      raise app.UsageError(f'--sweep {name!r} is not sweepable; valid: '
                           f'{", ".join(run_config.SWEEPABLE)}')
    parsed = []
    for v in values.split('|'):
      try:
        parsed.append((v, _parsed(name, v)))
      except ValueError as e:
        raise app.UsageError(f'--sweep {name}={v}: {e}') from e
    out.append((name, parsed))
  return out
