"""A run's trajectories on disk: JSON Lines, or Parquet for large runs.

``trajectories.jsonl`` holds one JSON document per method and session (its
ids, error and ``turns``). Past ``PARQUET_FROM`` session-methods (about
170 MB of JSON Lines) ``--trajectories_format=auto`` writes
``trajectories.parquet`` instead: one row per method, session and turn, the
session's fields beside the turn's, which pandas, polars and DuckDB read as
a table (``pd.read_parquet``, ``pl.read_parquet``, ``SELECT * FROM
'trajectories.parquet'``), zstd-compressed (about a tenth of the JSON's
size: docs/performance.md).

A Parquet file holds the same values as the JSON Lines file would, and
``read`` gives back the same documents (a test writes both and compares):

* ``session_row``: the row's session document, counted in file order (the
  documents' order);
* a field whose values are all one of bool, int, float or str (or None), or
  all lists of one of them, is a column of that type; any other (a dict,
  mixed types) is a column of its JSON text, named in the file's metadata
  (``recovr_json_columns``);
* a field some turns lack has a bool column ``has:<field>`` (metadata
  ``recovr_optional``), so a missing field and a None stay apart.
"""

import collections
from collections.abc import Sequence
import dataclasses
import itertools
import json
import operator
import pathlib

JSONL = 'trajectories.jsonl'
PARQUET = 'trajectories.parquet'
FORMATS = ('auto', 'jsonl', 'parquet')
# Session-methods from which ``auto`` writes Parquet: `main` at 2,000
# sessions (23 methods, 46,000) still writes JSON Lines, as every run in
# the results does.
PARQUET_FROM = 50_000
_SESSION_FIELDS = ('method', 'session', 'reference', 'target',
                   'reference_id', 'target_id', 'error')
_META = b'recovr_trajectories'


def chosen(fmt: str, session_methods: int) -> str:
  """``'jsonl'`` or ``'parquet'``: ``fmt`` (``FORMATS``), ``auto`` by the
  run's size."""
  if fmt not in FORMATS:
    raise ValueError(f'--trajectories_format={fmt}: one of '
                     f'{", ".join(FORMATS)}')
  if fmt == 'auto':
    return 'parquet' if session_methods >= PARQUET_FROM else 'jsonl'
  return fmt


def check_writable(fmt: str) -> None:
  """Refuses Parquet where pyarrow is missing (before any work)."""
  if fmt == 'parquet':
    try:
      import pyarrow  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError as e:
      raise ValueError(
          '--trajectories_format: this run writes its trajectories as '
          f'Parquet (it has at least {PARQUET_FROM:,} session-methods, or '
          'the flag asks for it), which needs pyarrow: pip install pyarrow, '
          'or pass --trajectories_format=jsonl') from e


def path(directory) -> pathlib.Path:
  """The run's trajectories file: ``trajectories.parquet`` where there is
  one, else ``trajectories.jsonl`` (which may not exist)."""
  d = pathlib.Path(directory)
  return d / PARQUET if (d / PARQUET).exists() else d / JSONL


@dataclasses.dataclass(frozen=True)
class Columns:
  """What the Parquet file holds, by column: ``numbers`` (each turn's
  session row), ``sessions`` (how many), then ``(field, values, present)``
  per session field (``session``: one value per session) and per turn
  field (``turn``, in the file's order); ``values`` a list of Python
  values or a ``pyarrow.Array`` of the column itself, ``present`` None
  where every document holds the field, else a bool per document."""
  numbers: Sequence
  sessions: int
  session: list
  turn: list


def write(directory, rows, fmt: str) -> pathlib.Path:
  """Writes ``rows`` (session documents, or a ``run.trajectories``
  collection whose ``parquet_columns`` builds the columns without them) as
  ``fmt`` (``'jsonl'`` or ``'parquet'``); returns the file."""
  d = pathlib.Path(directory)
  if fmt == 'jsonl':
    encoder = json.JSONEncoder(sort_keys=True)  # json.dumps's, made once
    with (d / JSONL).open('w') as f:
      f.writelines(encoder.encode(row) + '\n' for row in rows)
    return d / JSONL
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  made = getattr(rows, 'parquet_columns', None)
  columns = made() if made is not None else None
  table = _table(columns if columns is not None else _columns(list(rows)))
  target = d / PARQUET
  pq.write_table(table, target, compression='zstd')
  return target


