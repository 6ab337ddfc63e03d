"""absl flags of the embedded world, shared by the experiment entry points
(derived from ``WorldConfig``'s fields, where each is declared once)."""

from absl import app
from absl import flags

from experiments.common import config_flags
from recovr_jax import config_tree
from recovr_jax.envs.world.benchmark import generator

LEAVES = config_flags.define(generator.WorldConfig, __name__)


def world_config(**overrides) -> generator.WorldConfig:
  """The ``WorldConfig`` of the flags (validated by ``WorldConfig``), with
  ``overrides`` of some fields."""
  return generator.WorldConfig(**{**world_fields(), **overrides})


def world_fields() -> dict:
  """The ``WorldConfig`` fields of the flags (--renditions only when given:
  a benchmark preset sets it otherwise)."""
  return config_tree.kwargs(generator.WorldConfig,
                            config_flags.values(LEAVES))


def require_seven_attributes(entry: str, why: str) -> None:
  """Refuses ``--describe_layout`` for an entry point whose data or models
  know the seven attributes only (``why``), before any work starts."""
  if flags.FLAGS.describe_layout:
    raise app.UsageError(f'{entry} does not take --describe_layout: {why}')
