"""One run as several processes, on JAX's distributed runtime.

``initialize`` joins the processes (``jax.distributed.initialize``; on CPU
with gloo collectives); every process builds the same config and
environment. The host driver runs each process's share of the batches
(batch ``b`` on process ``b % num_processes``), saved as a resumed run
would find them; the jitted driver runs every batch on every process, its
sessions split over one mesh of all processes' devices, process 0 saving
it (``batches.run_together``). After a ``barrier``, process 0 reads every
batch back and writes the outputs, so
the outputs do not depend on the number of processes (tests/
distributed_test.py). A process that dies stops the others at the next
barrier with JAX's error naming it; the same command resumes from the
batches saved.
"""

import errno
import socket

import jax


def check_port(coordinator_address: str) -> None:
  """Refuses a coordinator address whose port another program holds (JAX's
  coordination service would crash the process, not report it). Checked by
  process 0, which serves it."""
  host, sep, port = coordinator_address.rpartition(':')
  if not sep or not port.isdigit():
    raise ValueError(f'--coordinator_address={coordinator_address}: expected '
                     'HOST:PORT')
  with socket.socket(socket.AF_INET6 if ':' in host.strip('[]')
                     else socket.AF_INET) as s:
    try:
      s.bind((host.strip('[]') or '0.0.0.0', int(port)))
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        raise ValueError(
            f'--coordinator_address={coordinator_address}: port {port} is '
            'already in use (another run, or a process still holding it); '
            'choose another port') from e
      raise ValueError(f'--coordinator_address={coordinator_address}: '
                       f'cannot listen there ({e.strerror})') from e


def initialize(coordinator_address: str | None, num_processes: int,
               process_id: int) -> tuple[int, int]:
  """Joins the run's processes; returns ``(num_processes, process_id)``.

  ``coordinator_address='auto'``: the cluster's own (SLURM, TPU pods:
  ``jax.distributed.initialize()`` finds them). One process: nothing to
  join."""
  if coordinator_address is None and num_processes == 1:
    return 1, 0
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  if coordinator_address == 'auto':
    jax.distributed.initialize()
  else:
    if process_id == 0:
      check_port(coordinator_address)
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes,
                               process_id=process_id)
  return jax.process_count(), jax.process_index()


def check_agreement(num_processes: int, settings: str,
                    values: dict | None = None) -> None:
  """Refuses to go on unless every process was started with the same
  process count and the same settings (``settings``: the run's flags, its
  own process id left out): one all-gather of ``(count, hash)``. ``values``:
  flag name -> value, the same names in every process (every defined
  flag): when the settings differ, a second all-gather names the flags
  whose values differ."""
  if jax.process_count() == 1 and num_processes == 1:
    return
  import hashlib  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  def digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4],
                          'little') & 0x7FFFFFFF
  mine = np.asarray([num_processes, digest(settings)], np.int32)
  every = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 2)
  counts = sorted({int(c) for c in every[:, 0]} | {jax.process_count()})
  if len(counts) > 1:
    raise ValueError(
        f'the processes were started with different --num_processes '
        f'({", ".join(map(str, counts))}; {jax.process_count()} joined): '
        'start every process with the same count')
  differ = [i for i, h in enumerate(every[:, 1]) if h != every[0, 1]]
  if differ:
    named = ''
    if values:
      names = sorted(values)
      table = np.asarray(multihost_utils.process_allgather(np.asarray(
          [digest(repr(values[n])) for n in names], np.int32))).reshape(
              -1, len(names))
      flags_differ = [f'--{n}' for j, n in enumerate(names)
                      if (table[:, j] != table[0, j]).any()]
      if flags_differ:
        named = f'; they differ in {", ".join(flags_differ)}'
    raise ValueError(
        f'process {differ[0]} was started with other settings than process '
        f'0 (flags or flagfile contents differ{named}): start every process '
        'with the same flags')


def barrier(name: str) -> None:
  """Waits until every process of the run reaches ``name`` (no-op alone)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)
