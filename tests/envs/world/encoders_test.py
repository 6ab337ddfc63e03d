"""Tests for the encoders, their checkpoints and a few training steps."""

import json
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import checks
from recovr_jax.core import vectors
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.models import progress_memory
from recovr_jax.protocol import dialogue
from recovr_jax.envs.world.models import training
from recovr_jax import paths

DATA = pathlib.Path(__file__).resolve().parents[2] / 'data'
_TEXT = None


def _encoded(texts, cache_dir):
  """``(encoder, its embeddings of texts, its cache file in cache_dir)``."""
  enc = text_encoder()
  return enc, enc(texts), enc.cache_path(cache_dir)


def text_encoder():
  """One MiniLM per test process: loading and compiling it is the slow part."""
  global _TEXT
  if _TEXT is None:
    _TEXT = encoders.TextEncoder(batch_size=16, max_length=32)
  return _TEXT


class TextEncoderTest(absltest.TestCase):

  def test_matches_the_pytorch_reference(self):
    ref = json.loads((DATA / 'minilm_reference.json').read_text())
    got = text_encoder()(ref['sentences'])
    want = np.asarray(ref['embeddings'], np.float32)
    self.assertEqual(got.shape, want.shape)
    self.assertLess(float(np.abs(got - want).max()), 1e-5)

  def test_cache_by_text(self):
    enc = text_encoder()
    first = enc(['make it blue', 'make it red', 'make it blue'])
    size = enc.cache_size
    second = enc(['make it red'])
    self.assertEqual(enc.cache_size, size)
    np.testing.assert_array_equal(first[1], second[0])
    np.testing.assert_array_equal(first[0], first[2])
    self.assertEqual(enc([]).shape, (0, 384))

  def test_encoding_many_new_texts_prints_progress(self):
    enc = encoders.TextEncoder(batch_size=16, max_length=32, shared=False)
    texts = [f'a video of {n} red squares' for n in range(44)]
    with mock.patch.object(encoders, 'PROGRESS_TEXTS', 20), \
        mock.patch('builtins.print') as printed:
      enc(texts[:19])  # fewer new texts than the floor: silent
      self.assertEqual(printed.call_count, 0)
      enc(texts)  # 19 cached, 25 new: at least the last line
    lines = [c.args[0] for c in printed.call_args_list]
    self.assertTrue(lines, 'no progress printed')
    self.assertRegex(lines[-1], r'^\[text encoding\] 25/25 .*/s elapsed ')

  def test_embedding_cache_round_trip(self):
    texts = ['a red cube spinning', 'make it blue', 'show two of them']
    with tempfile.TemporaryDirectory() as d:
      enc, want, path = _encoded(texts, d)
      self.assertGreaterEqual(enc.save_cache(path), 3)
      self.assertEqual(enc.save_cache(path), 0)  # nothing new
      other = encoders.TextEncoder(batch_size=16, max_length=32)
      self.assertEqual(other.load_cache(path), enc.cache_size)
      np.testing.assert_array_equal(other(texts), want)  # bit-identical
      fresh = encoders.TextEncoder(batch_size=16, max_length=32,
                                   shared=False)
      np.testing.assert_array_equal(fresh(texts), want)  # as recomputed
      # The encoders of a process share what they computed: the same.
      again = encoders.TextEncoder(batch_size=16, max_length=32)
      np.testing.assert_array_equal(again(texts[::-1]), want[::-1])
      # Another encoder's file, a corrupted one: ignored with a warning.
      wide = encoders.TextEncoder(batch_size=8, max_length=32)
      self.assertNotEqual(wide.cache_path(d), path)
      with self.assertLogs(level='WARNING') as logs:
        self.assertEqual(wide.load_cache(path), 0)
      self.assertIn('another text encoder', logs.output[0])
      data = dict(np.load(path))
      data['vectors'] = data['vectors'] + 1e-3
      np.savez(path, **data)
      with self.assertLogs(level='WARNING') as logs:
        self.assertEqual(fresh.load_cache(path), 0)
      self.assertIn('fails its checksum', logs.output[0])
      self.assertEqual(fresh.load_cache(pathlib.Path(d) / 'none.npz'), 0)

  def test_cache_files_of_either_layout(self):
    texts = ['zwei Würfel, rot', 'make it blue', 'show two of them']
    with tempfile.TemporaryDirectory() as d:
      enc, want, path = _encoded(texts, d)
      enc.save_cache(path)
      with np.load(path) as data:  # the texts as UTF-8 bytes and ends
        self.assertNotIn('texts', data)
        blob = data['text_bytes'].tobytes()
        self.assertIn('zwei Würfel, rot'.encode(), blob)
      fresh = encoders.TextEncoder(batch_size=16, max_length=32,
                                   shared=False)
      self.assertEqual(fresh.load_cache(path), enc.cache_size)
      # Every text cached: the model is not loaded (a warm run's second).
      with mock.patch.object(encoders, '_load',
                             side_effect=AssertionError('model loaded')):
        np.testing.assert_array_equal(fresh(texts), want)
        self.assertEqual(fresh.dim, 384)
      # A text it lacks loads it.
      np.testing.assert_array_equal(fresh(['make it spin']),
                                    enc(['make it spin']))
      # A file of the earlier layout (the texts as a NumPy string array)
      # is read as it was.
      legacy = pathlib.Path(d) / 'legacy.npz'
      held = sorted(set(texts))
      vectors = np.stack([want[texts.index(t)] for t in held])
      np.savez(legacy, texts=np.array(held, dtype=str), vectors=vectors,
               fingerprint=np.array(enc.fingerprint),
               checksum=np.array(enc._checksum(held, vectors)))  # pylint: disable=protected-access
      old = encoders.TextEncoder(batch_size=16, max_length=32, shared=False)
      self.assertEqual(old.load_cache(legacy), 3)
      np.testing.assert_array_equal(old(texts), want)
      np.savez(legacy, texts=np.array(held[::-1], dtype=str),
               vectors=vectors, fingerprint=np.array(enc.fingerprint),
               checksum=np.array(enc._checksum(held, vectors)))  # pylint: disable=protected-access
      with self.assertLogs(level='WARNING') as logs:
        self.assertEqual(old.load_cache(legacy), 0)
      self.assertIn('fails its checksum', logs.output[0])
      # A backend other than the CPU is in the key: a GPU's cache and a
      # CPU's stay apart (the CPU's key, and so its caches, as before).
      self.assertNotIn('backend', enc.fingerprint)
      on_cpu = enc.cache_path(d)
      enc.save_cache(on_cpu)
      with mock.patch.object(encoders.jax, 'default_backend',
                             return_value='gpu'):
        self.assertTrue(enc.fingerprint.endswith(
            '|backend=gpu|matmul=default'))
        self.assertNotEqual(enc.cache_path(d), on_cpu)
        self.assertEqual(encoders.TextEncoder(
            batch_size=16, max_length=32, shared=False).load_cache(
                enc.cache_path(d)), 0)
        # The precision a GPU run computes under is in it too
        # (--matmul_precision); on a CPU, where every precision computes
        # float32, it is not.
        with jax.default_matmul_precision('highest'):
          self.assertTrue(enc.fingerprint.endswith(
              '|backend=gpu|matmul=highest'))
      with jax.default_matmul_precision('highest'):
        self.assertEqual(enc.cache_path(d), on_cpu)

  def test_the_window_is_the_models_own(self):
    # all-MiniLM-L6-v2 was trained on 256 tokens (its
    # sentence_bert_config.json); the encoder reads as many by default.
    self.assertEqual(encoders.model_window(encoders.minilm_path()), 256)
    enc = encoders.TextEncoder(shared=False)
    self.assertEqual(enc.window, 256)
    self.assertIn('|length=256|', enc.fingerprint)

  def test_a_long_dialogue_keeps_its_modification_and_newest_words(self):
    enc = text_encoder()  # a 32-token window
    sep = dialogue.SEPARATOR
    modification = 'make the objects blue'
    old = ['no, they should be spinning slowly to the left instead of that',
           'not quite, I want them to be very small and near the top edge']
    newest = 'now show them at sunset'
    text = sep.join([modification, *old, newest])
    got = enc([text])[0]
    # 42 tokens: the oldest utterance goes (15 tokens), the rest fits.
    want = enc([sep.join([modification, old[1], newest])])[0]
    np.testing.assert_array_equal(got, want)
    self.assertEqual(enc.cuts([text, modification]), [(1, 0), (0, 0)])
    # A text that is no dialogue is cut from its end, and counted.
    plain = ' '.join(['a red cube spinning'] * 12)
    (dropped, over), = enc.cuts([plain])
    self.assertEqual(dropped, 0)
    self.assertGreater(over, 0)
    # The cuts travel with the cache file; a changed window misses it.
    with tempfile.TemporaryDirectory() as d:
      path = enc.cache_path(d)
      enc.save_cache(path)
      fresh = encoders.TextEncoder(batch_size=16, max_length=32,
                                   shared=False)
      self.assertGreater(fresh.load_cache(path), 0)
      encoders._CUTS.clear()  # pylint: disable=protected-access
      fresh._cuts = encoders._CUTS.setdefault(fresh._key, {})  # pylint: disable=protected-access
      fresh.load_cache(path)
      with mock.patch.object(encoders, '_load',
                             side_effect=AssertionError('model loaded')):
        self.assertEqual(fresh.cuts([text]), [(1, 0)])
      wider = encoders.TextEncoder(batch_size=16, max_length=40,
                                   shared=False)
      self.assertNotEqual(wider.cache_path(d), path)
      with self.assertLogs(level='WARNING') as logs:
        self.assertEqual(wider.load_cache(path), 0)
      self.assertIn('another text encoder', logs.output[0])

  def test_a_cache_that_cannot_be_written_warns_and_the_run_goes_on(self):
    import types  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world import world_source  # pylint: disable=g-import-not-at-top
    enc = text_encoder()
    enc(['make it teal'])
    with tempfile.TemporaryDirectory() as d:
      blocked = enc.cache_path(d)
      blocked.mkdir(parents=True)   # a folder where the file goes
      built = types.SimpleNamespace(extra=types.SimpleNamespace(
          text=enc, text_cache=blocked))
      with self.assertLogs(level='WARNING') as logs:
        world_source.WorldSource.save_caches(None, built)
      self.assertIn('not written', logs.output[0])
      self.assertIn(str(blocked), logs.output[0])
      self.assertTrue(blocked.is_dir())
      # No temporary file left (the writer's own name starts with a dot).
      self.assertEqual([p.name for p in pathlib.Path(d).iterdir()
                        if 'tmp' in p.name], [])

  def test_encoders_made_before_a_load_share_it(self):
    # Neither has loaded when both are made: the first text loads the
    # model once, for both (a key no other test uses: max_length 24).
    first = encoders.TextEncoder(batch_size=16, max_length=24)
    second = encoders.TextEncoder(batch_size=16, max_length=24)
    parts = text_encoder()._model_parts()  # pylint: disable=protected-access
    with mock.patch.object(encoders, '_load', return_value=parts) as load:
      first(['make it red'])
      second(['make it blue'])
    self.assertEqual(load.call_count, 1)

  def test_caches_are_keyed_by_the_model_files_contents(self):
    texts = ['make it green', 'two cubes instead']
    enc = text_encoder()
    want = enc(texts)
    with tempfile.TemporaryDirectory() as d:
      path = enc.cache_path(d)
      enc.save_cache(path)
      # A copy elsewhere without its weights has the same key, and serves
      # every cached text without loading anything.
      copy = encoders.weightless_copy(enc.model_dir, pathlib.Path(d) / 'c')
      self.assertFalse(any((copy / w).exists() for w in encoders.WEIGHTS))
      there = encoders.TextEncoder(str(copy), batch_size=16, max_length=32,
                                   shared=False)
      self.assertEqual(there.fingerprint, enc.fingerprint)
      self.assertEqual(there.cache_path(d), path)
      self.assertGreater(there.load_cache(path), 0)
      np.testing.assert_array_equal(there(texts), want)
      # Cut to the texts a run reads (experiments.bundle), it keeps those.
      self.assertEqual(there.keep(texts[:1] + ['never encoded']), 1)
      there.save_cache(pathlib.Path(d) / 'cut' / path.name)
      cut = encoders.TextEncoder(str(copy), batch_size=16, max_length=32,
                                 shared=False)
      self.assertEqual(cut.load_cache(pathlib.Path(d) / 'cut' / path.name),
                       1)
      np.testing.assert_array_equal(cut(texts[:1]), want[:1])
      # A text it lacks: it says it has no weights, naming the flag.
      with self.assertRaisesRegex(FileNotFoundError, 'a copy without '
                                  'weights.*--text_encoder_dir'):
        there(['a text no cache holds'])
      # A digest file that is not the one we write: named, in a line.
      broken = encoders.weightless_copy(enc.model_dir,
                                        pathlib.Path(d) / 'broken')
      (broken / encoders.DIGESTS_FILE).write_text('{}')
      with self.assertRaisesRegex(ValueError, 'recovr_digests.json: '
                                  'expected {"files"'):
        encoders.content_digest(str(broken))
      # Changed weights (or any file) at the same place: another key.
      weights = next(copy.parent.glob('c'))
      (weights / 'model.safetensors').write_bytes(b'other weights')
      changed = encoders.TextEncoder(str(copy), batch_size=16, max_length=32,
                                     shared=False)
      self.assertNotEqual(changed.fingerprint, enc.fingerprint)
      # And the window is part of it.
      self.assertNotEqual(
          encoders.TextEncoder(str(copy), batch_size=16, max_length=64,
                               shared=False).fingerprint,
          changed.fingerprint)

  def test_missing_model_dir(self):
    with self.assertRaisesRegex(FileNotFoundError, 'has no config.json'):
      encoders.TextEncoder(model_dir=tempfile.mkdtemp())


