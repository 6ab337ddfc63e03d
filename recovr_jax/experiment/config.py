"""The frozen, typed configuration of one run (flax wmt's config style).

``experiments/run.py`` reads its flags once into a ``RunConfig``; the library
(``experiment.runner``) takes nothing else. Sweeps build new configurations
with ``with_setting`` instead of mutating flags.
"""

import dataclasses

from recovr_jax.methods import base as methods_base
from recovr_jax.protocol import ranking
from recovr_jax.protocol import source as source_lib
from recovr_jax.real import source as real_source
from recovr_jax.reasoning import registry
from recovr_jax.world import simulated_user
from recovr_jax.world import source as world_source

# The data sources, looked up by name (--data): each its config type and
# its ``protocol.source.Source``.
SOURCES = {
    world_source.WorldData.NAME: (world_source.WorldData,
                                  world_source.WorldSource),
    real_source.RealData.NAME: (real_source.RealData, real_source.RealSource),
}
DATA = tuple(SOURCES)
# The embedded benchmarks (constructors of the world's config).
BENCHMARKS = world_source.BENCHMARKS
DEFAULT_BENCHMARK = world_source.DEFAULT_BENCHMARK


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything one run reads."""
  methods: tuple[str, ...]
  output_dir: str
  # The data source's own config (world_source.WorldData or
  # real_source.RealData); ``source(config)`` is its Source.
  data: world_source.WorldData | real_source.RealData = (
      world_source.WorldData())
  # TREC run files (per method and turn) and qrels in <output_dir>/trec.
  export_trec: bool = False
  cache_dir: str | None = 'cache'         # Progress Memory cache
  reasoner: str = 'rules'
  reasoner_checkpoint: str | None = None
  reasoner_adapter: str | None = None      # smollm2_world: None = shipped
  # Chat-LM reasoners (smollm2, smollm2_world; reasoning/chat_lm.py):
  prompt_wording: int = 1                  # one of prompts.WORDINGS
  few_shot: int | None = None              # None: 3 (smollm2), 0 (_world)
  reasoner_dtype: str = 'float32'          # or 'bfloat16'
  constrained_decoding: bool = True
  reasoner_batch: int = 64                 # sessions per generation call
  num_sessions: int | None = None         # None: every test triplet
  batch_size: int = 100
  loop: ranking.LoopConfig = ranking.LoopConfig()
  settings: methods_base.Settings = methods_base.Settings()
  user: simulated_user.UserConfig = simulated_user.UserConfig()
  user_seed: int = 0
  bootstrap_resamples: int = 10_000
  # The baseline the report's paired bootstrap compares recovr with
  # (docs/definitions.md §5: default umivr, the paper's Table 7); 'strongest':
  # the baseline with the best mean R@1 over feedback turns. A baseline not in
  # `methods` falls back to the strongest one present (bootstrap.json names
  # the one used).
  bootstrap_baseline: str = 'umivr'
  # Further methods compared with recovr by the same paired bootstrap (e.g.
  # the ablations), each in bootstrap_also.json and report.md.
  bootstrap_also: tuple[str, ...] = ()
  seed: int = 0                            # the bootstrap's
  # Share of a method's sessions that may raise (each counted as a miss)
  # before the run fails (non-zero exit, after writing its outputs).
  max_error_share: float = 0.0
  # Run on encoders trained on another world's split (its test leaks).
  allow_other_world_encoders: bool = False
  # Load checkpoint directories that have no checksums.json (listed in the
  # outputs); off: refused.
  allow_unverified_checkpoints: bool = False
  resume: bool = True
  simulation: str = 'host'
  jit_chunk_size: int = 64                 # 0: every session every turn
  session_shards: int = 1
  platform: str = 'auto'
  # Several processes (experiment.distributed): process_id of num_processes.
  num_processes: int = 1
  process_id: int = 0
  coordinator_address: str | None = None
  # The jitted driver's gallery rows split over the processes.
  gallery_over_processes: bool = False
  flags_text: str = ''                     # written to flags.txt

  def reasoner_config(self) -> registry.ReasonerConfig:
    """The reasoner's settings, as its backend reads them."""
    return registry.ReasonerConfig(
        name=self.reasoner, checkpoint=self.reasoner_checkpoint,
        chat=registry.ChatOptions(
            few_shot=self.few_shot, wording=self.prompt_wording,
            dtype=self.reasoner_dtype,
            constrained_decoding=self.constrained_decoding,
            batch_size=self.reasoner_batch, adapter=self.reasoner_adapter))


def source(config: RunConfig) -> source_lib.Source:
  """The ``Source`` of ``config.data`` (a new one per call; cheap: nothing
  loads)."""
  return source_of(config.data)


def source_of(data) -> source_lib.Source:
  """The ``Source`` of a source config (``RunConfig.data``)."""
  for config_type, source_type in SOURCES.values():
    if isinstance(data, config_type):
      return source_type(data)
  raise ValueError(f'RunConfig.data is a {type(data).__name__}; '
                   f'expected one of '
                   f'{", ".join(c.__name__ for c, _ in SOURCES.values())}')


# Sweepable settings: name -> (section of RunConfig or None, field).
SWEEPABLE = {
    'rrf_k': ('loop', 'rrf_k'), 'list_length': ('loop', 'list_length'),
    'window': ('loop', 'window'), 'kappa_neg': ('loop', 'kappa'),
    'kappa_neu': ('loop', 'kappa'), 'kappa_pos': ('loop', 'kappa'),
    'recency': ('loop', 'recency'), 'gamma': ('loop', 'gamma'),
    'num_turns': ('loop', 'num_turns'),
    'rank_cap_placement': ('loop', 'rank_cap_placement'),
    'merlin_alpha': ('settings', 'merlin_alpha'),
    'avoid_penalty': ('settings', 'avoid_penalty'),
    'question_tau': ('settings', 'question_tau'),
    'unreflected_rank_cap': ('settings', 'unreflected_rank_cap'),
    'noise_rate': ('user', 'noise_rate'), 'drop_rate': ('user', 'drop_rate'),
    'user_policy': ('user', 'policy'),
    'modify_threshold': ('user', 'modify_threshold'),
    'user_style': ('user', 'style'), 'user_language': ('user', 'language'),
    'ask_mode': ('ask', 'mode'), 'ask_threshold': ('ask', 'threshold'),
    'ask_budget': ('ask', 'budget'),
    'reasoner': ('run', 'reasoner'),
    'prompt_wording': ('run', 'prompt_wording'),
}
_KAPPA_INDEX = {'kappa_neg': 0, 'kappa_neu': 1, 'kappa_pos': 2}


def with_setting(config: RunConfig, name: str, value) -> RunConfig:
  """A copy of ``config`` with sweepable setting ``name`` set to ``value``
  (already parsed to its type); the sub-configs validate it."""
  if name not in SWEEPABLE:
    raise ValueError(f'{name!r} is not sweepable; valid: '
                     f'{", ".join(SWEEPABLE)}')
  section, field = SWEEPABLE[name]
  if name in _KAPPA_INDEX:
    kappa = list(config.loop.kappa)
    kappa[_KAPPA_INDEX[name]] = value
    value = tuple(kappa)
  if section == 'run':
    if name == 'prompt_wording':
      value = int(value)
    return dataclasses.replace(config, **{field: value})
  if section == 'ask':
    ask = dataclasses.replace(config.settings.ask, **{field: value})
    return dataclasses.replace(config, settings=dataclasses.replace(
        config.settings, ask=ask))
  sub = dataclasses.replace(getattr(config, section), **{field: value})
  return dataclasses.replace(config, **{section: sub})
