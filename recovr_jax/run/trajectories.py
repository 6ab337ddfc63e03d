"""A run's trajectories as the batches left them: arrays and record
columns, made into session documents only where something reads them.

``trajectories.jsonl`` (or ``.parquet``: ``trajectory_files``) holds one
document per method and session. The runner keeps each batch's part as a
``Block`` (its lists, rounded scores and records, as the batch gave them)
and ``Trajectories`` reads them as documents (``iter``), a method at a time
(``of_methods``), as each session's actions (``actions``), or as the
Parquet file's columns built from the arrays (``parquet_columns``), so that
a large run writes its Parquet file without a dict per session.
"""

from collections.abc import Callable, Sequence
import dataclasses

import numpy as np

from recovr_jax.protocol import records
from recovr_jax import trajectory_files


def rounded(scores: np.ndarray) -> np.ndarray:
  """``scores`` (any shape) as float64 ``round(float(x), 6)``, computed as
  ``rint(x * 1e6) / 1e6`` (the same double wherever ``x * 1e6`` lies
  clearly off a half: both are the nearest double to the same integer over
  10^6), and by Python's ``round`` itself where it does not or ``x`` is
  not finite or large."""
  x = np.asarray(scores, np.float64)
  scaled = x * 1e6
  out = np.rint(scaled) / 1e6
  with np.errstate(invalid='ignore'):
    near = ~np.isfinite(scaled) | (np.abs(x) >= 1e6) | (
        np.abs(scaled - np.floor(scaled) - 0.5) < 1e-3)
  for at in zip(*np.nonzero(near)):
    out[at] = round(float(x[at]), 6)
  return out


@dataclasses.dataclass(frozen=True)
class Block:
  """One batch of one method: per session its ids and error, per turn its
  record and its top 10 (gallery indices, their video ids, their scores
  rounded to 6 places)."""
  method: str
  sessions: list            # [S] int
  references: list          # [S] int gallery rows
  targets: list             # [S] int gallery rows
  errors: list              # [S] str | None
  top: np.ndarray           # [S, W, k] int32, k <= 10
  ids: np.ndarray           # [I] object: the distinct video ids of ``top``
  where: np.ndarray         # [S, W, k] int: ``ids[where]`` is ``top``'s
  scores: np.ndarray        # [S, W, k] float64, rounded
  records: Sequence         # [S][W] dicts, or records.RecordColumns
  video_id: Callable        # gallery row -> video id

  def rows(self, turn_fields=None) -> list[dict]:
    """The batch's session documents; ``turn_fields``: only these fields of
    each turn (default: all)."""
    if turn_fields is not None:
      return self._some_rows(frozenset(turn_fields))
    shown, scores = self.top.tolist(), self.scores.tolist()
    top_ids = self.ids[self.where].tolist()
    rows = []
    for i, sess in enumerate(self.sessions):
      ref, target = self.references[i], self.targets[i]
      rows.append({
          'method': self.method, 'session': sess, 'reference': ref,
          'target': target, 'reference_id': self.video_id(ref),
          'target_id': self.video_id(target), 'error': self.errors[i],
          'turns': [dict(rec, top10=shown[i][t], top10_ids=top_ids[i][t],
                         top10_scores=scores[i][t])
                    for t, rec in enumerate(self.records[i])]})
    return rows

  def _some_rows(self, wanted: frozenset) -> list[dict]:
    """``rows`` with only the turn fields ``wanted``."""
    lists = {'top10': lambda: self.top.tolist(),
             'top10_ids': lambda: self.ids[self.where].tolist(),
             'top10_scores': lambda: self.scores.tolist()}
    lists = {k: make() for k, make in lists.items() if k in wanted}
    if isinstance(self.records, records.RecordColumns):
      cols = [(k, *self.records.column(k)) for k in records.FIELDS
              if k in wanted and k in self.records.fields]
      width = self.records.turns
      recs = [[{k: v[j] for k, v, p in cols if p is None or p[j]}
               for j in range(i * width, (i + 1) * width)]
              for i in range(len(self.sessions))]
    else:
      recs = [[{k: v for k, v in rec.items() if k in wanted} for rec in turns]
              for turns in self.records]
    return [{'method': self.method, 'session': sess,
             'reference': self.references[i], 'target': self.targets[i],
             'error': self.errors[i],
             'turns': [dict(rec, **{k: v[i][t] for k, v in lists.items()})
                       for t, rec in enumerate(recs[i])]}
            for i, sess in enumerate(self.sessions)]


def block(name, batch, env, result, errors, video_id) -> Block:
  """Batch ``batch`` (session indices) of method ``name``: its
  ``environment.BatchResult`` ``result`` and ``errors`` (by row, as a
  string or an int key), ``video_id(row)`` the source's ids."""
  top = np.asarray(result.displayed)[:, :, :10]
  distinct, where = np.unique(top, return_inverse=True)
  ids = np.empty(len(distinct), object)
  ids[:] = [video_id(v) for v in distinct.tolist()]
  batch = np.asarray(batch)
  return Block(
      method=name, sessions=batch.tolist(),
      references=np.asarray(env.reference)[batch].tolist(),
      targets=np.asarray(env.target)[batch].tolist(),
      errors=[errors.get(str(i)) or errors.get(i) for i in range(len(batch))],
      top=top, ids=ids, where=where.reshape(top.shape),
      scores=rounded(np.asarray(result.scores)[:, :, :top.shape[2]]),
      records=result.records, video_id=video_id)


