"""One assembly: a run is (environment, user, reasoner, methods, driver).

Each part is made once, here, from its own typed config: the data source
from ``RunConfig.data`` (``run.run_config.SOURCES``), its environment
(``Source.build``, the expensive part), the driver from ``--simulation``
(``drivers.choose``), the user from the source, the reasoner from
``RunConfig.reasoner`` (its backend's typed config) over the source's vocabulary
(``reasoning.registry``) and each method from the method registry. The
runner, the sweeps, the study, the reading benchmark, the benchmarks and
the tests receive a ``Run`` and never re-make a part.

    source = run_config.source(config)      # once, by the run's entry
    built = assemble.build(config, source)  # loads data and models
    run = assemble.assemble(config, built)  # user, reasoner, driver
    result = run.driver.run_batch(run, run.method('recovr'), sessions,
                                  run.loop, 'batch 0', errors={})

A sweep's runs share a ``build`` where they agree on what it reads
(``Source.build_reads``) and assemble each their own ``Run``.
"""

import dataclasses
from collections.abc import Callable

from recovr_jax import checksums
from recovr_jax import drivers
from recovr_jax import methods
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.protocol import data_source
from recovr_jax.reasoning import registry
from recovr_jax.run import run_config


def build(config: run_config.RunConfig,
          source: data_source.Source) -> data_source.Built:
  """Loads the data and encoders of ``config`` through its data source
  (``source``, the run's) and prepares them for its driver.
  ``data_source.SourceError`` names an unreadable input. The ``Built``
  holds the source: what runs on it asks that one."""
  checksums.allow_unverified(config.allow_unverified_checkpoints)
  built = dataclasses.replace(
      source.build(config.cache_dir, config.num_sessions), source=source)
  return drivers.choose(config.simulation, source).prepare(source, built)


@dataclasses.dataclass(frozen=True)
class Run:
  """An assembled run: everything a driver runs a batch with."""
  config: run_config.RunConfig
  built: data_source.Built
  driver: drivers.Driver
  user: Callable        # respond(session, turn, target, shown, question)
  ctx: plan.Context  # what the methods may read (reasoner included)

  @property
  def source(self) -> data_source.Source:
    return self.built.source

  @property
  def env(self):
    return self.built.env

  @property
  def reasoner(self):
    return self.ctx.reasoner

  @property
  def loop(self) -> ranking.LoopConfig:
    """The ranking loop's config on this environment's gallery."""
    return dataclasses.replace(self.config.loop, num_ids=self.env.searchable)

  def method(self, name: str):
    """The method ``name`` with the run's settings."""
    return methods.make(name, self.config.settings)


def assemble(config: run_config.RunConfig, built: data_source.Built,
             reasoner: registry.ReasonerConfig | None = None) -> Run:
  """The ``Run`` of ``config`` on ``built`` (a ``build`` of ``config``, or
  of one agreeing on what the build reads, holding ``config``'s own data
  source: the user is its). ``reasoner``:
  another reasoner than ``config.reasoner`` (the reading benchmark's
  backends and options)."""
  source, env = built.source, built.env
  user = source.user(env, config.user_seed)
  reasoner = registry.make(reasoner or config.reasoner,
                           source.vocabulary(config.cache_dir),
                           env.encode_text)
  ctx = plan.Context(gallery=env.gallery, captions=env.captions,
                         encode_text=env.encode_text, compose=env.compose,
                         reasoner=reasoner)
  return Run(config=config, built=built,
             driver=drivers.choose(config.simulation, source), user=user,
             ctx=ctx)
