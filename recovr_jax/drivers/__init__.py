"""The drivers: how a run's sessions are stepped (``--simulation``).

A driver runs one batch of one method's sessions (``Driver.run_batch``) on
an assembled run (``run.assemble.Run``). There are three, and
``choose`` is the one place a run's driver is picked:

* ``host`` (``host_driver.OnHost``): the protocol's Python loop, a
  turn at a time on the host (``drivers.host_driver``);
* ``jit`` on a source with a traced face (``protocol.data_source.TracedFace``,
  the world): each turn of a batch one ``vmap``-ped program (user,
  method, ranking), the user's words and their reading tabulated
  (``jit_driver.Traced``);
* ``jit`` on any other source: the same turns, with the host's user and
  reasoning planning each turn before it is ranked (``jit_driver.Stepped``,
  ``drivers.stepped``).

Adding a driver: a ``Driver`` subclass in its own module and a line in
``choose``.
"""

from recovr_jax.drivers import driver
from recovr_jax.drivers import host_driver
from recovr_jax.drivers import jit_driver
from recovr_jax.protocol import data_source

Driver = driver.Driver
# The --simulation values.
NAMES = ('host', 'jit')


def choose(simulation: str, source: data_source.Source) -> Driver:
  """The driver of ``--simulation=simulation`` on ``source``."""
  if simulation == 'host':
    return host_driver.OnHost()
  if simulation == 'jit':
    if isinstance(source, data_source.TracedFace):
      return jit_driver.Traced()
    return jit_driver.Stepped()
  raise ValueError(f'unknown --simulation {simulation!r}; valid: '
                   f'{", ".join(NAMES)}')


def user_draws(simulation: str) -> str | None:
  """The simulated user's draws ``--simulation`` imposes (the jitted
  drivers': 'jax', on any source), or None: the user's own setting."""
  return choose(simulation, None).USER_DRAWS
