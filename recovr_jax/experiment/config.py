"""The frozen, typed configuration of one run (flax wmt's config style).

``experiments/run.py`` reads its flags once into a ``RunConfig``; the library
(``experiment.runner``) takes nothing else. Sweeps build new configurations
with ``with_setting`` instead of mutating flags.
"""

import dataclasses

from recovr_jax.methods import base as methods_base
from recovr_jax.protocol import ranking
from recovr_jax.world import encoders
from recovr_jax.world import generator as world_lib
from recovr_jax.world import simulated_user

DATA = ('world', 'webvid_covr')
# The embedded benchmarks: the flag values --benchmark sets unless a flag is
# given explicitly. v2 (the default) is the one with no oracle:
# several renditions per combination with encoders trained for them,
# captions written by the captioning VLM, and the paper's user in its own
# words. v1 is the first benchmark, kept for comparison: one
# video per combination, ground-truth captions, the template user speaking
# the rules reasoner's lexicon.
BENCHMARKS = {
    'v2': {'renditions': 4, 'checkpoint_dir': encoders.RENDITIONS_CHECKPOINT_DIR,
           'captions': 'model', 'user_style': 'paper',
           'user_language': 'own'},
    'v1': {'renditions': 1, 'checkpoint_dir': None, 'captions': 'oracle',
           'user_style': 'template', 'user_language': 'lexicon'},
}
DEFAULT_BENCHMARK = 'v2'
# model: Progress Memory holds the captioning VLM's captions; oracle: the
# world's ground-truth captions (an ablation: the system sees the truth).
CAPTIONS = ('oracle', 'model')
SIMULATIONS = ('host', 'jit')


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything one run reads."""
  methods: tuple[str, ...]
  output_dir: str
  data: str = 'world'
  world: world_lib.WorldConfig = world_lib.WorldConfig()
  checkpoint_dir: str | None = None       # world encoders (None: shipped)
  annotations: str | None = None          # webvid_covr CSV
  gallery_embeddings: str | None = None   # webvid_covr .npz/.safetensors
  clip_dir: str | None = None             # webvid_covr CLIP directory
  # webvid_covr: L2-normalise embedding rows (False: raw dot products).
  normalize_rows: bool = True
  # webvid_covr: references outside the gallery, their own file.
  reference_embeddings: str | None = None
  # webvid_covr: precomputed turn-0 composed queries, one per CSV row.
  query_embeddings: str | None = None
  # webvid_covr: an annotation id in no embedding file: 'error' or 'drop'.
  missing_ids: str = 'error'
  # webvid_covr: who words the caption user's feedback: 'none' (its own
  # rules) or 'smollm2' (SmolLM2-135M-Instruct, real.caption_user.LMPhraser).
  user_phraser: str = 'none'
  # TREC run files (per method and turn) and qrels in <output_dir>/trec.
  export_trec: bool = False
  cache_dir: str | None = 'cache'         # Progress Memory cache
  captions: str = 'model'                 # world: one of CAPTIONS
  captioner_checkpoint: str | None = None  # world: None = shipped
  reasoner: str = 'rules'
  reasoner_checkpoint: str | None = None
  reasoner_adapter: str | None = None      # smollm2_world: None = shipped
  # Chat-LM reasoners (smollm2, smollm2_world; reasoning/chat_lm.py):
  prompt_wording: int = 1                  # one of prompts.WORDINGS
  few_shot: int | None = None              # None: 3 (smollm2), 0 (_world)
  reasoner_dtype: str = 'float32'          # or 'bfloat16'
  constrained_decoding: bool = True
  reasoner_batch: int = 16                 # sessions per generation call
  num_sessions: int | None = None         # None: every test triplet
  batch_size: int = 100
  loop: ranking.LoopConfig = ranking.LoopConfig()
  settings: methods_base.Settings = methods_base.Settings()
  user: simulated_user.UserConfig = simulated_user.UserConfig()
  user_seed: int = 0
  bootstrap_resamples: int = 10_000
  # The baseline the report's paired bootstrap compares recovr with
  # (DESIGN section 5: default umivr, the paper's Table 7); 'strongest': the
  # baseline with the best mean R@1 over feedback turns. A baseline not in
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
  flags_text: str = ''                     # written to flags.txt


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


def chat_options(config: RunConfig) -> dict:
  """The chat-LM reasoner's options (``reasoning.chat_lm.make``) of a
  run's flags."""
  return {'few_shot': config.few_shot, 'wording': config.prompt_wording,
          'dtype': config.reasoner_dtype,
          'constrained_decoding': config.constrained_decoding,
          'batch_size': config.reasoner_batch,
          'adapter': config.reasoner_adapter}
