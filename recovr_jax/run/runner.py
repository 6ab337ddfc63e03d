"""The experiment: a run's data source, batches, resume and outputs.

``run(config)`` runs every method of a ``RunConfig`` over its sessions in
batches (each finished batch checkpointed, so a repeated run resumes) and
writes the outputs; the run is assembled once (``run.assemble``) and its
driver runs the batches (``drivers``). Its parts: ``checks`` (everything checked before any
work), ``batches`` (computing, saving and resuming a batch), ``outputs``
(what a finished run writes) and ``sweeps`` (one factor at a time).
``experiments/run.py`` is the absl front end.
"""

import contextlib
import dataclasses
import functools
import gc
import json
import pathlib
import shutil
import time

import jax
import numpy as np

from recovr_jax import checksums
from recovr_jax import paths
from recovr_jax.core import retrieval
from recovr_jax import profiling
from recovr_jax.protocol import data_source
from recovr_jax.protocol import records
from recovr_jax.run import assemble
from recovr_jax.run import batches
from recovr_jax.run import run_config
from recovr_jax.run import distributed
from recovr_jax.run import integrity
from recovr_jax.run import outputs
from recovr_jax.run import reporting
from recovr_jax.run import resources
from recovr_jax.run import trajectories
from recovr_jax import trajectory_files
from recovr_jax.run import validation


def build(config: run_config.RunConfig,
          source: data_source.Source) -> data_source.Built:
  """``assemble.build``, its unreadable inputs a ``validation.ConfigError``."""
  try:
    return assemble.build(config, source)
  except data_source.SourceError as e:
    validation.fail(str(e))


def _claim(out: pathlib.Path, config, resolved: dict):
  """Takes the directory's lock and checks that a resume would only reuse
  batches of this run identity, before anything is written to it. Returns
  the held lock (close it to release)."""
  import fcntl  # pylint: disable=g-import-not-at-top
  lock = open(out / '.lock', 'w')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    lock.close()
    validation.fail(f'another run is writing to --output_dir {out} (it holds '
          f'{out / ".lock"}); wait for it or use another --output_dir')
  try:
    previous = out / 'resolved_config.json'
    if config.resume and previous.exists():
      try:
        old = json.loads(previous.read_text())
      except ValueError as e:
        validation.fail(f'{previous} is unreadable ({e}); use --noresume to start '
              'this directory afresh')
      if old.get('identity') != resolved['identity']:
        changed = integrity.differences(old, resolved) or ['(a run of an older version)']
        validation.fail(f'--output_dir {out} holds a run with other settings ('
              f'{"; ".join(changed[:6])}); use another --output_dir, or '
              '--noresume to discard its batches')
  except BaseException:
    lock.close()
    raise
  return lock


def _clear(out: pathlib.Path, source) -> None:
  """--noresume: nothing of an earlier run stays beside this one (done once
  every check has passed: a refused command leaves the folder as it was)."""
  for directory in ('batches', 'trec'):
    if (out / directory).exists():
      shutil.rmtree(out / directory)
  own = (source.OUTPUT_FILES
         if isinstance(source, data_source.ExtraOutputs) else ())
  for pattern in outputs.OUTPUT_FILES + own:
    for f in out.glob(pattern):
      f.unlink()


def run(config: run_config.RunConfig, built: data_source.Built | None = None) -> dict:
  """One run; returns the per-method metrics. ``built``: a ``build`` of
  an earlier config agreeing on what it reads, holding this config's data
  source (sweeps pass it to reuse the gallery: ``Source.build_reads``).
  The run's data source is made once, here. Every matmul that names no
  precision runs at ``config.matmul_precision``
  (``jax.default_matmul_precision``). An unset ``cache_dir`` is the
  per-user cache (``paths.cache_dir``)."""
  config = dataclasses.replace(config,
                               cache_dir=paths.cache_dir(config.cache_dir))
  with jax.default_matmul_precision(config.matmul_precision):
    return _run(config, built)


def _run(config, built):
  source = built.source if built is not None else run_config.source(config)
  # A folder this command makes goes again if the command is refused.
  new = (config.process_id == 0 and bool(config.output_dir) and
         not pathlib.Path(config.output_dir).exists())
  out = validation.validate(config, source)
  start = time.time()
  resolved = integrity.resolved_config(config, source)
  # In a multi-process run process 0 holds the directory (and clears it on
  # --noresume, once every check passed) before any process writes a batch.
  lock = (_claim(out, config, resolved) if config.process_id == 0
          else None)
  distributed.barrier('directory claimed')
  profile = profiling.Profile()
  try:
    with profile.active():
      result = _run_claimed(config, source, built, out, start, resolved)
  except (validation.ConfigError, data_source.MissingWeights) as e:
    if new and {p.name for p in out.iterdir()} <= {'.lock'}:
      shutil.rmtree(out, ignore_errors=True)
    if isinstance(e, data_source.MissingWeights):  # a refusal, in a line
      raise validation.ConfigError(str(e)) from e
    raise
  finally:
    if lock is not None:
      lock.close()
  if config.process_id == 0:
    outputs.write_profile(out, profile)
  # Every process leaves together (JAX's shutdown barrier would time out
  # while process 0 writes the outputs).
  distributed.barrier('outputs written')
  return result


