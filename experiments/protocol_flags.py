"""The run's flags of the methods and the protocol (the ranking loop, the
methods' settings, the Question Asker's policy), read into their configs."""

from absl import flags

from recovr_jax import methods
from recovr_jax.core import fusion
from recovr_jax.methods import base as methods_base
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import asking

_METHODS = flags.DEFINE_list(
    'methods', ['recovr', 'ivr', 'merlin', 'umivr', 'history_rewrite'],
    f'Methods to run; valid: {", ".join(methods.names())}.')

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

_UNREFLECTED = flags.DEFINE_enum(
    'unreflected_rank_cap', 'neutral', list(methods_base.UNREFLECTED_RANK_CAPS),
    'Rank-cap of the ReCoVR variants without State Reflection '
    '(no_reflection, ...): neutral caps the top-1 just rejected at '
    'kappa_neu (sigma neutral); stagnation, the paper\'s reading ("can only '
    'react to stagnation"), gives it no cap of its own, so only top-1s shown '
    'before it are demoted (docs/definitions.md §3).')

HELP_GROUP = ('Methods and the protocol', [
    'methods', 'num_turns', 'list_length', 'window', 'rrf_k', 'recency',
    'gamma', 'kappa_neg', 'kappa_neu', 'kappa_pos', 'rank_cap_placement',
    'avoid_penalty', 'question_tau', 'merlin_alpha',
    'unreflected_rank_cap', 'ask_mode', 'ask_threshold', 'ask_tau',
    'ask_budget'])


def method_names() -> tuple[str, ...]:
  return tuple(_METHODS.value)


def loop() -> ranking.LoopConfig:
  """The ranking loop's config (``ValueError`` names a bad value)."""
  return ranking.LoopConfig(
      num_turns=_NUM_TURNS.value, window=_WINDOW.value,
      list_length=_LIST.value, rrf_k=_RRF_K.value,
      recency=_RECENCY.value, gamma=_GAMMA.value,
      kappa=(_KAPPA_NEG.value, _KAPPA_NEU.value, _KAPPA_POS.value),
      rank_cap_placement=_PLACEMENT.value)


def ask() -> asking.AskPolicy:
  return asking.AskPolicy(mode=_ASK_MODE.value, threshold=_ASK_THRESHOLD.value,
                          tau=_ASK_TAU.value, budget=_ASK_BUDGET.value)


def settings(ask_policy: asking.AskPolicy) -> methods_base.Settings:
  return methods_base.Settings(
      merlin_alpha=_ALPHA.value, avoid_penalty=_AVOID.value,
      question_tau=_QUESTION_TAU.value, ask=ask_policy,
      unreflected_rank_cap=_UNREFLECTED.value)
