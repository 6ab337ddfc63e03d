"""A batch's turn records held as columns.

A driver's ``BatchResult.records`` reads as ``[S][T+1]`` dicts, one per
session and turn (``protocol.plan``'s records). The host drivers build them
so; the jitted world face builds ``RecordColumns`` instead: one flat column
per field, ``S * (T+1)`` values in session-major order, with a presence
column for a field some records lack. The batch files and the trajectories
(``run.trajectories``) read the columns as they are; a session's dicts are
made only when it is read (``records[i]``), the same dicts, keys in the
same order, as the host's lists hold.
"""

from collections.abc import Sequence

import numpy as np

# Every field a record may hold, in the order a record's keys come
# (``plan.start_record``, ``plan.turn_record`` with the jitted face's
# fields, ``plan.stopped_record``: each kind's keys are in this order).
FIELDS = ('turn', 'action', 'feedback', 'sigma', 'rank_cap_fired',
          'question', 'mentioned', 'asked', 'questioned',
          'question_attribute', 'search', 'edit')


class RecordColumns(Sequence):
  """``[S][T+1]`` turn records as columns (a sequence of sessions, each a
  list of its turns' dicts).

  ``columns``: field -> ``S * (T+1)`` values (session-major); ``present``:
  field -> as many bools (whether each record holds the field), absent
  where every record does. A field's values where it is absent are
  ignored."""

  def __init__(self, num_sessions: int, turns: int, columns: dict,
               present: dict | None = None):
    present = present or {}
    unknown = (set(columns) | set(present)) - set(FIELDS)
    if unknown:
      raise ValueError(f'record fields {sorted(unknown)} are not in '
                       f'records.FIELDS')
    size = num_sessions * turns
    for name, values in list(columns.items()) + list(present.items()):
      if len(values) != size:
        raise ValueError(f'record column {name!r} holds {len(values)} '
                         f'values; {num_sessions} sessions x {turns} turns '
                         f'is {size}')
    self.num_sessions, self.turns = num_sessions, turns
    self._fields = [(k, list(columns[k]), None if present.get(k) is None
                     else [bool(p) for p in present[k]])
                    for k in FIELDS if k in columns]

  def __len__(self) -> int:
    return self.num_sessions

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(len(self)))]
    if not -len(self) <= i < len(self):
      raise IndexError(f'session {i} of {len(self)}')
    i %= len(self)
    out = []
    for j in range(i * self.turns, (i + 1) * self.turns):
      record = {}
      for name, values, present in self._fields:
        if present is None or present[j]:
          v = values[j]
          record[name] = dict(v) if type(v) is dict else v  # pylint: disable=unidiomatic-typecheck
      out.append(record)
    return out

  def column(self, name: str) -> tuple[list, list | None]:
    """``(values, present)`` of field ``name`` (``present`` None: every
    record holds it); a field no record holds is all absent."""
    for field, values, present in self._fields:
      if field == name:
        return values, present
    size = self.num_sessions * self.turns
    return [None] * size, [False] * size

  @property
  def fields(self) -> list[str]:
    return [name for name, _, _ in self._fields]

  def to_json(self) -> dict:
    """The columns as a JSON document (``from_json`` reads it back)."""
    return {'sessions': self.num_sessions, 'turns': self.turns,
            'columns': {k: v for k, v, _ in self._fields},
            'present': {k: p for k, _, p in self._fields if p is not None}}

  @classmethod
  def from_json(cls, doc: dict) -> 'RecordColumns':
    return cls(int(doc['sessions']), int(doc['turns']), doc['columns'],
               doc['present'])

  def __eq__(self, other):
    return list(self) == list(other)

  __hash__ = None


def fired(records, num_turns: int) -> np.ndarray:
  """``[S, T+1]`` bool: whether rank-cap fired at each session's turn
  (records without ``rank_cap_fired`` did not fire)."""
  if isinstance(records, RecordColumns):
    values, present = records.column('rank_cap_fired')
    v = np.asarray([bool(x) for x in values], bool)
    if present is not None:
      v &= np.asarray(present, bool)
    v = v.reshape(len(records), records.turns)[:, :num_turns + 1]
    out = np.zeros((len(records), num_turns + 1), bool)
    out[:, :v.shape[1]] = v
    return out
  out = np.zeros((len(records), num_turns + 1), bool)
  for i, turns in enumerate(records):
    for t, rec in enumerate(turns[:num_turns + 1]):
      out[i, t] = bool(rec.get('rank_cap_fired', False))
  return out