class ModelsTest(absltest.TestCase):

  def test_video_encoder_and_composers(self):
    clips = jax.random.uniform(jax.random.key(0), (2, 4, 32, 32, 3))
    model = encoders.VideoEncoder()
    params = model.init(jax.random.key(1), clips)
    out = model.apply(params, clips)
    self.assertEqual(out.shape, (2, 384))
    np.testing.assert_allclose(jnp.linalg.norm(out, axis=-1), 1, rtol=1e-5)
    # Reversing time changes the embedding: the encoder sees motion.
    reversed_out = model.apply(params, clips[:, ::-1])
    self.assertGreater(float(jnp.abs(out - reversed_out).max()), 1e-4)
    ref, edit = out, out[::-1]
    comp = encoders.Composer()
    cparams = comp.init(jax.random.key(2), ref, edit)
    self.assertEqual(comp.apply(cparams, ref, edit).shape, (2, 384))
    summed = vectors.sum_composer(ref, edit)
    np.testing.assert_allclose(summed, (ref + edit) / jnp.linalg.norm(
        ref + edit, axis=-1, keepdims=True), rtol=1e-5)

  def test_checkpoint_round_trip_and_mismatch(self):
    model = encoders.Composer(hidden=8)
    params = model.init(jax.random.key(0), jnp.zeros((1, 4)), jnp.zeros((1, 4)))
    with tempfile.TemporaryDirectory() as tmp:
      encoders.save_params(pathlib.Path(tmp) / 'c', params, {'note': 'x'})
      restored = encoders.restore_params(pathlib.Path(tmp) / 'c', params)
      jax.tree.map(np.testing.assert_array_equal, params, restored)
      self.assertEqual(encoders.load_metadata(pathlib.Path(tmp) / 'c'),
                       {'note': 'x'})
      other = encoders.Composer(hidden=16).init(
          jax.random.key(0), jnp.zeros((1, 4)), jnp.zeros((1, 4)))
      with self.assertRaisesRegex(ValueError, 'does not match the model'):
        encoders.restore_params(pathlib.Path(tmp) / 'c', other)
      with self.assertRaisesRegex(FileNotFoundError, 'no checkpoint'):
        encoders.restore_params(pathlib.Path(tmp) / 'missing', params)

  def test_corrupt_checkpoint_is_an_error(self):
    model = encoders.Composer(hidden=8)
    params = model.init(jax.random.key(0), jnp.zeros((1, 4)), jnp.zeros((1, 4)))
    with tempfile.TemporaryDirectory() as tmp:
      encoders.save_params(pathlib.Path(tmp) / 'c', params, {})
      for f in (pathlib.Path(tmp) / 'c' / 'params').rglob('*'):
        if f.is_file() and f.stat().st_size > 1000:
          f.write_bytes(b'garbage' * 10)
      with self.assertRaises(ValueError):
        encoders.restore_params(pathlib.Path(tmp) / 'c', params)

  def test_shipped_checkpoints_restore(self):
    root = paths.CHECKPOINTS
    world = generator.make_world(generator.WorldConfig(
        num_test_triplets=5, num_train_triplets=5))
    video, composer = training.load_world_models(root / 'world', world)
    self.assertEqual(encoders.count_params(video),
                     encoders.load_metadata(root / 'world' / 'video_encoder')[
                         'parameters'])
    self.assertGreater(encoders.count_params(composer), 0)


