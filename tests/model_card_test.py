"""Every shipped checkpoint has a model card; a card changes no digest."""

import pathlib
import shutil
import tempfile

from absl.testing import absltest

from recovr_jax import checksums

CHECKPOINTS = pathlib.Path(__file__).resolve().parents[1] / (
    'recovr_jax/checkpoints')
SECTIONS = ('**What it is.**', '**Training data and split.**',
            '**Recipe and command.**', '**Measured quality**', '**Licence.**')


class ModelCardTest(absltest.TestCase):

  def test_every_checkpoint_has_a_card_with_every_section(self):
    dirs = sorted(d for d in CHECKPOINTS.iterdir() if d.is_dir())
    self.assertGreaterEqual(len(dirs), 5)
    for d in dirs:
      card = d / checksums.MODEL_CARD
      self.assertTrue(card.is_file(), f'{d.name} has no {card.name}')
      text = card.read_text()
      for section in SECTIONS:
        self.assertIn(section, text, f'{d.name}: {section}')
      self.assertIn('python -m experiments.', text, d.name)

  def test_a_card_is_not_part_of_the_digest_or_manifest(self):
    with tempfile.TemporaryDirectory() as tmp:
      d = pathlib.Path(tmp) / 'ckpt'
      d.mkdir()
      (d / 'weights.bin').write_bytes(b'\x00\x01')
      checksums.write_manifest(d)
      before = checksums.path_digest(d)
      (d / checksums.MODEL_CARD).write_text('# a card\n')
      self.assertEqual(checksums.path_digest(d), before)
      self.assertTrue(checksums.verify_manifest(d))
      (d / 'other.bin').write_bytes(b'x')  # any other file still counts
      self.assertNotEqual(checksums.path_digest(d), before)
      with self.assertRaisesRegex(ValueError, 'other.bin'):
        checksums.verify_manifest(d)
      # A manifest that parses but is not a name -> digest object (a
      # list, a digest that is a number) is named, not a traceback.
      (d / 'other.bin').unlink()
      manifest = d / checksums.MANIFEST
      for text in ('["weights.bin"]', '{"weights.bin": 7}', '{"weights'):
        manifest.write_text(text)
        with self.assertRaisesRegex(ValueError, f'manifest {manifest} is '
                                    'unreadable'):
          checksums.verify_manifest(d)
      shutil.rmtree(d)


if __name__ == '__main__':
  absltest.main()
