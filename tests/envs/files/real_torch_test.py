"""The torch-free ``.pth`` reader and the CoVR exporter against real torch:
files ``torch.save`` writes, and tensors (not arrays) from the loader and
the model. Needs the ``torch`` extra (``pip install -e ".[torch]"``); it
skips without torch unless ``RECOVR_REQUIRE_TORCH=1`` (CI sets it)."""

import os
import pathlib
import tempfile
import unittest

from absl.testing import absltest
import numpy as np

from experiments.data import export_covr
from recovr_jax.envs.files import data
from recovr_jax.envs.files import torch_files
from tests.experiments import export_covr_test

try:
  import torch  # pylint: disable=g-import-not-at-top
except ImportError:
  torch = None
  if os.environ.get('RECOVR_REQUIRE_TORCH') == '1':
    raise


@unittest.skipIf(torch is None, 'torch is not installed (the torch extra)')
class RealTorchFilesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(tempfile.mkdtemp())

  def test_files_torch_saves_are_read(self):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, 8, generator=g)
    tensors = {
        'matrix': base[0],
        'frames': base,
        'vector': base[1, 2],
        'transposed view': base[0].t(),          # a stride, not contiguous
        'offset slice': base[2:, 1:5, ::2],      # an offset into storage
        'half': base[0].half(),
        'bfloat16': base[0].bfloat16(),
        'double': base[0].double(),
    }
    for name, tensor in tensors.items():
      with self.subTest(name):
        path = self.root / 'x.pth'
        torch.save(tensor, path)
        got = torch_files.load(path)
        # Half precision comes back as float32, the rest as saved.
        want = (tensor.double().numpy() if tensor.dtype == torch.float64
                else tensor.float().numpy())
        self.assertEqual(got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)

  def test_files_written_without_torch_are_read_by_torch(self):
    for shape in ((5, 8), (2, 3, 8), (8,)):
      x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
      path = self.root / 'y.pth'
      torch_files.save(path, x)
      got = torch.load(path, weights_only=True)
      self.assertIsInstance(got, torch.Tensor)
      np.testing.assert_array_equal(got.numpy(), x)

  def test_an_integer_tensor_is_refused_with_the_file_named(self):
    path = self.root / 'ids.pth'
    torch.save(torch.arange(6), path)
    with self.assertRaisesRegex(torch_files.TorchFileError, 'ids.pth'):
      torch_files.load(path)

  def test_the_exporter_takes_tensors_from_the_loader_and_the_model(self):
    csv = self.root / 'test.csv'
    import pandas as pd  # pylint: disable=g-import-not-at-top
    pd.DataFrame([{'pth1': r, 'pth2': t, 'edit': e, 'txt1': f'ref {r}',
                   'txt2': f'caption of {t}'} for r, t, e in export_covr_test.ROWS]
                 ).to_csv(csv, index=False)
    dataset = export_covr_test.FakeDataset(csv)

    class TensorLoader(export_covr_test.FakeLoader):
      def __iter__(self):
        for batch in super().__iter__():
          yield {'ref_img': torch.from_numpy(batch['ref_img']),
                 'tar_img_feat': torch.from_numpy(
                     batch['tar_img_feat']).half(),
                 'edit': batch['edit'],
                 'pair_id': torch.from_numpy(batch['pair_id'])}

    def encode(ref_img, edits):
      self.assertIsInstance(ref_img, torch.Tensor)
      return torch.from_numpy(export_covr_test.fake_encode(ref_img.numpy(), edits))

    out, gallery = self.root / 'q.npz', self.root / 'g.npz'
    export_covr.ExportWebVidCoVR(str(out), str(gallery), encode=encode)(
        object(), TensorLoader(dataset))
    ann = data.load_covr_csv(csv)
    queries = data.load_query_embeddings(out, ann, export_covr_test.D)
    want = export_covr_test.fake_encode(np.stack([export_covr_test.frames(r)
                                       for r, _, _ in export_covr_test.ROWS]),
                             [e for _, _, e in export_covr_test.ROWS])
    np.testing.assert_allclose(queries, want, rtol=1e-5)
    g = data.load_embeddings(gallery, normalize=False)
    # The target features went through float16 in the loader.
    np.testing.assert_allclose(
        g.video[0], export_covr_test.target_feature('01/t2').astype(np.float16),
        rtol=1e-3)


if __name__ == '__main__':
  absltest.main()
