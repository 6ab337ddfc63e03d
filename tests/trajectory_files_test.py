"""Trajectories as Parquet hold what JSON Lines hold, read back the same."""

import json
import pathlib
import sys
from unittest import mock

from absl.testing import absltest

from recovr_jax import readers
from recovr_jax import trajectory_files


def _rows():
  """Session documents with what a run's hold: ints, floats, None, str,
  bools, lists, dicts, a field some turns lack, a field that is None in
  some turns and missing in others, one of mixed types."""
  rows = []
  for n in range(5):
    turns = [{'turn': 0, 'action': None, 'top10': [3, 1, 2],
              'top10_ids': ['a', 'b/c', 'd'],
              'top10_scores': [0.5, 0.25, -1.0], 'mentioned': {}}]
    for t in range(1, 3 + n % 2):
      turn = {'turn': t, 'action': 'Modify' if t % 2 else 'Rewrite',
              'sigma': 'neg', 'rank_cap_fired': bool(t % 2),
              'top10': [t, n], 'top10_ids': ['x', 'y'],
              'top10_scores': [1.0, 0.123456], 'feedback': 'a "quoted" é',
              'mentioned': {'color': 'red'}, 'mixed': t if t % 2 else 'two'}
      if n % 2:
        turn['question'] = None if t == 1 else 'Which color?'
      turns.append(turn)
    rows.append({'method': 'recovr' if n < 3 else 'ivr', 'session': n,
                 'reference': n + 10, 'target': n + 20,
                 'reference_id': f'r{n}', 'target_id': f't{n}',
                 'error': None if n != 2 else 'ValueError: x', 'turns': turns})
  return rows


class TrajectoryFilesTest(absltest.TestCase):

  def test_parquet_reads_back_what_jsonl_reads_back(self):
    rows = _rows()
    jsonl = pathlib.Path(self.create_tempdir().full_path)
    parquet = pathlib.Path(self.create_tempdir().full_path)
    self.assertEqual(trajectory_files.write(jsonl, rows, 'jsonl').name,
                     'trajectories.jsonl')
    self.assertEqual(trajectory_files.write(parquet, rows, 'parquet').name,
                     'trajectories.parquet')
    from_jsonl = trajectory_files.read(jsonl)
    from_parquet = trajectory_files.read(parquet)
    self.assertEqual(from_parquet, from_jsonl)
    # Byte for byte as JSON (key order, None against a missing key).
    self.assertEqual([json.dumps(r, sort_keys=True) for r in from_parquet],
                     (jsonl / 'trajectories.jsonl').read_text().splitlines())
    self.assertNotIn('question', from_parquet[0]['turns'][1])
    self.assertIsNone(from_parquet[1]['turns'][1]['question'])

  def test_the_parquet_file_is_a_flat_table(self):
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
    d = pathlib.Path(self.create_tempdir().full_path)
    trajectory_files.write(d, _rows(), 'parquet')
    table = pq.read_table(d / 'trajectories.parquet')
    self.assertEqual(table.num_rows, sum(len(r['turns']) for r in _rows()))
    self.assertEqual(str(table.schema.field('top10').type.value_type),
                     'int64')
    self.assertEqual(str(table.schema.field('rank_cap_fired').type), 'bool')
    self.assertEqual(str(table.schema.field('mentioned').type), 'string')
    self.assertEqual(table.column('session_row').to_pylist()[:4],
                     [0, 0, 0, 1])

  def test_auto_picks_parquet_from_the_threshold(self):
    big = trajectory_files.PARQUET_FROM
    self.assertEqual(trajectory_files.chosen('auto', big - 1), 'jsonl')
    self.assertEqual(trajectory_files.chosen('auto', big), 'parquet')
    self.assertEqual(trajectory_files.chosen('jsonl', big), 'jsonl')
    with self.assertRaisesRegex(ValueError, '--trajectories_format=csv'):
      trajectory_files.chosen('csv', 1)

  def test_parquet_without_pyarrow_is_refused_naming_the_flag(self):
    trajectory_files.check_writable('jsonl')
    with mock.patch.dict(sys.modules, {'pyarrow': None}):
      trajectory_files.check_writable('jsonl')
      with self.assertRaisesRegex(ValueError,
                                  '--trajectories_format.*pip install'):
        trajectory_files.check_writable('parquet')

  def test_a_damaged_or_cut_file_is_named(self):
    d = pathlib.Path(self.create_tempdir().full_path)
    trajectory_files.write(d, _rows(), 'parquet')
    path = d / 'trajectories.parquet'
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with self.assertRaisesRegex(readers.FileError,
                                f'^{path}.*not a trajectories file'):
      trajectory_files.read(d)


if __name__ == '__main__':
  absltest.main()
