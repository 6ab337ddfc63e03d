"""The run's simulated-user flags, read into ``UserConfig``."""

from absl import flags

from experiments import source_flags
from recovr_jax.world import simulated_user

_STYLE = flags.DEFINE_enum(
    'user_style', None, list(simulated_user.STYLES),
    "The user's feedback (default: the --benchmark preset's). template: "
    'Modify names any differences, Rewrite 2-5 of 7 attributes. paper: Modify names at most --modify_threshold '
    'differences, Rewrite describes the target completely (appendix D.2).')

_LANGUAGE = flags.DEFINE_enum(
    'user_language', None, list(simulated_user.LANGUAGES),
    "The user's words (default: the --benchmark preset's). lexicon: the "
    "world's caption words, all known to the rules reasoner. own: its own "
    'phrase bank (caption words, training and dev phrasings), partly '
    'unknown to it. own_v3: own with the test phrasings '
    '(docs/reading.md).')

_POLICY = flags.DEFINE_enum('user_policy', 'mixed', list(simulated_user.POLICIES),
                            "The user's policy.")

_MODIFY = flags.DEFINE_integer('modify_threshold', 2,
                               'm: Modify when at most m attributes differ.')

_NOISE = flags.DEFINE_float('noise_rate', 0.0, 'Surface noise per word.')

_DROP = flags.DEFINE_float('drop_rate', 0.0, 'Constraint dropping rate.')

_USER_SEED = flags.DEFINE_integer('user_seed', 0, "The user's seed.",
                                  lower_bound=0)

_USER_DRAWS = flags.DEFINE_enum(
    'user_draws', 'numpy', list(simulated_user.DRAWS),
    "Source of the user's random decisions. jax: the draws of the jitted "
    'mode, so a host run equals a --simulation=jit run list for list.')

HELP_GROUP = ('Simulated user', [
    'user_style', 'user_language', 'user_policy', 'modify_threshold',
    'noise_rate', 'drop_rate', 'user_seed', 'user_draws'])


def user(draws: str | None = None) -> simulated_user.UserConfig:
  """The user's config; ``draws``: the draws the driver imposes
  (``drivers.user_draws``; None: --user_draws)."""
  return simulated_user.UserConfig(
      modify_threshold=_MODIFY.value, policy=_POLICY.value,
      noise_rate=_NOISE.value, drop_rate=_DROP.value,
      draws=draws or _USER_DRAWS.value,
      style=source_flags.user_preset('user_style', _STYLE.value),
      language=source_flags.user_preset('user_language', _LANGUAGE.value))


def seed() -> int:
  return _USER_SEED.value
