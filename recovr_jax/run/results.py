"""Reading a finished run back: ``load_run(directory)``.

Returns the run's per-turn metrics (with their intervals), its per-session
ranks and its resolved configuration. With pandas installed (the
``analysis`` extra) the metrics and ranks are DataFrames; without it they
are plain lists of row dicts with the same columns.
"""

import csv
import json
import pathlib


def _rows(path: pathlib.Path, numeric: dict) -> list[dict]:
  with path.open(newline='') as f:
    rows = list(csv.DictReader(f))
  for row in rows:
    for name, kind in numeric.items():
      if row.get(name) not in (None, ''):
        row[name] = kind(row[name])
      elif name in row:
        row[name] = None
  return rows


def load_run(directory, pandas: bool | None = None) -> dict:
  """``{'metrics', 'ranks', 'config'}`` of the run in ``directory``.

  ``metrics``: one row per method and turn (``metrics.csv``: R@K, BRI,
  Hits@K, ``<metric>_lower`` / ``_upper``); ``ranks``: one row per method,
  session and turn (``ranks.csv``); ``config``: ``resolved_config.json``.
  ``pandas``: DataFrames (default: when pandas is importable).

  Raises ``FileNotFoundError`` naming the first missing file.
  """
  d = pathlib.Path(directory)
  if (d / 'INCOMPLETE').exists():
    raise FileNotFoundError(f'{d}: its run has not finished ({d / "INCOMPLETE"}'
                            '); rerun the command to resume it')
  for name in ('metrics.csv', 'ranks.csv', 'resolved_config.json'):
    if not (d / name).is_file():
      raise FileNotFoundError(f'{d / name} does not exist: not a finished '
                              'run directory (python -m experiments.run '
                              'writes it)')
  if pandas is None:
    try:
      import pandas as pd  # pylint: disable=g-import-not-at-top,unused-import
      pandas = True
    except ImportError:
      pandas = False
  config = json.loads((d / 'resolved_config.json').read_text())
  if pandas:
    import pandas as pd  # pylint: disable=g-import-not-at-top
    return {'metrics': pd.read_csv(d / 'metrics.csv'),
            'ranks': pd.read_csv(d / 'ranks.csv', dtype={
                'target_id': str, 'top1_id': str, 'query_id': str}),
            'config': config}
  with (d / 'metrics.csv').open(newline='') as f:
    header = next(csv.reader(f))
  numeric = {name: float for name in header if name not in ('method', 'turn')}
  numeric['turn'] = int
  return {'metrics': _rows(d / 'metrics.csv', numeric),
          'ranks': _rows(d / 'ranks.csv', {'session': int, 'turn': int,
                                           'rank': int}),
          'config': config}