class TrainingTest(absltest.TestCase):

  def test_a_few_steps_and_evaluation(self):
    config = generator.WorldConfig(num_test_triplets=8, num_train_triplets=40,
                                   gallery_size=200)
    world = generator.make_world(config)
    train = training.TrainConfig(video_steps=2, video_batch=4,
                                 composer_steps=2, composer_batch=8)
    combos, captions = training.caption_pool(world, 1, 0)
    combos, captions = combos[:32], captions[:32]
    text = text_encoder()
    seen = []
    video = training.train_video_encoder(
        world, combos, text(captions), train,
        progress=lambda *a: seen.append(a))
    self.assertEqual(seen[-1][1:3], (2, 2))
    again = training.train_video_encoder(world, combos, text(captions), train)
    jax.tree.map(np.testing.assert_array_equal, video, again)  # same seed
    keys = world.video_keys(world.train_combos[:40])
    emb = training.embed_videos(world, video['params'],
                                world.combos[world.train_combos[:40]], keys,
                                batch=16)
    self.assertEqual(emb.shape, (40, 384))
    composer = training.train_composer(emb[:20], emb[20:], emb[:20][::-1],
                                       train)
    with tempfile.TemporaryDirectory() as cache:
      result = training.evaluate_world(world, text, video['params'],
                                       composer['params'], cache_dir=cache)
      self.assertFalse(result['gallery_from_cache'])
      again = training.evaluate_world(world, text, video['params'],
                                      composer['params'], cache_dir=cache)
      self.assertTrue(again['gallery_from_cache'])
      self.assertEqual(result['covr_composer'], again['covr_composer'])
    for name in ('covr_composer', 'covr_sum'):
      self.assertEqual(set(result[name]), {'R@1', 'R@5', 'R@10', 'R@50'})
    self.assertEqual(result['gallery_size'], 200)

  def test_a_diverged_training_stops_before_the_save(self):
    # A NaN loss trained on to the end and saved a NaN model (exit 0).
    train = training.TrainConfig(composer_steps=3, composer_batch=4)
    emb = np.ones((8, 16), np.float32)
    bad = emb.copy()
    bad[0, 0] = np.nan
    with self.assertRaisesRegex(FloatingPointError, 'composer: the training '
                                'loss is nan at step 3; training diverged'):
      training.train_composer(bad, emb, emb, train)
    self.assertEqual(checks.training_loss('x', 1, np.float32(0.5)), 0.5)
    with self.assertRaisesRegex(FloatingPointError, 'x: .* inf at step 7'):
      checks.training_loss('x', 7, np.inf)


class ProgressMemoryTest(absltest.TestCase):

  def test_key_changes_with_params_and_cache_is_reused(self):
    a = {'w': np.ones(3)}
    b = {'w': np.array([1.0, 1.0, 2.0])}
    self.assertNotEqual(progress_memory.params_fingerprint(a),
                        progress_memory.params_fingerprint(b))
    calls = []

    def compute():
      calls.append(1)
      return np.ones((2, 3)), ('x', 'y')

    with tempfile.TemporaryDirectory() as tmp:
      key = progress_memory.cache_key(p=progress_memory.params_fingerprint(a))
      first = progress_memory.load_or_compute(tmp, key, compute)
      second = progress_memory.load_or_compute(tmp, key, compute)
      self.assertLen(calls, 1)
      self.assertTrue(second.from_cache)
      self.assertEqual(second.captions, ('x', 'y'))
      np.testing.assert_array_equal(first.video, second.video)
      other = progress_memory.cache_key(p=progress_memory.params_fingerprint(b))
      progress_memory.load_or_compute(tmp, other, compute)
      self.assertLen(calls, 2)


if __name__ == '__main__':
  absltest.main()
