"""The jitted drivers: each turn of a batch one ``vmap``-ped program, run
turn by turn (``drivers.jit_runner``), on a source's traced face or with the
host's user and reasoning planning each turn (``drivers.stepped``)."""

import abc
from collections.abc import Callable
import dataclasses

import jax

from recovr_jax.drivers import driver
from recovr_jax.drivers import jit_runner
from recovr_jax.drivers import stepped
from recovr_jax import methods
from recovr_jax.profiling import part as profiled
from recovr_jax.protocol import ranking
from recovr_jax.protocol import traced
from recovr_jax.reasoning import frames
from recovr_jax.reasoning import registry


@dataclasses.dataclass(frozen=True)
class JitBatch:
  """What a jitted driver runs for one batch: ``jit_runner.run(env, config,
  ...)``, then ``result(trace)`` is the batch's
  ``environment.BatchResult``."""
  env: traced.Environment
  config: traced.JitConfig
  result: Callable  # traced.JitTrace -> environment.BatchResult


class _Jitted(driver.Driver):
  """What both jitted drivers share: the method check, the device mesh and
  the chunked run of a ``JitBatch``."""

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
  def batch(self, run, method, sessions, loop) -> JitBatch:
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
          pad_to=_full_batch(run) if self.PAD_BATCHES else None,
          buckets=config.jit_buckets, run_sessions=_run_sessions(run))
      return face.result(trace)


def _run_sessions(run) -> int:
  """The sessions of the whole run (``--num_sessions``, or every one)."""
  total = len(run.env.target)
  return min(run.config.num_sessions or total, total)


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
  """A source's traced face (``data_source.TracedFace``): its user and the
  reasoner's reading of the words run inside the turn's program, from
  tables."""

  PAD_BATCHES = True

  def problems(self, config, source):
    out = source.traced_problems()
    # (an unknown --reasoner is the reasoner check's to name)
    if (config.reasoner.name in registry.REGISTRY and
        not registry.get(config.reasoner.name).JITTED):
      out.append('--simulation=jit needs --reasoner='
                 f'{registry.or_list(registry.with_property("JITTED"))} on '
                 f'--data={source.NAME} (its face reproduces their reading '
                 'of the words)')
    return out + super().problems(config, source)

  def prepare(self, source, built):
    return dataclasses.replace(built,
                               jit_env=source.traced_environment(built))

  def batch(self, run, method, sessions, loop):
    reading = _reading(run.config.reasoner, run.reasoner)
    jit_env = run.built.jit_env
    config = traced_config(
        lambda form, num_turns: run.source.traced_face(
            run.built, form, num_turns, reading),
        method, loop, reading, jit_env.composer)
    return JitBatch(env=jit_env, config=config, result=run.source.traced_result(
        run.built, config, reading, run.config.user_seed, sessions))


def traced_config(face, method, base: ranking.LoopConfig,
                  reading: traced.Reading, composer) -> traced.JitConfig:
  """The config of ``method`` on a traced face (``face(form, num_turns)``:
  the source's face for the method's jitted form, ``reading``'s sigma rule
  in it), ``base`` the run's loop settings."""
  form = method.jax_form.with_sigma_rule(reading.sigma)
  loop = method.ranking(base)
  return traced.JitConfig(loop=loop, face=face(form, loop.num_turns),
                          form=form, composer=composer)


def _reading(reasoner_config, reasoner) -> traced.Reading:
  """How the run's reasoner ``reasoner`` (made from ``reasoner_config``,
  its backend ``reasoner_config.name``) reads the user's words."""
  name = reasoner_config.name
  label = None
  if getattr(reasoner, 'frames', None) is not None:
    label = lambda words: frames.LABELS.index(reasoner.frame_label(words))
  return traced.Reading(key=name, lexical=registry.get(name).LEXICAL,
                        sigma=reasoner.sigma_rule,
                        parse=reasoner.feedback_values, label=label,
                        identity=repr((reasoner_config,
                                       getattr(reasoner, 'fit', None))))


class Stepped(_Jitted):
  """The host's user and reasoning stepped a turn per pass, the ranking in
  JAX (``drivers.stepped``); the lists equal the host driver's."""

  def batch(self, run, method, sessions, loop):
    env = stepped.StepEnvironment(run.env, method, sessions, run.user,
                                  run.ctx, loop)
    return JitBatch(env=env, config=env.config(loop),
                               result=env.result)
