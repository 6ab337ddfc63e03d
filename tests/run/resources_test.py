"""Tests of device selection and the memory-fit checks."""

from absl.testing import absltest
import jax

from recovr_jax.run import resources


class ResourcesTest(absltest.TestCase):

  def test_select_device(self):
    self.assertEqual(resources.select_device('cpu').platform, 'cpu')
    self.assertEqual(resources.select_device('auto'), jax.devices()[0])
    with self.assertRaisesRegex(ValueError, "--platform='quantum': valid"):
      resources.select_device('quantum')
    with self.assertRaisesRegex(ValueError, '--device=gpu was requested but '
                                'JAX finds no gpu device.*available: cpu'):
      resources.select_device('gpu', flag='--device')

  def test_check_fits(self):
    free = resources.available_bytes()
    self.assertGreater(free, 0)
    resources.check_fits(1 << 20, 'a small batch', '--batch_size')
    with self.assertRaisesRegex(ValueError, r'a huge batch needs about .* GiB '
                                r'but only .* GiB are free on cpu; lower '
                                r'--batch_size'):
      resources.check_fits(2 * free, 'a huge batch', '--batch_size')

  def test_session_batch_bytes(self):
    small = resources.session_batch_bytes(10, 2, 10_000, 384, 100, 5, 16384)
    more = resources.session_batch_bytes(20, 2, 10_000, 384, 100, 5, 16384)
    self.assertGreater(more, small)
    # The scores block is bounded by the gallery, then by the block size.
    self.assertEqual(
        resources.session_batch_bytes(1, 1, 100, 4, 1, 1, 16384)
        - 4 * 100 * 4 - 32, 12 * 100)


if __name__ == '__main__':
  absltest.main()
