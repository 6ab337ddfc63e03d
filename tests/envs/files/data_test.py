"""Tests for the real-data loaders: annotations and gallery embeddings."""

import pathlib
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from recovr_jax.envs.files import data
from recovr_jax.envs.files import finecvr

HEADER = 'pth1,pth2,edit,txt1,txt2,extra\n'


class CsvTest(absltest.TestCase):

  def write(self, text):
    path = pathlib.Path(self.create_tempfile(content=text).full_path)
    return path

  def test_reads_required_columns_and_ignores_extra(self):
    path = self.write(HEADER + 'a,b,make it red,cap a,cap b,zzz\n'
                      'b,c,"at night, please",cap b,cap c,\n')
    ann = data.load_covr_csv(path, video_ids={'a', 'b', 'c'})
    self.assertEqual(ann.reference, ('a', 'b'))
    self.assertEqual(ann.edit, ('make it red', 'at night, please'))
    self.assertEqual(ann.target_caption, ('cap b', 'cap c'))

  def test_missing_column_names_file_and_column(self):
    path = self.write('pth1,pth2,txt1,txt2\na,b,x,y\n')
    with self.assertRaisesRegex(ValueError, f'{path}.*missing column.*edit'):
      data.load_covr_csv(path)

  def test_unknown_id_names_row_and_column(self):
    path = self.write(HEADER + 'a,b,e,x,y,\na,q,e,x,y,\n')
    with self.assertRaisesRegex(ValueError,
                                "row 3, column 'pth2': unknown video id 'q'"):
      data.load_covr_csv(path, video_ids={'a', 'b'})
    # A reference outside the gallery: the fix is its embedding, in the
    # file import_covr --reference_output writes (dropping is the last).
    path = self.write(HEADER + 'a,b,e,x,y,\nr,b,e,x,y,\n')
    with self.assertRaisesRegex(
        ValueError, "column 'pth1': unknown video id 'r' .*needs "
        '--reference_embeddings.*import_covr --reference_output'):
      data.load_covr_csv(path, video_ids={'a', 'b'})

  def test_empty_edit_and_short_rows(self):
    path = self.write(HEADER + 'a,b,,x,y,\n')
    with self.assertRaisesRegex(ValueError, "row 2, column 'edit' is empty"):
      data.load_covr_csv(path)
    path = self.write(HEADER + 'a,b\n')
    with self.assertRaisesRegex(ValueError, 'row 2: 2 fields, the header has '
                                r'6 \(a row cut short\?\)'):
      data.load_covr_csv(path)
    with self.assertRaisesRegex(FileNotFoundError, 'does not exist'):
      data.load_covr_csv('/nonexistent.csv')

  def test_a_duplicated_column_or_a_long_row_is_refused(self):
    # Read as dicts, the second 'edit' would overwrite the first, and an
    # extra field would shift nothing but vanish: both ran to exit 0.
    path = self.write('pth1,pth2,edit,txt1,txt2,edit\na,b,x,y,z,w\n')
    with self.assertRaisesRegex(ValueError, "row 1: the column 'edit' "
                                'appears twice in the header'):
      data.load_covr_csv(path)
    path = self.write(HEADER + 'a,b,e,x,y,\nb,c,e,x,y,z,w\n')
    with self.assertRaisesRegex(ValueError, 'row 3: 7 fields, the header has '
                                r'6 \(an unquoted comma\?\)'):
      data.load_covr_csv(path)

  def test_an_unclosed_quote_is_an_error_not_a_swallowed_file(self):
    # Without it, the last column would take every later row (the
    # MSR-VTT layout's sentence is last): rows lost without a word.
    path = self.write('key,vid_key,video_id,sentence\n'
                      'r0,m0,v0,"a man cooks\nr1,m1,v1,a dog runs\n')
    with self.assertRaisesRegex(ValueError, 'row 2: .*unclosed quote'):
      data.load_text_queries(path)
    path = self.write(HEADER + 'a,b,"first,x,y,\nb,c,second,x,y,\n')
    with self.assertRaisesRegex(ValueError, 'row 2: .*unclosed quote'):
      data.load_covr_csv(path)
    # A quoted field over two lines is still one field.
    path = self.write(HEADER + 'a,b,"two\nlines",x,y,\n')
    self.assertEqual(data.load_covr_csv(path).edit, ('two\nlines',))

  def test_text_queries_in_msrvtt_layout(self):
    path = self.write('key,vid_key,video_id,sentence\n'
                      'ret0,msr7,video7,"a man, cooking"\n'
                      'ret1,msr9,video9,a dog runs\n')
    q = data.load_text_queries(path, video_ids={'video7', 'video9'})
    self.assertEqual(q.target, ('video7', 'video9'))
    self.assertEqual(q.text, ('a man, cooking', 'a dog runs'))
    with self.assertRaisesRegex(ValueError, "row 3, column 'video_id': "
                                "unknown video id 'video9'"):
      data.load_text_queries(path, video_ids={'video7'})


