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
# The baselines the report's bootstrap may compare ReCoVR against.
BASELINES = ['ivr', 'merlin', 'umivr', 'history_rewrite', 'ivr_rankcap',
             'umivr_rankcap', 'merlin_rankcap']


def names() -> tuple[str, ...]:
  return tuple(REGISTRY)


def register(name: str, factory, baseline: bool = False):
  """Adds ``factory`` (``Settings -> Method``) under ``name``."""
  if name in REGISTRY:
    raise ValueError(f'method {name!r} is already registered')
  REGISTRY[name] = factory
  if baseline:
    BASELINES.append(name)


def unregister(name: str):
  REGISTRY.pop(name)
  if name in BASELINES:
    BASELINES.remove(name)


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


