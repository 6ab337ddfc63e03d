"""The study's access file is checked whole when the study starts: a code
that would let anyone in (empty, short, not a string) or a participant the
study does not know stops it, naming the file."""

import json
import pathlib
import tempfile

from absl.testing import absltest

from recovr_jax.study import log
from recovr_jax.study import study

PARTICIPANTS = ('ann', 'bob')


class AccessFileTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(tempfile.mkdtemp())
    self.good = study._access(self.dir, PARTICIPANTS)  # pylint: disable=protected-access
    self.path = self.dir / study.ACCESS_FILE

  def test_a_written_file_reads_back_and_grows_for_new_participants(self):
    again = study._access(self.dir, PARTICIPANTS + ('cy',))  # pylint: disable=protected-access
    self.assertEqual({k: again['codes'][k] for k in PARTICIPANTS},
                     self.good['codes'])
    self.assertLen(again['codes']['cy'], study.CODE_LENGTH)

  def test_each_unsafe_file_refuses_to_start(self):
    cases = [
        (lambda d: d['codes'].update(ann=''), "participant 'ann' is not a "
         'string of 22 characters'),
        (lambda d: d['codes'].update(ann=12345), "participant 'ann' is not a "
         'string'),
        (lambda d: d['codes'].update(ann=None), "participant 'ann'"),
        (lambda d: d['codes'].update(eve='x' * 22), "a code for participant "
         "'eve', who is not in this study"),
        (lambda d: d.update(codes=['ann']), 'no "codes" object'),
        (lambda d: d.update(csrf_key=''), '"csrf_key" is not a string'),
        (lambda d: d.update(admin=7), '"admin" is not a string'),
    ]
    for change, message in cases:
      with self.subTest(message=message):
        data = json.loads(json.dumps(self.good))
        change(data)
        self.path.write_text(json.dumps(data))
        with self.assertRaisesRegex(log.LogError,
                                    f'^{self.path}: .*{message}'):
          study._access(self.dir, PARTICIPANTS)  # pylint: disable=protected-access
    self.path.write_text('{"codes": {"ann": "')
    with self.assertRaisesRegex(log.LogError,
                                f'^{self.path}, line 1: not valid JSON'):
      study._access(self.dir, PARTICIPANTS)  # pylint: disable=protected-access


if __name__ == '__main__':
  absltest.main()
