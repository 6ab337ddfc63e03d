"""The captioning VLM: save/load round trip, shipped checkpoint's captions."""

import pathlib
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np

from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import captioner

WORLD = generator.make_world(generator.WorldConfig(
    num_test_triplets=10, num_train_triplets=10, gallery_size=200))


def _clips(num, seed=0):
  wc = WORLD.config
  rng = np.random.default_rng(seed)
  combos = rng.choice(np.flatnonzero(WORLD.is_test), num)
  attrs = WORLD.combos[combos]
  keys = jax.random.split(jax.random.key(seed), num)
  return attrs, generator.render_batch(attrs, keys, num_frames=wc.num_frames,
                                       image_size=wc.image_size,
                                       pixel_noise=wc.pixel_noise)


class RoundTripTest(absltest.TestCase):

  def test_train_save_load_caption(self):
    out = pathlib.Path(tempfile.mkdtemp()) / 'captioner'
    config = captioner.CaptionerConfig(steps=2, batch=4, hidden=32, heads=2,
                                       encoder_layers=1, decoder_layers=1,
                                       vocabulary_samples=500)
    report = captioner.train(config, WORLD, out, log=lambda _: None,
                             eval_videos=4)
    self.assertEqual(set(report['test']) >= {'shape', 'all_attributes'},
                     True)
    with mock.patch.object(captioner.pretrained, 'from_pretrained',
                           side_effect=AssertionError('weights loaded')):
      first = captioner.Captioner(str(out), batch_size=4)
      self.assertEqual(first.fingerprint, report['id'])  # weights unread
    _, clips = _clips(6)
    captions = first(clips)
    self.assertLen(captions, 6)
    again = captioner.Captioner(str(out), batch_size=8)
    self.assertEqual(again(clips), captions)  # same weights, any batching
    jax.tree.map(np.testing.assert_array_equal, again.params,
                 first.params)
    self.assertEqual(again.fingerprint, report['id'])

  def test_missing_files_are_named(self):
    with self.assertRaisesRegex(FileNotFoundError,
                                'missing: config.json, tokenizer.json'):
      captioner.Captioner(tempfile.mkdtemp())

  def test_a_copy_without_weights_is_described_and_refuses_to_caption(self):
    copy = pathlib.Path(tempfile.mkdtemp()) / 'c'
    shutil.copytree(captioner.DEFAULT_CAPTIONER_DIR, copy,
                    ignore=shutil.ignore_patterns(captioner.WEIGHTS))
    model = captioner.Captioner(str(copy))
    shipped = captioner.Captioner(captioner.DEFAULT_CAPTIONER_DIR)
    self.assertEqual(model.fingerprint, shipped.fingerprint)  # cache key
    with self.assertRaisesRegex(FileNotFoundError, 'has no flax_model.msgpack'
                                '.*--captioner_checkpoint'):
      model(_clips(2)[1])


class ShippedCaptionerTest(absltest.TestCase):
  """The shipped checkpoint describes test renders, with real errors."""

  def test_captions_are_readable_and_differ_from_the_truth(self):
    model = captioner.Captioner(captioner.DEFAULT_CAPTIONER_DIR,
                                batch_size=64)
    attrs, clips = _clips(64, seed=3)
    captions = model(clips)
    accuracy = captioner.attribute_accuracy(captions, attrs)
    # Mostly right (it learned to describe) ...
    self.assertGreater(np.mean([accuracy[a] for a in generator.ATTRIBUTES]),
                       0.5)
    # ... but not the ground truth: some captions get something wrong.
    self.assertGreater(accuracy['wrong_any'], 0.0)
    self.assertTrue(all(lexicon.parse(c) for c in captions))


if __name__ == '__main__':
  absltest.main()