def _columns(rows: list) -> Columns:
  """The columns of the session documents ``rows``."""
  turn_keys = {}
  for n, row in enumerate(rows):
    if not row['turns']:
      raise ValueError(f'trajectory row {n} has no turns')
    for turn in row['turns']:
      turn_keys.update(dict.fromkeys(turn))
  clash = set(turn_keys) & (set(_SESSION_FIELDS) | {'session_row'})
  if clash:
    raise ValueError(f'trajectory turns hold session fields {sorted(clash)}')
  session_keys = [k for k in _SESSION_FIELDS if any(k in r for r in rows)]
  extra = {k for r in rows for k in r} - set(_SESSION_FIELDS) - {'turns'}
  if extra:
    raise ValueError(f'trajectory rows hold fields {sorted(extra)} that '
                     'the Parquet layout does not know')
  # One entry per turn: its session's row number, the turn.
  numbers = [n for n, r in enumerate(rows) for _ in r['turns']]
  turns = [t for r in rows for t in r['turns']]
  # How many of the documents each column reads hold its field.
  held = collections.Counter(itertools.chain.from_iterable(turns))
  held.update({k: sum(k in r for r in rows) for k in session_keys})

  def column(k, of):
    if held[k] == len(of):
      return k, list(map(operator.itemgetter(k), of)), None
    return k, [d.get(k) for d in of], [k in d for d in of]
  return Columns(numbers=numbers, sessions=len(rows),
                 session=[column(k, rows) for k in session_keys],
                 turn=[column(k, turns) for k in turn_keys])


def _table(columns: Columns):
  """The Parquet file's table of ``columns``: a session's fields are made
  per session, then repeated by ``take``; a field of mixed or nested
  values is its JSON text (each distinct object encoded once)."""
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  numbers = pa.array(columns.numbers, pa.int64())
  out = {'session_row': numbers}
  json_columns, optional = [], []
  encode = json.JSONEncoder(sort_keys=True).encode
  for (k, values, present), per_session in [
      (c, True) for c in columns.session] + [(c, False) for c in columns.turn]:
    if isinstance(values, pa.Array):
      column = values
    else:
      kind = _kind(values)
      if kind is None:
        json_columns.append(k)
        texts = {}  # by object: a shared reading is encoded once

        def text(v):
          if id(v) not in texts:
            texts[id(v)] = (v, encode(v))
          return texts[id(v)][1]
        column = pa.array([None if v is None else text(v) for v in values],
                          pa.string())
      else:
        column = pa.array(values, kind(pa))
    has = None if present is None else pa.array(present, pa.bool_())
    if per_session:
      column = column.take(numbers)
      has = None if has is None else has.take(numbers)
    out[k] = column
    if has is not None:
      optional.append(k)
      out[f'has:{k}'] = has
  table = pa.table(out)
  meta = dict(version=1, json_columns=json_columns, optional=optional,
              session_fields=[c[0] for c in columns.session],
              turn_fields=[c[0] for c in columns.turn],
              sessions=columns.sessions)
  return table.replace_schema_metadata({_META: json.dumps(meta).encode()})


_SCALARS = ((bool, lambda pa: pa.bool_()), (int, lambda pa: pa.int64()),
            (float, lambda pa: pa.float64()), (str, lambda pa: pa.string()))


def _kind(values):
  """The pyarrow type (a function of the module) of ``values``, or None
  where they are kept as JSON text."""
  types = set(map(type, values)) - {type(None)}
  if not types:
    return lambda pa: pa.null()
  if len(types) == 1:
    (t,) = types
    for scalar, make in _SCALARS:
      if t is scalar:
        return make
    if t is list:
      inner = set(map(type, itertools.chain.from_iterable(
          v for v in values if v is not None)))
      if len(inner) == 1:
        (i,) = inner
        for scalar, make in _SCALARS:
          if i is scalar:
            return lambda pa, make=make: pa.list_(make(pa))
  return None


def read(directory) -> list:
  """The run's session documents from whichever file it wrote (JSON Lines
  checked line by line: ``readers.read_jsonl``)."""
  from recovr_jax import readers  # pylint: disable=g-import-not-at-top
  p = path(directory)
  if p.name == JSONL:
    return readers.read_jsonl(p)
  return read_parquet(p)


def read_parquet(p) -> list:
  """The session documents of ``trajectories.parquet`` at ``p`` (the same
  as ``json.loads`` of the JSON Lines file's lines)."""
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  from recovr_jax import readers  # pylint: disable=g-import-not-at-top
  p = pathlib.Path(p)
  try:
    table = pq.read_table(p)
    meta = json.loads(table.schema.metadata[_META])
    columns = {k: table.column(k).to_pylist() for k in table.column_names}
    sessions = int(meta['sessions'])
  except Exception as e:  # pylint: disable=broad-except
    raise readers.FileError(p, f'not a trajectories file written by '
                            f'experiments.run ({type(e).__name__}: {e})') from e
  for k in meta['json_columns']:
    columns[k] = [None if v is None else json.loads(v) for v in columns[k]]
  rows = []
  turn_fields = meta['turn_fields']
  session_fields = meta['session_fields']
  optional = set(meta['optional'])
  present = {k: columns.get(f'has:{k}') for k in optional}
  for i, n in enumerate(columns['session_row']):
    if n == len(rows):
      rows.append({k: columns[k][i] for k in session_fields
                   if k not in optional or present[k][i]})
      rows[-1]['turns'] = []
    elif n != len(rows) - 1:
      raise readers.FileError(p, f'session_row {n} out of order', i + 1)
    rows[-1]['turns'].append({k: columns[k][i] for k in turn_fields
                              if k not in optional or present[k][i]})
  if len(rows) != sessions:
    raise readers.FileError(p, f'{len(rows)} sessions; its metadata says '
                            f'{sessions}: the file was cut or edited')
  return rows