def _run_claimed(config, source, built, out, start, resolved):
  """``run`` once the directory is held and its batches are known to be
  this run's."""
  lead = config.process_id == 0   # the process that writes the outputs
  # Every check that can refuse the command (its inputs and caches, the
  # batch's size, the sessions, the free space) runs before anything is
  # written to the folder: a refused command leaves a finished run (or any
  # other) as it was, byte for byte.
  if built is None:
    with profiling.part('loading data and models'):
      built = build(config, source)
  env = built.env
  if checksums.unverified():  # recorded beside the settings
    resolved = {**resolved, 'unverified_checkpoints': checksums.unverified()}
  _check_batch_fits(config, env, config.loop)
  with profiling.part('loading data and models'):
    assembled = assemble.assemble(config, built)
  base = assembled.loop
  total = len(env.target)
  if config.num_sessions is not None and config.num_sessions > total:
    # Never capped: a sweep asked for more sessions than the data gives.
    validation.fail(f'--num_sessions={config.num_sessions}: the data gives at most '
          f'{total} sessions (its test queries); lower --num_sessions')
  num = config.num_sessions or total
  if lead:
    try:
      written_as = trajectory_files.chosen(config.trajectories_format,
                                           num * len(config.methods))
      trajectory_files.check_writable(written_as)
      resources.check_disk(out, resources.output_bytes(
          num, len(config.methods), base.num_turns, base.list_length,
          config.export_trec, config.plots, written_as == 'parquet'))
    except ValueError as e:
      validation.fail(str(e))
  # A finished run's markers, kept to put back if a resume is refused (a
  # batch of other code): the finished outputs stay a finished run.
  finished = {name: (out / name).read_bytes()
              for name in ('flags.txt', 'resolved_config.json')
              } if lead and config.resume and _finished(out) else None
  if lead:
    if not config.resume:
      _clear(out, source)
    (out / outputs.INCOMPLETE).write_text(
        'This run has not finished: the outputs here (if any) are not all '
        'of it. Rerun the same command to resume.\n')
    (out / 'flags.txt').write_text(config.flags_text)
    (out / 'resolved_config.json').write_text(reporting.dumps(resolved))
    for item in checksums.unverified():
      print(f'warning: unverified checkpoint (no checksums.json): {item}',
            flush=True)
  # The others write batches only once process 0 has cleared the folder.
  distributed.barrier('directory cleared')
  identity = resolved['identity']
  sessions = np.arange(num)
  batch_list = [sessions[i:i + config.batch_size]
             for i in range(0, num, config.batch_size)]
  print(f'{num} sessions x {len(config.methods)} methods, gallery '
        f'{env.searchable} videos, {base.num_turns} turns', flush=True)
  if base.list_length >= env.searchable - 1:
    print(outputs.whole_gallery_note(base.list_length, env.searchable),
          flush=True)
  if env.dropped:
    print(f'{len(env.dropped)} annotation rows dropped (--missing_ids=drop;'
          f' listed in {out / "dropped_rows.json"})', flush=True)

  if config.num_processes > 1:  # the batches, then process 0 reads them
    share = (batches.run_together if assembled.driver.JOINT else
             batches.run_own_share)
    share(assembled, out, batch_list, identity)
    distributed.barrier('batches done')
    if not lead:
      return None
  with _collected_apart():
    try:
      collected = _collect(assembled, out, batch_list, identity)
    except batches.CorruptBatch:
      if finished is not None:
        (out / outputs.INCOMPLETE).unlink(missing_ok=True)
        for name, content in finished.items():
          (out / name).write_bytes(content)
      raise
    return _finish(config, source, built, assembled, out, env, sessions,
                   collected, start, base)


def _finish(config, source, built, assembled, out, env, sessions, collected,
            start, base):
  try:
    return _write_outputs(config, source, built, assembled, out, env,
                          sessions, collected, start, base)
  except OSError as e:  # a full disk, a folder made read-only meanwhile
    where = e.filename or out
    raise validation.OutputsNotWritten(
        f'{where}: could not be written ({e.strerror or e}); '
        f'{out / outputs.INCOMPLETE} is kept: free space and rerun the command '
        '(its batches are saved; it writes the outputs again)') from e


