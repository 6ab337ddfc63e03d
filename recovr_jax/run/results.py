"""Reading a finished run back: ``load_run(directory)``.

Returns the run's per-turn metrics (with their intervals), its per-session
ranks, its trajectories (one row per method, session and turn) and its
resolved configuration. With pandas installed (the ``analysis`` extra) the
metrics, ranks and trajectories are DataFrames; without it they are plain
lists of row dicts with the same columns.
"""

import importlib.util

from recovr_jax import readers
from recovr_jax import trajectory_files

OUTPUTS = ('metrics.csv', 'ranks.csv', 'resolved_config.json')


def load_run(directory, pandas: bool | None = None) -> dict:
  """``{'metrics', 'ranks', 'trajectories', 'config'}`` of the run in
  ``directory``.

  ``metrics``: one row per method and turn (``metrics.csv``: R@K, BRI,
  Hits@K, ``<metric>_lower`` / ``_upper``; R@K, Hits@K and the stop rate
  are fractions in [0, 1], not percentages as the report prints them; BRI
  is in log-rank units); ``ranks``: one row per method,
  session and turn (``ranks.csv``); ``trajectories``: one row per method,
  session and turn of ``trajectories.jsonl`` or ``.parquet`` (the session's ``method``,
  ``session``, ``reference`` / ``target`` (gallery indices) with their
  ``reference_id`` / ``target_id``, ``error``, then the turn's fields:
  ``turn``, ``action``, ``feedback``, ``question``, the reasoner's replies,
  ``rank_cap_fired``, ``top10`` (indices), ``top10_ids`` and ``top10_scores``
  (the method's scores of the shown top 10)); ``config``: ``resolved_config.json``. ``pandas``: DataFrames
  (default: when pandas is importable).

  Every file is read whole and checked first (``readers``): a run that has
  not finished, a file cut while it was written, a row with the wrong
  number of fields or a value that does not parse raises, naming the file,
  the row and the column.

  Raises ``FileNotFoundError`` naming the first missing file (or the
  ``INCOMPLETE`` marker of a run that has not finished),
  ``readers.FileError`` naming what is wrong in a file.
  """
  d = readers.require_finished(
      directory, OUTPUTS + (trajectory_files.path(directory).name,))
  if pandas is None:
    pandas = importlib.util.find_spec('pandas') is not None
  config = readers.read_json(d / 'resolved_config.json')
  metrics_header = readers.read_csv(d / 'metrics.csv', ('method', 'turn'),
                                    written_by_us=True).header
  numeric = {name: float for name in metrics_header
             if name not in ('method', 'turn')}
  numeric['turn'] = int
  metrics = readers.read_csv(d / 'metrics.csv', types=numeric,
                             written_by_us=True)
  ranks = readers.read_csv(
      d / 'ranks.csv', ('method', 'session', 'turn', 'rank'),
      types={'session': int, 'turn': int, 'rank': int}, written_by_us=True)
  _check_ranks(d / 'ranks.csv', ranks, metrics, config)
  turns = trajectory_rows(trajectory_files.read(d))
  if pandas:
    import pandas as pd  # pylint: disable=g-import-not-at-top
    return {'metrics': pd.read_csv(d / 'metrics.csv'),
            'ranks': pd.read_csv(d / 'ranks.csv', dtype={
                'target_id': str, 'top1_id': str, 'query_id': str,
                'action': str}, keep_default_na=False),
            'trajectories': pd.DataFrame(turns),
            'config': config}
  return {'metrics': metrics.rows, 'ranks': ranks.rows,
          'trajectories': turns, 'config': config}


_SESSION_FIELDS = ('method', 'session', 'reference', 'target',
                   'reference_id', 'target_id', 'error')


def trajectory_rows(sessions: list) -> list:
  """``trajectories.jsonl``'s sessions as one flat row per turn: the
  session's fields, then the turn's."""
  return [{**{k: s.get(k) for k in _SESSION_FIELDS}, **turn}
          for s in sessions for turn in s['turns']]


def _check_ranks(path, ranks, metrics, config):
  """Each method of ``metrics.csv`` has one row per session and turn in
  ``ranks.csv`` (the run's ``num_sessions`` x ``loop.num_turns + 1``): a
  file cut at a row's end parses, and is caught here."""
  try:
    sessions, turns = config['num_sessions'], config['loop']['num_turns'] + 1
  except (KeyError, TypeError) as e:
    raise readers.FileError(path.parent / 'resolved_config.json',
                            f'no num_sessions or loop.num_turns ({e!r}): not '
                            'written by experiments.run') from e
  counts = {}
  for row in ranks.rows:
    counts[row['method']] = counts.get(row['method'], 0) + 1
  for method in dict.fromkeys(r['method'] for r in metrics.rows):
    if counts.get(method, 0) != sessions * turns:
      raise readers.FileError(
          path, f'{counts.get(method, 0)} rows of method {method!r}; the run '
          f'has {sessions} sessions x {turns} turns = {sessions * turns}: '
          'the file was cut or edited (rerun the command to write it '
          'again)')