class Trajectories:
  """Every method's blocks of a run, in the order they were added: the
  session documents in file order."""

  def __init__(self):
    self.blocks: list[Block] = []

  def add(self, b: Block):
    self.blocks.append(b)

  def __len__(self) -> int:
    return sum(len(b.sessions) for b in self.blocks)

  def __iter__(self):
    for b in self.blocks:
      yield from b.rows()

  def documents(self, turn_fields, methods=None) -> list[dict]:
    """The session documents (of the methods ``methods``; default all),
    each turn with only ``turn_fields`` (and no video ids: for a reader
    that needs only these)."""
    return [row for b in self.blocks
            if methods is None or b.method in methods
            for row in b.rows(turn_fields)]

  def actions(self) -> dict:
    """``{(method, session): [action per turn]}`` (None where a record has
    none)."""
    out = {}
    for b in self.blocks:
      if isinstance(b.records, records.RecordColumns):
        values, present = b.records.column('action')
        if present is not None:
          values = [v if p else None for v, p in zip(values, present)]
        width = b.records.turns
        for i, s in enumerate(b.sessions):
          out[(b.method, s)] = values[i * width:(i + 1) * width]
      else:
        for s, turns in zip(b.sessions, b.records):
          out[(b.method, s)] = [t.get('action') for t in turns]
    return out

  def parquet_columns(self):
    """The Parquet layout's columns (``trajectory_files.Columns``) built
    from the blocks' arrays and record columns, or None where a block's
    records are per session (the documents are read instead)."""
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    blocks = self.blocks
    if not blocks or not all(
        isinstance(b.records, records.RecordColumns) and
        b.top.shape[2] > 0 and b.records.turns == b.top.shape[1]
        for b in blocks):
      return None
    widths = [b.records.turns for b in blocks]
    counts = np.repeat(widths, [len(b.sessions) for b in blocks])
    numbers = np.repeat(np.arange(len(counts)), counts)
    session = {
        'method': [b.method for b in blocks for _ in b.sessions],
        'session': [s for b in blocks for s in b.sessions],
        'reference': [r for b in blocks for r in b.references],
        'target': [t for b in blocks for t in b.targets],
        'reference_id': [b.video_id(r) for b in blocks for r in b.references],
        'target_id': [b.video_id(t) for b in blocks for t in b.targets],
        'error': [e for b in blocks for e in b.errors]}
    # Each record field: its values over every block (None where absent),
    # whether each record holds it, and where it is first held (the file's
    # turn fields come in the order the documents first show them).
    fields, first = {}, {}
    for name in records.FIELDS:
      values, present, seen = [], [], None
      start = 0
      for b in blocks:
        v, p = b.records.column(name)
        if p is None:
          p = [True] * len(v)
          seen = start if seen is None else seen
        else:
          v = [x if h else None for x, h in zip(v, p)]
          if seen is None and any(p):
            seen = start + p.index(True)
        values.extend(v)
        present.extend(p)
        start += len(v)
      if seen is not None:
        fields[name] = (values, None if all(present) else present)
        first[name] = seen
    k = blocks[0].top.shape[2]
    if any(b.top.shape[2] != k for b in blocks):
      return None  # lists of several lengths: the documents are read
    offsets = pa.array(np.arange(0, sum(b.top.size for b in blocks) + 1, k),
                       pa.int32())
    lists = lambda flat: pa.ListArray.from_arrays(offsets, flat)
    # Every turn holds its top 10, after its record's fields.
    fields['top10'] = (lists(pa.array(np.concatenate(
        [b.top.ravel() for b in blocks]).astype(np.int64), pa.int64())),
                       None)
    if all(i is not None for b in blocks for i in b.ids):
      fields['top10_ids'] = (lists(pa.concat_arrays([
          pa.array(list(b.ids), pa.string()).take(
              pa.array(b.where.ravel().astype(np.int64)))
          for b in blocks])), None)
    else:  # an empty place (-1): the documents' lists (as JSON text)
      fields['top10_ids'] = ([row for b in blocks for row in b.ids[
          b.where].reshape(-1, k).tolist()], None)
    fields['top10_scores'] = (lists(pa.array(np.concatenate(
        [b.scores.ravel() for b in blocks]), pa.float64())), None)
    rank = {**{f: n for n, f in enumerate(records.FIELDS)},
            'top10': 100, 'top10_ids': 101, 'top10_scores': 102}
    first.update(top10=0, top10_ids=0, top10_scores=0)
    order = sorted(fields, key=lambda f: (first[f], rank[f]))
    turn = [(f, *fields[f]) for f in order]
    return trajectory_files.Columns(
        numbers=numbers, sessions=len(counts),
        session=[(k, v, None) for k, v in session.items()], turn=turn)