def _finished(out) -> bool:
  """Whether ``out`` holds a finished run (its outputs, no marker)."""
  return not (out / outputs.INCOMPLETE).exists() and all(
      (out / name).is_file() for name in (
          'flags.txt', 'resolved_config.json', 'metrics.json'))


def _write_outputs(config, source, built, assembled, out, env, sessions,
                   collected, start, base):
  """The run's outputs from its collected batches (process 0)."""
  outputs.write_reasoner_notes(out, collected.speed, assembled.reasoner)
  if isinstance(source, data_source.ExtraOutputs):
    for name, (content, line) in source.extra_outputs(
        built, assembled.user).items():
      (out / name).write_text(json.dumps(content, indent=2))
      print(line, flush=True)
  with profiling.part('metrics, bootstrap and report'):
    ceiling = outputs.t2v_ceiling(
        env, source.target_captions(built), sessions, base.list_length,
        config.bootstrap_resamples, config.seed)
  with profiling.part('text embedding cache (I/O)'):
    source.save_caches(built)  # the ceiling's captions too
  with profiling.part('metrics, bootstrap and report'):
    return outputs.write(config, out, env, sessions, collected, start,
                         ceiling,
                         source.ask_truth(built, assembled.user)
                         if isinstance(source, data_source.ScoresAsking)
                         else None)


def _check_batch_fits(config, env, loop):
  n, d = env.searchable, env.gallery.shape[1]
  try:
    resources.check_fits(
        resources.session_batch_bytes(
            min(config.batch_size, len(env.target)), loop.num_channels, n, d,
            loop.list_length, loop.window, retrieval.DEFAULT_BLOCK_SIZE),
        f'a batch of {config.batch_size} sessions', '--batch_size')
  except ValueError as e:
    validation.fail(str(e))


@dataclasses.dataclass
class Collected:
  """Every method's batches of a run, run or resumed."""
  displayed: dict      # method -> [Q, T+1, K] int32 shown lists
  trajectories: trajectories.Trajectories  # per (method, session)
  reasoning_counts: dict
  raised: dict         # method -> sessions that raised
  fired: dict          # method -> [Q, T] bool rank-cap fired
  speed: dict          # method -> its LM's speed (batches run here)


@contextlib.contextmanager
def _collected_apart():
  """The run's collecting and writing, with what each batch added (its
  record columns and the documents read from them: millions of small
  objects at 10,000 sessions, none of them in a cycle) moved out of the garbage collector's view once
  made (``gc.freeze`` after each batch, ``_collect``), so that a full
  collection, which the allocations trigger over and over, no longer walks
  every row collected so far: without it each batch's host work grew with
  the batches before it. The objects are given back to the collector at
  the end."""
  try:
    yield
  finally:
    gc.unfreeze()


def _collect(run, out, batch_list, identity):
  """Every method's batches of the assembled ``run``, loaded when finished,
  else run and saved."""
  config, env, reasoner, base = run.config, run.env, run.reasoner, run.loop
  progress = batches.Progress(
      sum(len(b) for b in batch_list) * len(config.methods))
  c = Collected({}, trajectories.Trajectories(), {}, {}, {}, {})
  ids = functools.partial(reporting.video_id, env.video_ids)
  for name in config.methods:
    method = run.method(name)
    parts = []
    method_start, lm_before = time.time(), outputs.lm_speed(reasoner)
    ran = 0
    for b, batch in enumerate(batch_list):
      shape = (len(batch), base.num_turns + 1, base.list_length)
      with profiling.part('batch files (I/O)'):
        loaded = batches.load(out, name, b, shape, batch, identity,
                                  env.searchable)
      if loaded is None:
        ran += len(batch)
        result, errors, counts = batches.compute(
            run, method, b, batch, out, identity)
      else:
        result, errors, counts = loaded
      parts.append(result)
      c.raised[name] = c.raised.get(name, 0) + len(errors)
      c.reasoning_counts[name] = reporting.add_counts(
          c.reasoning_counts.get(name, {}), counts)
      c.trajectories.add(trajectories.block(name, batch, env, result,
                                            errors, ids))
      gc.freeze()  # (``_collected_apart``)
      progress.update(len(batch), name)
    if ran and lm_before is not None:
      c.speed[name] = outputs.speed_row(
          time.time() - method_start, ran, base.num_turns, lm_before,
          outputs.lm_speed(reasoner))
    c.displayed[name] = np.concatenate([p.displayed for p in parts])
    c.fired[name] = np.concatenate([
        records.fired(p.records, base.num_turns) for p in parts])
  return c
