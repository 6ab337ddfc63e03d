"""The driver interface (``drivers`` chooses one per run)."""

import abc

from recovr_jax.protocol import environment
from recovr_jax.protocol import data_source


class Driver(abc.ABC):
  """Runs the batches of an assembled run (``run.assemble.Run``)."""

  NAME: str = ''   # its --simulation value
  # A multi-process run: every process takes part in every batch (one mesh
  # over all processes' devices); otherwise each runs its own share.
  JOINT: bool = False
  # The user and the method are called a turn at a time in the host's
  # Python loop, where a caller can watch or take part (the study, the
  # reading benchmark need it).
  STEPWISE: bool = False
  # The simulated user's draws it imposes ('jax': drawn as inside jit, so
  # the host's answers equal the traced face's), or None: the user's own.
  USER_DRAWS: str | None = None
  # It can split sessions over devices (--session_shards) and the gallery
  # over processes (--gallery_over_processes).
  SHARDS: bool = False

  def problems(self, config, source: data_source.Source) -> list[str]:
    """What this driver cannot run of ``config`` on ``source`` (a line
    each, naming the flag), before anything loads."""
    del config, source
    return []

  def prepare(self, source: data_source.Source,
              built: data_source.Built) -> data_source.Built:
    """``built`` with what this driver runs on (once per build)."""
    del source
    return built

  @abc.abstractmethod
  def run_batch(self, run, method, batch, loop, label: str,
                errors: dict) -> environment.BatchResult:
    """``method`` on the sessions ``batch`` of ``run`` (``loop``: its
    ``ranking.LoopConfig``); sessions that raise are recorded in ``errors``
    (position -> message) where the driver can go on without them.
    ``label`` names the batch in messages."""
