"""A run's batches: computing one (by the run's driver, ``drivers``), its
checkpoint files, and a resume that checks them.

Each finished batch is a NumPy archive of its displayed lists and a JSON
file of its sessions, turn records (as columns where the driver made
them so: ``protocol.records``), errors and reasoning counts, with
the run identity and the code (``integrity.code_digest``) that made it and
checksums of both; a repeated run loads it instead of running it again, or
refuses it naming the file.
"""

import hashlib
import json
import os
import pathlib
import time

import numpy as np

from recovr_jax import checksums
from recovr_jax.profiling import part as profiled
from recovr_jax.protocol import environment
from recovr_jax.protocol import records
from recovr_jax.run import integrity
from recovr_jax.run import reporting
from recovr_jax.run import validation


class Progress:
  """Sessions done, rate and time left, at least every 10 seconds."""

  def __init__(self, total: int):
    self.total = total
    self.done = 0
    self.start = time.time()
    self.last = 0.0

  def update(self, n: int, label: str):
    self.done += n
    now = time.time()
    if now - self.last >= 10 or self.done == self.total:
      self.last = now
      rate = self.done / max(now - self.start, 1e-9)
      left = (self.total - self.done) / rate if rate else 0
      print(f'[{label}] {self.done}/{self.total} session-runs, {rate:.1f}/s, '
            f'{left:.0f}s left', flush=True)


def paths(out: pathlib.Path, method: str, b: int):
  base = out / 'batches' / method
  return base / f'{b:05d}.npz', base / f'{b:05d}.json'


def _array_digest(displayed, top_scores, scores) -> str:
  h = hashlib.sha256()
  for a in (displayed, top_scores, scores):
    a = np.ascontiguousarray(a)
    h.update(f'{a.dtype}{a.shape}'.encode())
    h.update(a.tobytes())
  return h.hexdigest()


def save(out, method, b, result, sessions, errors, counts, identity):
  arrays, record_file = paths(out, method, b)
  arrays.parent.mkdir(parents=True, exist_ok=True)
  # The displayed lists are a NumPy archive (each process of a run writes
  # its own batches, which orbax's global checkpoints do not allow); the
  # records are JSON, with the run identity that made the batch and
  # checksums of the lists and of the records. The archive is in place
  # before the records file (the batch's marker) appears.
  tmp_arrays = arrays.with_suffix('.npz.tmp')
  with open(tmp_arrays, 'wb') as f:
    np.savez(f, displayed=np.asarray(result.displayed, np.int32),
             top_scores=np.asarray(result.top_scores, np.float32),
             scores=np.asarray(result.scores, np.float32))
    f.flush()
    os.fsync(f.fileno())
  tmp_arrays.replace(arrays)
  tmp = record_file.with_suffix('.tmp')
  body = {'sessions': sessions.tolist(), **_records_json(result.records),
          'errors': errors, 'reasoning_counts': counts}
  tmp.write_text(json.dumps({
      'identity': identity, 'code': integrity.code_digest(),
      'checksum': _array_digest(result.displayed, result.top_scores,
                                result.scores),
      'records_checksum': checksums.json_digest(body), **body}))
  tmp.replace(record_file)


def _records_json(turn_records) -> dict:
  """A batch's turn records in its JSON file: as columns where the driver
  made them so (``records.RecordColumns``), else per session."""
  if isinstance(turn_records, records.RecordColumns):
    return {'record_columns': turn_records.to_json()}
  return {'records': turn_records}


class CorruptBatch(validation.ConfigError):
  """A batch checkpoint that fails its checks; the message names it."""


