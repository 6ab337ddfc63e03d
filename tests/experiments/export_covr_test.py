"""The CoVR exporter on a fake CoVR model, data set and loader (no torch):
its files are what recovr_jax's real-data loader reads."""

import pathlib
import tempfile

from absl.testing import absltest
import numpy as np
import pandas as pd

from experiments.data import export_covr
from recovr_jax.envs.files import data

D = 8
ROWS = [('00/r0', '01/t2', 'make it red'), ('00/r1', '01/t0', 'at night'),
        ('00/r2', '01/t1', 'two of them'), ('00/r3', '01/t3', 'bigger')]


class FakeDataset:
  """What CoVR's WebVidCoVRDataset holds after its set-up (iterate=pth2):
  ``target_txts`` sorted, ``df`` indexed by them, ``annotation_pth``."""

  def __init__(self, csv_path):
    self.annotation_pth = str(csv_path)
    df = pd.read_csv(csv_path).sort_values('pth2').reset_index(drop=True)
    self.target_txts = df['pth2'].unique()
    self.df = df.set_index('pth2')
    self.df['pth2'] = self.df.index


def frames(video: str) -> np.ndarray:
  seed = sum(map(ord, video))
  return np.random.default_rng(seed).random((3, 4, 4)).astype(np.float32)


def target_feature(video: str) -> np.ndarray:
  return np.random.default_rng(sum(map(ord, video)) + 1).normal(
      size=D).astype(np.float32)


class FakeLoader:
  """Batches of two in the dataset's order, as CoVR's test loader gives."""

  def __init__(self, dataset, drop=()):
    self.dataset = dataset
    self.drop = set(drop)

  def __iter__(self):
    ds = self.dataset
    keep = [i for i, t in enumerate(ds.target_txts) if t not in self.drop]
    for start in range(0, len(keep), 2):
      ids = keep[start:start + 2]
      rows = [ds.df.loc[ds.target_txts[i]] for i in ids]
      yield {'ref_img': np.stack([frames(r['pth1']) for r in rows]),
             'tar_img_feat': np.stack([target_feature(r['pth2'])
                                       for r in rows]),
             'edit': [r['edit'] for r in rows], 'pair_id': np.array(ids)}


PROJECTION = np.random.default_rng(7).normal(size=(48 + 1, D))


def fake_encode(ref_img, edits):
  """A fake CoVR model: the frames and the edit's length, projected."""
  x = np.concatenate([np.asarray(ref_img).reshape(len(edits), -1),
                      np.array([[len(e)] for e in edits], np.float32)], 1)
  q = x @ PROJECTION
  return q / np.linalg.norm(q, axis=1, keepdims=True)


class ExportTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(tempfile.mkdtemp())
    self.csv = self.root / 'test.csv'
    pd.DataFrame([{'pth1': r, 'pth2': t, 'edit': e, 'txt1': f'ref {r}',
                   'txt2': f'caption of {t}'} for r, t, e in ROWS]).to_csv(
                       self.csv, index=False)
    self.dataset = FakeDataset(self.csv)

  def test_queries_in_csv_order_and_the_gallery_load_in_recovr_jax(self):
    out, gallery = self.root / 'q.npz', self.root / 'g.npz'
    export_covr.ExportWebVidCoVR(str(out), str(gallery), encode=fake_encode,
                                 remove_self_similarity=True)(
                                     object(), FakeLoader(self.dataset))
    ann = data.load_covr_csv(self.csv)
    # What the runner's --query_embeddings reads, checked row by row.
    queries = data.load_query_embeddings(out, ann, D)
    want = fake_encode(np.stack([frames(r) for r, _, _ in ROWS]),
                       [e for _, _, e in ROWS])
    np.testing.assert_allclose(queries, want, rtol=1e-5)
    g = data.load_embeddings(gallery, normalize=False)
    self.assertEqual(g.ids, tuple(t for _, t, _ in ROWS))
    np.testing.assert_allclose(g.video[0], target_feature('01/t2'),
                               rtol=1e-6)
    self.assertEqual(g.captions[1], 'caption of 01/t0')

  def test_a_pair_repeated_with_another_edit_is_not_given_the_first_query(self):
    rows = [{'pth1': 'a', 'pth2': 'b', 'edit': 'make it red'},
            {'pth1': 'a', 'pth2': 'b', 'edit': 'make it blue'}]
    queries = np.eye(2, dtype=np.float32)
    got = export_covr.in_csv_order(rows, ['a', 'a'], ['b', 'b'], queries,
                                   ['make it red', 'make it blue'])
    np.testing.assert_array_equal(got, queries)
    with self.assertRaisesRegex(ValueError, r'CSV row 3 \(a -> b\) has no '
                                'exported query'):
      export_covr.in_csv_order(rows, ['a'], ['b'], queries[:1],
                               ['make it red'])

  def test_a_row_without_a_query_or_several_processes_are_refused(self):
    out = self.root / 'q.npz'
    with self.assertRaisesRegex(ValueError, r'CSV row 4 \(00/r2 -> 01/t1\) '
                                'has no exported query'):
      export_covr.ExportWebVidCoVR(str(out), encode=fake_encode)(
          object(), FakeLoader(self.dataset, drop={'01/t1'}))
    self.assertFalse(out.exists())   # nothing written

    class TwoProcesses:
      world_size = 2
    with self.assertRaisesRegex(ValueError, 'one process'):
      export_covr.ExportWebVidCoVR(str(out), encode=fake_encode)(
          object(), FakeLoader(self.dataset), TwoProcesses())

  def test_a_non_finite_feature_is_named(self):
    def broken(ref_img, edits):
      q = fake_encode(ref_img, edits)
      q[0, 0] = np.nan
      return q
    with self.assertRaisesRegex(ValueError, r'the query of 00/r1 -> 01/t0 '
                                'is not finite'):
      export_covr.ExportWebVidCoVR(str(self.root / 'q.npz'), encode=broken)(
          object(), FakeLoader(self.dataset))


if __name__ == '__main__':
  absltest.main()
