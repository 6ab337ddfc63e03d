"""Methods under the shared protocol, by name (big_vision-style registry).

Each entry is a factory ``Settings -> Method``; ``make(name, settings)``
builds one and an unknown name is an error listing the valid ones. Adding a
baseline is one module and one line here (or a ``register`` call from your
own code; see the README's "Adding a method").
"""

from recovr_jax.methods import base
from recovr_jax.methods import history_rewrite
from recovr_jax.methods import ivr
from recovr_jax.methods import merlin
from recovr_jax.methods import rank_cap_transplant
from recovr_jax.methods import recovr
from recovr_jax.methods import umivr


def _transplant(inner, name):
  return lambda settings: rank_cap_transplant.RankCapped(inner(settings),
                                                         name)


REGISTRY = {
    **recovr.VARIANTS,
    'ivr': ivr.IVR,
    'merlin': merlin.MERLIN,
    'umivr': umivr.UMIVR,
    'history_rewrite': history_rewrite.HistoryRewrite,
    'ivr_rankcap': _transplant(ivr.IVR, 'ivr_rankcap'),
    'umivr_rankcap': _transplant(umivr.UMIVR, 'umivr_rankcap'),
    'merlin_rankcap': _transplant(merlin.MERLIN, 'merlin_rankcap'),
}
# The names tables and plots print (``display_name``); a method registered
# without one is printed under its registry name.
DISPLAY_NAMES = {
    'recovr': 'ReCoVR',
    'recovr_current': 'ReCoVR (rank-cap: current turn)',
    'covr_only': 'ReCoVR, composed only',
    't2v_only': 'ReCoVR, T2V only',
    'intent_only': 'Intent Pathway only',
    'no_rankcap': 'w/o rank-cap',
    'no_reflection': 'w/o Reflection',
    'no_keep': 'w/o keep',
    'no_avoid': 'w/o avoid',
    'covr_plain': 'Composed, plain',
    't2v_plain': 'T2V, plain',
    'fixed_anchor': 'Fixed anchor',
    'rankcap_only': 'Rank-cap only',
    'single_turn_fusion': 'Single-turn fusion',
    'static_rrf': 'Static RRF',
    'uniform_rrf': 'Uniform RRF',
    'penalty_rrf': 'Penalty RRF',
    'sim_max': 'Similarity max',
    'sim_sum': 'Similarity sum',
    'ivr': 'IVR',
    'merlin': 'MERLIN',
    'umivr': 'UMIVR',
    'history_rewrite': 'History rewrite',
    'ivr_rankcap': 'IVR + rank-cap',
    'umivr_rankcap': 'UMIVR + rank-cap',
    'merlin_rankcap': 'MERLIN + rank-cap',
}
# The paper's main comparison: ReCoVR and the four adapted baselines (the
# compact table of ``tables.tex``).
MAIN = ('recovr', 'ivr', 'merlin', 'umivr', 'history_rewrite')
# The baselines the report's bootstrap may compare ReCoVR against.
BASELINES = ['ivr', 'merlin', 'umivr', 'history_rewrite', 'ivr_rankcap',
             'umivr_rankcap', 'merlin_rankcap']


def names() -> tuple[str, ...]:
  return tuple(REGISTRY)


def register(name: str, factory, baseline: bool = False,
             display: str | None = None):
  """Adds ``factory`` (``Settings -> Method``) under ``name``, printed in
  tables and plots as ``display`` (default: ``name``)."""
  if name in REGISTRY:
    raise ValueError(f'method {name!r} is already registered')
  REGISTRY[name] = factory
  if baseline:
    BASELINES.append(name)
  if display is not None:
    DISPLAY_NAMES[name] = display


def unregister(name: str):
  REGISTRY.pop(name)
  DISPLAY_NAMES.pop(name, None)
  if name in BASELINES:
    BASELINES.remove(name)


def display_name(name: str) -> str:
  """The name tables and plots print for the method ``name``."""
  return DISPLAY_NAMES.get(name, name)


def make(name: str, settings: base.Settings = base.Settings()) -> base.Method:
  """The method registered as ``name``."""
  if name not in REGISTRY:
    raise ValueError(f'unknown method {name!r}; valid: '
                     f'{", ".join(REGISTRY)}')
  method = REGISTRY[name](settings)
  if method.name != name:
    raise ValueError(f'method registered as {name!r} calls itself '
                     f'{method.name!r}')
  return method