def load(out, method, b, shape, sessions, identity, num_ids):
  """A finished batch, or ``None`` when there is none for these sessions
  (e.g. after ``--num_sessions`` changed: the batch is rerun). A batch of
  another run identity or other code, with a wrong checksum or ids outside
  the gallery is an error naming the file."""
  arrays, record_file = paths(out, method, b)
  if not record_file.exists():
    return None
  fix = 'rerun with --noresume (or delete it) to recompute it'
  try:
    meta = json.loads(record_file.read_text())
    kind = 'record_columns' if 'record_columns' in meta else 'records'
    stored = (meta['identity'], meta['sessions'], meta['checksum'],
              meta[kind], meta['errors'], meta['reasoning_counts'])
    body = {k: meta[k] for k in ('sessions', kind, 'errors',
                                 'reasoning_counts')}
    written = meta['records_checksum']
    turn_records = (records.RecordColumns.from_json(stored[3])
                    if kind == 'record_columns' else stored[3])
  except (ValueError, KeyError, TypeError) as e:
    raise CorruptBatch(f'batch checkpoint {record_file} is unreadable or '
                       f'incomplete ({type(e).__name__}: {e}); {fix}') from e
  if checksums.json_digest(body) != written:
    raise CorruptBatch(f'batch checkpoint {record_file}: its sessions, records '
                       f'or counts do not match their checksum (edited or '
                       f'corrupted); {fix}')
  if stored[0] != identity:
    raise CorruptBatch(f'batch checkpoint {record_file} was made by a run with '
                       f'other settings; {fix}')
  if meta.get('code') != integrity.code_digest():
    raise CorruptBatch(
        f'batch checkpoint {record_file} was computed by other code (the '
        f'recovr_jax sources changed since it was written: code '
        f'{str(meta.get("code"))[:12]}, now {integrity.code_digest()[:12]}), '
        f'so its lists may differ from what this code computes; {fix}')
  if stored[1] != sessions.tolist():
    return None
  try:
    with np.load(arrays, allow_pickle=False) as archive:
      displayed = np.asarray(archive['displayed'])
      top_scores = np.asarray(archive['top_scores'])
      scores = np.asarray(archive['scores'])
    want = tuple(shape[:2]) + (min(environment.SHOWN, shape[2]),)
    if (displayed.shape != tuple(shape) or
        top_scores.shape != tuple(shape[:2]) or scores.shape != want):
      raise ValueError(f'shapes {displayed.shape}, {top_scores.shape} and '
                       f'{scores.shape}, expected {tuple(shape)}, '
                       f'{tuple(shape[:2])} and {want}')
  except Exception as e:  # pylint: disable=broad-except
    raise CorruptBatch(f'batch checkpoint {arrays} cannot be read '
                       f'({type(e).__name__}: {e}); {fix}') from e
  if _array_digest(displayed, top_scores, scores) != stored[2]:
    raise CorruptBatch(f'batch checkpoint {arrays} does not match its '
                       f'checksum in {record_file}; {fix}')
  if displayed.min() < -1 or displayed.max() >= num_ids:
    raise CorruptBatch(f'batch checkpoint {arrays} holds ids '
                       f'outside the gallery [0, {num_ids}); {fix}')
  return (environment.BatchResult(displayed=displayed,
                                  top_scores=top_scores,
                                  records=turn_records,
                                  scores=scores),
          stored[4], stored[5])


def compute(run, method, b, batch, out, identity, keep: bool = True):
  """Runs batch ``b`` of ``method`` on the assembled ``run``
  (``run.assemble.Run``) by its driver and saves its checkpoint
  (``keep``); returns ``(result, errors, reasoning counts)``."""
  reasoner = run.reasoner
  errors = {}
  before = reasoner.validity()
  result = run.driver.run_batch(run, method, batch, run.loop,
                                f'batch {b} of {method.name}', errors)
  counts = reporting.validity_counts(before, reasoner.validity())
  if keep:
    with profiled('batch files (I/O)'):
      save(out, method.name, b, result, batch, errors, counts, identity)
  return result, errors, counts


def run_own_share(run, out, batches, identity):
  """A process of a multi-process run: the batches ``b`` with ``b %
  num_processes == process_id`` of every method, run (or found finished)
  and saved; process 0 then reads them all like a resume."""
  config, env, base = run.config, run.env, run.loop
  for name in config.methods:
    method = run.method(name)
    for b, batch in enumerate(batches):
      if b % config.num_processes != config.process_id:
        continue
      shape = (len(batch), base.num_turns + 1, base.list_length)
      state = 'found saved'
      if load(out, name, b, shape, batch, identity, env.searchable) is None:
        compute(run, method, b, batch, out, identity)
        state = 'done'
      print(f'process {config.process_id}: {name} batch {b + 1} of '
            f'{len(batches)} {state}', flush=True)


def run_together(run, out, batches, identity):
  """A multi-process run of a joint driver (``Driver.JOINT``, the jitted
  ones): every process takes part in
  every batch, whose sessions are split over one mesh of all processes'
  devices (``sharding.process_mesh``); process 0 saves the batches and
  decides which are found saved (the others follow it, so they never
  disagree on which computations to join); then reads them all like a
  resume."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  config, env, base = run.config, run.env, run.loop
  lead = config.process_id == 0
  if lead and config.gallery_over_processes:
    from recovr_jax.protocol import ranking  # pylint: disable=g-import-not-at-top
    split = ranking.GallerySplit.of('gallery', env.searchable,
                                    config.num_processes)
    print(f'jitted sessions over {config.session_shards} device(s) per '
          f'process, the gallery\'s rows split over {config.num_processes} '
          f'processes: {split.rows} rows each ({split.per_shard} block(s) '
          f'of {split.block_size}, then the last {split.rest} rows on the '
          'last process)', flush=True)
    if split.full_blocks < config.num_processes:
      print(f'warning: --gallery_over_processes: the gallery\'s '
            f'{env.searchable} rows are {split.full_blocks} retrieval '
            f'block(s); some processes hold only padding (a split pays from '
            f'{config.num_processes} x {ranking.BLOCK_SIZE} rows)',
            flush=True)
  elif lead:
    print(f'jitted sessions over '
          f'{config.session_shards * config.num_processes} devices of '
          f'{config.num_processes} processes', flush=True)
  for name in config.methods:
    method = run.method(name)
    for b, batch in enumerate(batches):
      shape = (len(batch), base.num_turns + 1, base.list_length)
      saved = lead and load(out, name, b, shape, batch, identity,
                            env.searchable) is not None
      saved = bool(multihost_utils.broadcast_one_to_all(np.asarray(saved)))
      if not saved:
        compute(run, method, b, batch, out, identity, keep=lead)
      if lead:
        print(f'{name} batch {b + 1} of {len(batches)} '
              f'{"found saved" if saved else "done"} on '
              f'{config.num_processes} processes', flush=True)
