"""Tests for the generated world: splits, triplets, language and rendering."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.envs.world.benchmark import generator

SMALL = generator.WorldConfig(num_test_triplets=60, num_train_triplets=300)


def _world(config=SMALL):
  return generator.make_world(config)


WORDS = {
    'shape': generator.SHAPE_WORDS, 'colour': generator.COLOUR_WORDS,
    'motion': generator.MOTION_WORDS, 'background': generator.BACKGROUND_WORDS,
    'lighting': generator.LIGHTING_WORDS, 'size': generator.SIZE_WORDS,
}


def mentions(text, attribute, value):
  """True if ``text`` holds a phrase of ``attribute = value``."""
  name = generator.VALUES[attribute][value]
  if attribute == 'count':
    return any(w in text for w in generator.COUNT_WORDS[name] + (name,))
  options = WORDS[attribute][name]
  if attribute == 'shape':
    options = tuple(w for pair in options for w in pair)
  extra = {'background': generator.BACKGROUND_NOUNS,
           'lighting': generator.LIGHTING_NOUNS}.get(attribute, {})
  options = options + tuple(extra.get(name, ()))
  if attribute == 'motion':
    options = options + tuple(o.replace('moving ', 'move ') for o in options)
  return any(o in text for o in options)


class WorldTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.world = _world()

  def test_size_of_the_latent(self):
    self.assertGreaterEqual(len(generator.all_combos()), 10_000)
    self.assertGreaterEqual(sum(n >= 4 for n in generator.NUM_VALUES), 6)
    combos = generator.all_combos()
    np.testing.assert_array_equal(generator.combo_index(combos),
                                  np.arange(len(combos)))

  def test_pure_function_of_the_seed(self):
    again = generator._build_world(SMALL)  # pylint: disable=protected-access
    self.assertEqual(again.gallery_captions, self.world.gallery_captions)
    self.assertEqual(again.test.edit, self.world.test.edit)
    np.testing.assert_array_equal(again.train.reference,
                                  self.world.train.reference)
    other = _world(dataclasses.replace(SMALL, seed=1))
    self.assertNotEqual(other.test.edit, self.world.test.edit)

  def test_built_once_per_config_and_read_only(self):
    self.assertIs(_world(), self.world)
    self.assertIs(_world(dataclasses.replace(SMALL)), self.world)
    with self.assertRaisesRegex(ValueError, 'read-only'):
      self.world.test.target[0] = 1
    with self.assertRaisesRegex(ValueError, 'read-only'):
      self.world.gallery_combos[0] = 1

  def test_splits_share_no_combination(self):
    w = self.world
    gallery = set(w.gallery_combos.tolist())
    train = set(w.train_combos.tolist())
    self.assertEmpty(gallery & train)
    self.assertTrue(np.all(w.is_test[w.gallery_combos]))
    self.assertFalse(np.any(w.is_test[w.train.reference]))
    self.assertFalse(np.any(w.is_test[w.train.target]))
    self.assertGreaterEqual(len(w.gallery_combos), 2000)
    self.assertLen(set(w.gallery_ids), len(w.gallery_combos))

  def test_triplets_differ_in_named_and_unmentioned_attributes(self):
    w = self.world
    for split, attrs_of in (
        (w.test, lambda i: w.gallery_attributes[i]),
        (w.train, lambda i: w.combos[i])):
      for q in range(len(split.target)):
        ref, tgt = attrs_of(split.reference[q]), attrs_of(split.target[q])
        changed = ref != tgt
        np.testing.assert_array_equal(changed,
                                      split.named[q] | split.unmentioned[q])
        self.assertIn(int(split.named[q].sum()), (1, 2))
        self.assertLessEqual(int(split.unmentioned[q].sum()),
                             SMALL.max_unmentioned)
        for a in np.flatnonzero(split.named[q]):
          attribute = generator.ATTRIBUTES[a]
          self.assertTrue(mentions(split.edit[q], attribute, tgt[a]),
                          (split.edit[q], attribute))
    self.assertLen(set(w.test.target.tolist()), len(w.test.target))

  def test_unmentioned_share_is_a_dial(self):
    none = _world(dataclasses.replace(SMALL, unmentioned_share=0.0))
    self.assertFalse(np.any(none.train.unmentioned))
    every = _world(dataclasses.replace(SMALL, unmentioned_share=1.0))
    self.assertTrue(np.all(every.train.unmentioned.any(axis=1)))
    share = self.world.train.unmentioned.any(axis=1).mean()
    self.assertBetween(share, 0.4, 0.6)

  def test_every_target_has_a_hard_negative(self):
    self.assertGreaterEqual(generator.hard_negative_counts(self.world).min(), 1)

  def test_smaller_gallery_keeps_triplets_and_hard_negatives(self):
    small = _world(dataclasses.replace(SMALL, num_test_triplets=20,
                                       gallery_size=400))
    self.assertLen(small.gallery_combos, 400)
    self.assertGreaterEqual(generator.hard_negative_counts(small).min(), 1)

  def test_captions_name_every_attribute(self):
    rng = np.random.default_rng(0)
    for combo in generator.all_combos()[::997]:
      text = generator.caption(rng, combo)
      for a, attribute in enumerate(generator.ATTRIBUTES):
        self.assertTrue(mentions(text, attribute, combo[a]), (text, attribute))

  def test_bad_config(self):
    for field, value, message in (
        ('test_share', 0.0, 'test_share must be in'),
        ('num_frames', 3, 'num_frames must be in 4..8'),
        ('unmentioned_share', 1.5, 'unmentioned_share must be in'),
        ('max_unmentioned', 3, 'max_unmentioned must be in 0..2'),
        ('num_test_triplets', 0, 'num_test_triplets must be >= 1'),
        ('seed', -1, 'seed must be >= 0'),  # NumPy's traceback
        ('pixel_noise', float('nan'), 'pixel_noise must be a finite'),
        ('pixel_noise', -0.5, 'pixel_noise must be a finite')):
      with self.assertRaisesRegex(ValueError, message):
        dataclasses.replace(SMALL, **{field: value})
    with self.assertRaisesRegex(ValueError, 'gallery_size=5000 exceeds'):
      _world(dataclasses.replace(SMALL, gallery_size=5000))
    with self.assertRaisesRegex(ValueError, 'exceeds the .* test combinations'):
      _world(dataclasses.replace(SMALL, num_test_triplets=3000))


class RenderTest(absltest.TestCase):

  def test_shape_range_and_determinism(self):
    attrs = jnp.asarray(generator.all_combos()[[0, 5000, 12287]])
    keys = jax.random.split(jax.random.key(0), 3)
    render = jax.jit(generator.render_batch)
    clips = render(attrs, keys)
    self.assertEqual(clips.shape, (3, 4, 32, 32, 3))
    self.assertGreaterEqual(float(clips.min()), 0.0)
    self.assertLessEqual(float(clips.max()), 1.0)
    np.testing.assert_array_equal(clips, render(attrs, keys))

  def test_every_attribute_is_visible(self):
    base = generator.all_combos()[1234]
    key = jax.random.key(3)
    variants = []
    for a, n in enumerate(generator.NUM_VALUES):
      for v in range(n):
        other = base.copy()
        other[a] = v
        variants.append(other)
    clips = np.asarray(jax.jit(generator.render_batch)(
        jnp.asarray(np.stack(variants)),
        jnp.stack([key] * len(variants))))
    start = 0
    for a, n in enumerate(generator.NUM_VALUES):
      group = clips[start:start + n]
      start += n
      for i in range(n):
        for j in range(i + 1, n):
          diff = np.abs(group[i] - group[j]).mean()
          self.assertGreater(diff, 0.005, (generator.ATTRIBUTES[a], i, j))


class RenditionsTest(absltest.TestCase):
  """Several videos per describable combination (scenes words do not name)."""

  def test_gallery_scenes_and_triplets(self):
    one = _world(dataclasses.replace(SMALL, num_test_triplets=20,
                                     gallery_size=400))
    four = _world(dataclasses.replace(SMALL, num_test_triplets=20,
                                      gallery_size=400, renditions=4))
    self.assertLen(four.gallery_combos, 1600)
    self.assertLen(set(four.gallery_ids), 1600)
    # The same combinations as the one-rendition world, each four times.
    np.testing.assert_array_equal(np.unique(four.gallery_combos),
                                  np.unique(one.gallery_combos))
    np.testing.assert_array_equal(np.bincount(four.gallery_scenes), [400] * 4)
    # A reference and its target share a scene; their combinations are the
    # one-rendition world's.
    t = four.test
    np.testing.assert_array_equal(four.gallery_scenes[t.reference],
                                  four.gallery_scenes[t.target])
    np.testing.assert_array_equal(four.gallery_combos[t.target],
                                  one.gallery_combos[one.test.target])
    self.assertGreater(len(set(four.gallery_scenes[t.target])), 1)

  def test_one_scene_shares_a_layout(self):
    base = generator.all_combos()[1234]
    keys = jax.random.split(jax.random.key(0), 3)
    scenes = generator.scene_keys(0, [0, 0, 1])
    clips = np.asarray(jax.jit(generator.render_batch)(
        jnp.asarray(np.stack([base] * 3)), keys, scene_keys=scenes))
    same = np.abs(clips[0] - clips[1]).mean()   # pixel noise and jitter
    other = np.abs(clips[0] - clips[2]).mean()  # another layout
    self.assertLess(same, 0.5 * other)

  def test_bad_renditions(self):
    with self.assertRaisesRegex(ValueError, 'renditions must be in 1..16'):
      dataclasses.replace(SMALL, renditions=0)
    with self.assertRaisesRegex(ValueError, 'scene_shared must be in'):
      dataclasses.replace(SMALL, renditions=4, scene_shared=1.5)
    with self.assertRaisesRegex(ValueError, 'needs renditions >= 2'):
      dataclasses.replace(SMALL, scene_shared=0.5)

  def test_scene_shared_moves_only_the_targets_scene(self):
    base = dataclasses.replace(SMALL, num_test_triplets=60,
                               gallery_size=600, renditions=4)
    shared = _world(base)
    for p, low, high in ((0.0, 0.0, 0.0), (0.5, 0.3, 0.7)):
      world = _world(dataclasses.replace(base, scene_shared=p))
      t, s = world.test, shared.test
      # The same gallery, references, combinations and edits.
      np.testing.assert_array_equal(world.gallery_combos,
                                    shared.gallery_combos)
      self.assertEqual(world.gallery_captions, shared.gallery_captions)
      np.testing.assert_array_equal(t.reference, s.reference)
      self.assertEqual(t.edit, s.edit)
      np.testing.assert_array_equal(world.gallery_combos[t.target],
                                    shared.gallery_combos[s.target])
      same = np.mean(world.gallery_scenes[t.reference] ==
                     world.gallery_scenes[t.target])
      self.assertBetween(same, low, high)


if __name__ == '__main__':
  absltest.main()