class EmbeddingsTest(parameterized.TestCase):

  def path(self, suffix):
    return pathlib.Path(tempfile.mkdtemp()) / f'gallery{suffix}'

  @parameterized.parameters('.npz', '.safetensors')
  def test_round_trip_normalises(self, suffix):
    path = self.path(suffix)
    video = np.array([[3.0, 4.0], [0.0, 2.0]], np.float32)
    data.save_embeddings(path, ['v1', 'v2'], video, captions=['a', 'b'])
    got = data.load_embeddings(path, dim=2)
    self.assertEqual(got.ids, ('v1', 'v2'))
    self.assertEqual(got.captions, ('a', 'b'))
    np.testing.assert_allclose(got.video, [[0.6, 0.8], [0.0, 1.0]])
    self.assertEqual(got.index(), {'v1': 0, 'v2': 1})

  @parameterized.parameters('.npz', '.safetensors')
  def test_rejects_bad_rows(self, suffix):
    path = self.path(suffix)
    video = np.ones((3, 2), np.float32)
    video[1, 0] = np.nan
    data.save_embeddings(path, ['a', 'b', 'c'], video)
    with self.assertRaisesRegex(ValueError, "row 1 \\(id 'b'\\) holds NaN"):
      data.load_embeddings(path)
    data.save_embeddings(path, ['a', 'b', 'a'], np.ones((3, 2)))
    with self.assertRaisesRegex(ValueError, "duplicate id 'a'.*rows 0 and 2"):
      data.load_embeddings(path)
    data.save_embeddings(path, ['a', 'b'], np.ones((2, 2)))
    with self.assertRaisesRegex(ValueError, 'dimension 2, expected 3'):
      data.load_embeddings(path, dim=3)

  def test_npz_field_errors(self):
    path = self.path('.npz')
    np.savez(path, ids=np.array(['a']), other=np.ones((1, 2)))
    with self.assertRaisesRegex(ValueError, 'no array named video'):
      data.load_embeddings(path)
    np.savez(path, ids=np.array(['a']), video=np.ones((1, 2)))
    whole = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(whole[:len(whole) // 2])  # cut mid-write
    with self.assertRaisesRegex(ValueError, 'not a readable .npz archive'):
      data.load_embeddings(path)
    np.savez(path, ids=np.array(['a', 'b']), video=np.ones((3, 2)))
    with self.assertRaisesRegex(ValueError, "'ids' has 2 entries but 'video'"):
      data.load_embeddings(path)
    with self.assertRaisesRegex(ValueError, 'unknown embeddings format'):
      data.load_embeddings(self.create_tempfile(file_path='x.csv').full_path)



class FineCvrFeaturesTest(absltest.TestCase):

  def test_frames_averaged_and_damaged_files_named(self):
    d = pathlib.Path(self.create_tempdir().full_path)
    np.save(d / 'v1.npy', np.array([[1., 2.], [3., 4.]]))
    np.testing.assert_allclose(finecvr.pooled_features(d, ['v1']), [[2., 3.]])
    whole = (d / 'v1.npy').read_bytes()
    for cut in (0, 20, len(whole) - 4):  # empty, in the header, in the data
      (d / 'v2.npy').write_bytes(whole[:cut])
      with self.subTest(cut=cut), self.assertRaisesRegex(
          ValueError, r'v2.npy: not a readable NumPy array file'):
        finecvr.pooled_features(d, ['v1', 'v2'])

if __name__ == '__main__':
  absltest.main()
