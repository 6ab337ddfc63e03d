"""The jitted drivers: each turn of a batch one ``vmap``-ped program, run
turn by turn (``drivers.jit_runner``), on a source's traced face or with the
host's user and reasoning planning each turn (``drivers.stepped``)."""

import abc
import dataclasses

import jax

from recovr_jax.drivers import driver
from recovr_jax.drivers import jit_runner
from recovr_jax.drivers import stepped
from recovr_jax import methods
from recovr_jax.profiling import part as profiled
from recovr_jax.protocol import source as source_lib
from recovr_jax.protocol import traced


class _Jitted(driver.Driver):
  """What both jitted drivers share: the method check, the device mesh and
  the chunked run of a ``source_lib.JitBatch``."""

  NAME = 'jit'
  JOINT = True
  SHARDS = True
  USER_DRAWS = 'jax'
  # A partial last batch runs padded to --batch_size (jit_runner.run's pad_to):
  # the full batches' compiled program, not one of its own.
  PAD_BATCHES = False

  def problems(self, config, source):
    out = []
    for name in config.methods:
      if name not in methods.REGISTRY:
        continue  # the method check names it
      try:
        traced.check_supported(methods.make(name, config.settings))
      except traced.Unsupported as e:
        out.append(f'--simulation=jit: {e}; change {e.flag} or use '
                   '--simulation=host')
    return out

  @abc.abstractmethod
  def batch(self, run, method, sessions, loop) -> source_lib.JitBatch:
    """What ``drivers.jit_runner.run`` runs for this batch."""

  def run_batch(self, run, method, batch, loop, label, errors):
    del label, errors  # a batch that raises fails the run
    config = run.config
    with profiled('jitted sessions'):
      mesh = _mesh(config)
      face = self.batch(run, method, batch, loop)
      trace = jit_runner.run(
          face.env, face.config, batch, config.user_seed,
          log=lambda msg: print(f'[{method.name}] {msg}', flush=True),
          chunk_size=jit_runner.chunk_size(config.jit_chunk_size), mesh=mesh,
          pad_to=_full_batch(run) if self.PAD_BATCHES else None)
      return face.result(trace)


def _full_batch(run) -> int:
  """The sessions of the run's first (full) batch: ``--batch_size``, or
  every session when there are fewer."""
  total = len(run.env.target)
  return min(run.config.batch_size, run.config.num_sessions or total, total)


def _mesh(config):
  """The device mesh of ``config``'s sharding flags (None: one device)."""
  from recovr_jax.core import sharding  # pylint: disable=g-import-not-at-top
  if config.gallery_over_processes:  # rows over processes
    return sharding.process_gallery_mesh(config.session_shards)
  if config.num_processes > 1:  # one mesh over every process's devices
    return sharding.process_mesh(config.session_shards)
  if config.session_shards > 1:
    return sharding.make_mesh(gallery_shards=1,
                              session_shards=config.session_shards,
                              devices=jax.local_devices())
  return None


class Traced(_Jitted):
  """A source's traced face (``source_lib.TracedFace``): its user and the
  reasoner's reading of the words run inside the turn's program, from
  tables."""

  PAD_BATCHES = True

  def problems(self, config, source):
    return source.traced_problems(config) + super().problems(config, source)

  def prepare(self, source, built):
    return dataclasses.replace(built,
                               jit_env=source.traced_environment(built))

  def batch(self, run, method, sessions, loop):
    return run.source.traced_batch(run.config, run.built, method, sessions,
                                   loop, run.reasoner)


class Stepped(_Jitted):
  """The host's user and reasoning stepped a turn per pass, the ranking in
  JAX (``drivers.stepped``); the lists equal the host driver's."""

  def batch(self, run, method, sessions, loop):
    env = stepped.StepEnvironment(run.env, method, sessions, run.user,
                                  run.ctx, loop)
    return source_lib.JitBatch(env=env, config=env.config(loop),
                               result=env.result)
