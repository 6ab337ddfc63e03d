"""Runs that never lie (issue #12): resume keyed on the run's identity,
corrupt batches caught, bad values refused, one run per directory."""

import csv
import dataclasses
import fcntl
import json
import pathlib
import shutil
import tempfile
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest
import jax
import numpy as np

from experiments.evaluate import reliability
from recovr_jax.envs.files import clip_encoder
from recovr_jax.envs.files import data
from recovr_jax.envs.files import files_environment
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.models import progress_memory
from recovr_jax.envs.world.models import training
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import rules
from recovr_jax.run import outputs
from recovr_jax.run import results
from recovr_jax.run import runner
from tests.helpers import runs

SMALL = dict(methods=['recovr'], num_sessions=6, batch_size=5)


def _run(out, **overrides):
  return runs.run_tiny(out, **dict(SMALL, **overrides))


class _OnABaseRun(absltest.TestCase):
  """Tests that start from copies of one finished run."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    flags.FLAGS.mark_as_parsed()
    cls.root = pathlib.Path(tempfile.mkdtemp())
    cls.base = cls.root / 'base'
    _run(cls.base)

  def _copy(self, name):
    copy = self.root / name
    shutil.copytree(self.base, copy)
    return copy


class ResumeIdentityTest(_OnABaseRun):

  def test_other_user_seed_is_refused_and_leaves_the_directory_as_it_was(self):
    copy = self._copy('seed')
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    with self.assertRaisesRegex(app.UsageError,
                                r'other settings \(user_seed: 0 -> 7'):
      _run(copy, user_seed=7)
    after = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    self.assertEqual(after, before)  # flags.txt included

  def test_other_batch_size_is_refused_up_front(self):
    with self.assertRaisesRegex(app.UsageError, 'batch_size: 5 -> 3'):
      _run(self._copy('batch'), batch_size=3)

  def test_growing_num_sessions_resumes_like_a_fresh_run(self):
    copy = self._copy('grow')
    _run(copy, num_sessions=10)  # batch 1 held session 5 only: rerun
    fresh = self.root / 'fresh10'
    _run(fresh, num_sessions=10)
    for name in ('metrics.json', 'trajectories.jsonl'):
      self.assertEqual((copy / name).read_bytes(), (fresh / name).read_bytes(),
                       name)

  def test_noresume_clears_old_batches_so_a_later_resume_does_not_mix(self):
    copy = self._copy('noresume')
    _run(copy, num_sessions=10, rrf_k=1.0, recency='uniform', resume=False)
    _run(copy, num_sessions=5, resume=False)   # only batch 0 of the default
    _run(copy, num_sessions=10)                # batch 1 must be recomputed
    fresh = self.root / 'fresh10b'
    _run(fresh, num_sessions=10)
    self.assertEqual((copy / 'metrics.json').read_bytes(),
                     (fresh / 'metrics.json').read_bytes())

  def test_an_interrupted_noresume_run_leaves_no_stale_outputs(self):
    copy = self._copy('killed')
    self.assertFalse((self.base / outputs.INCOMPLETE).exists())
    files = lambda: {p.name: p.read_bytes() for p in copy.rglob('*')
                     if p.is_file()}
    before = files()
    # Killed before its checks are done (while loading): nothing was
    # written or cleared yet, so the finished run is as it was.
    with mock.patch.object(runner, 'build',
                           side_effect=KeyboardInterrupt('killed')):
      with self.assertRaises(KeyboardInterrupt):
        _run(copy, rrf_k=1.0, resume=False)
    self.assertEqual(files(), before)
    # Killed once its sessions run: the earlier run's outputs are gone and
    # the folder says it has not finished.
    with mock.patch.object(runner, '_collect',
                           side_effect=KeyboardInterrupt('killed')):
      with self.assertRaises(KeyboardInterrupt):
        _run(copy, rrf_k=1.0, resume=False)
    resolved = json.loads((copy / 'resolved_config.json').read_text())
    self.assertEqual(resolved['loop']['rrf_k'], 1.0)
    for name in ('metrics.json', 'report.md', 'trajectories.jsonl'):
      self.assertFalse((copy / name).exists(), name)  # not the old run's
    self.assertTrue((copy / outputs.INCOMPLETE).exists())
    with self.assertRaisesRegex(FileNotFoundError, 'has not finished'):
      results.load_run(copy)
    _run(copy, rrf_k=1.0)  # resumed to the end: complete again
    self.assertFalse((copy / outputs.INCOMPLETE).exists())
    self.assertEqual(results.load_run(copy)['config']['loop']['rrf_k'], 1.0)

  def test_num_sessions_beyond_the_queries_is_refused_naming_the_flags(self):
    out = self.root / 'beyond'
    with self.assertRaisesRegex(
        app.UsageError, r'--num_sessions=100000: the world gives at most 12 '
        r'sessions \(12 test queries \(--num_test_triplets\) x '
        r'--query_repeats=1\); pass --query_repeats=8334'):
      _run(out, num_sessions=100_000)
    self.assertFalse((out / 'resolved_config.json').exists())  # before work

  def test_sizes_a_run_cannot_hold_are_refused_before_anything_is_made(self):
    # Before, --query_repeats=10^9 tiled every query 10^9 times (TiBs)
    # before any check, and the advice to --num_sessions=10^9 failed
    # allocating; now both are refused by size, with advice that runs.
    out = self.root / 'huge'
    with self.assertRaisesRegex(
        app.UsageError, r'--query_repeats=1000000000: 12 queries x '
        r'1000000000 repeats is 12,000,000,000 sessions, more than the '
        r'10,000,000 a run holds; pass at most --query_repeats=833333 '
        r'\(--num_sessions=6 needs 1\)'):
      _run(out, num_sessions=6, query_repeats=10**9)
    with self.assertRaisesRegex(app.UsageError, r'--num_sessions=1000000000: '
                                'at most 10,000,000 sessions a run'):
      _run(out, num_sessions=10**9, query_repeats=10**8)
    self.assertFalse(out.exists())

  def test_only_the_repeats_the_sessions_need_are_made(self):
    from recovr_jax.envs.world import world_source  # pylint: disable=g-import-not-at-top
    env = dataclasses.make_dataclass(
        'Env', ['reference', 'target', 'modification', 'query'])(
            np.arange(12) + 100, np.arange(12) + 200,
            tuple(f'm{i}' for i in range(12)), None)
    named = np.eye(12, 7, dtype=bool)
    whole, whole_named = world_source.repeated(env, named, 1000)
    some, some_named = world_source.repeated(env, named, 1000,
                                             num_sessions=30)
    self.assertLen(whole.target, 12_000)
    self.assertLen(some.target, 36)  # 3 repeats, not 1,000
    np.testing.assert_array_equal(some.target, whole.target[:36])
    np.testing.assert_array_equal(some.query, whole.query[:36])
    np.testing.assert_array_equal(some_named, whole_named[:36])
    self.assertEqual(some.modification, whole.modification[:36])
    self.assertLen(world_source.repeated(env, named, 2, 1000)[0].target, 24)
    self.assertLen(world_source.repeated(env, named, 5, 7)[0].target, 12)

  def test_repeated_queries_extend_the_run_under_new_draws(self):
    out = self.root / 'repeated'
    _run(out, num_sessions=18, query_repeats=3)
    rows = lambda d: list(csv.DictReader((d / 'ranks.csv').open()))
    repeated, base = rows(out), rows(self.base)
    # The first sessions are the run without repeats, byte for byte; each
    # later session is query session % 12, its own session otherwise.
    self.assertEqual([r for r in repeated if int(r['session']) < 6], base)
    self.assertEqual({(r['session'], r['query_id']) for r in repeated
                      if r['turn'] == '0'},
                     {(str(s), f'q{s % 12}') for s in range(18)})
    resolved = lambda d: json.loads((d / 'resolved_config.json').read_text())
    self.assertEqual(resolved(out)['identity'], resolved(self.base)['identity'])
    self.assertEqual(resolved(out)['data']['query_repeats'], 3)

  def test_a_changed_checkpoint_file_is_another_run(self):
    resolved = json.loads((self.base / 'resolved_config.json').read_text())
    files = resolved['files']
    self.assertEqual(set(files), {'checkpoint_dir', 'text_encoder'})
    for entry in files.values():
      self.assertLen(entry['sha256'], 64)
    for key in ('user_seed', 'batch_size', 'num_sessions', 'data'):
      self.assertIn(key, resolved)
    self.assertEqual(resolved['data']['source'], 'world')
    self.assertIn('checkpoint_dir', resolved['data'])

  def test_environment_block_and_portable_paths(self):
    resolved = json.loads((self.base / 'resolved_config.json').read_text())
    env = resolved['environment']
    self.assertEqual(env['packages']['jax'], jax.__version__)
    self.assertEqual(env['jax_backend'], 'cpu')
    self.assertNotEmpty(env['devices'])
    self.assertRegex(env['date'], r'^\d{4}-\d\d-\d\dT')
    self.assertIn('python', env)
    if env['git_commit'] is not None:  # a git checkout
      self.assertRegex(env['git_commit'], r'^[0-9a-f]{40}$')
      self.assertIsInstance(env['git_dirty'], bool)
    # The shipped checkpoints lie in the repository: recorded relative.
    path = resolved['files']['checkpoint_dir']['path']
    self.assertFalse(pathlib.Path(path).is_absolute(), path)
    self.assertTrue(path.startswith('recovr_jax/checkpoints'), path)
    # No path of the repository anywhere, the default benchmark's data
    # config included (the identity holds it: the same inputs in another
    # checkout are the same run).
    from recovr_jax.run import run_config  # pylint: disable=g-import-not-at-top
    from recovr_jax.run import integrity  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world import world_source  # pylint: disable=g-import-not-at-top
    self.assertTrue(pathlib.Path(
        world_source.WorldData.v2().checkpoint_dir).is_absolute())
    root = str(pathlib.Path(__file__).resolve().parents[2])
    made = run_config.RunConfig(methods=('recovr',), output_dir=str(self.base),
                                data=world_source.WorldData.v2())
    default = integrity.resolved_config(made, run_config.source(made))
    self.assertEqual(default['data']['checkpoint_dir'],
                     'recovr_jax/checkpoints/world_renditions')
    for r in (resolved, default):
      self.assertNotIn(root, json.dumps(
          {k: v for k, v in r.items() if k != 'environment'}))
    # Not part of the identity: a run on another day resumes.
    self.assertEqual(integrity.portable(self.base / 'x.json', self.base),
                     '<output_dir>/x.json')
    self.assertEqual(integrity.portable('/nonexistent/abs'), '/nonexistent/abs')

  def test_a_second_run_into_a_held_directory_is_refused(self):
    copy = self._copy('locked')
    with open(copy / '.lock', 'w') as held:
      fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
      with self.assertRaisesRegex(app.UsageError, 'another run is writing'):
        _run(copy)
    _run(copy)  # released: resumes


class Counting(rules.RulesReasoner):
  """The rules backend with flax_lm-style validity counts (every output
  valid on the first pass)."""

  def __init__(self, lexicon):
    super().__init__(lexicon)
    self.calls = {}

  def call(self, module, requests):
    self.calls[module] = self.calls.get(module, 0) + len(requests)
    return super().call(module, requests)

  def validity(self):
    return {m: {'calls': n, 'first_pass_valid': 1.0, 'retry_valid': 0,
                'fallback': 0} for m, n in self.calls.items()}


class ValidityCountsTest(absltest.TestCase):

  def test_counts_are_per_method_and_survive_a_resume(self):
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    original = registry.make
    registry.make = lambda *a, **k: Counting(lexicon)
    try:
      fresh = root / 'fresh'
      _run(fresh, methods=['recovr', 'ivr'], num_sessions=10)
      resumed = root / 'resumed'
      shutil.copytree(fresh, resumed)
      for p in (resumed / 'batches' / 'recovr').iterdir():
        if not p.name.startswith('00000'):
          shutil.rmtree(p) if p.is_dir() else p.unlink()
      _run(resumed, methods=['recovr', 'ivr'], num_sessions=10)
    finally:
      registry.make = original
    section = lambda d: (d / 'report.md').read_text().split(
        '### Reasoning validity')[1]
    self.assertEqual(section(resumed), section(fresh))
    self.assertIn('| ReCoVR (`recovr`) | intent |', section(fresh))
    self.assertNotIn('(`ivr`)', section(fresh))  # it makes no reasoning call
    calls = int(section(fresh).split('| ReCoVR (`recovr`) | intent | ')[1]
                .split(' ')[0])
    rows = [json.loads(line) for line in
            (fresh / 'trajectories.jsonl').read_text().splitlines()]
    feedback_turns = sum(1 for r in rows if r['method'] == 'recovr'
                         for t in r['turns'][1:]
                         if t['action'] not in (None, 'stopped'))
    self.assertEqual(calls, feedback_turns)


class CorruptBatchTest(_OnABaseRun):

  def test_ids_outside_the_gallery_are_caught(self):
    copy = self._copy('ids')
    path = copy / 'batches' / 'recovr' / '00000.npz'
    with np.load(path) as archive:
      displayed = archive['displayed'].copy()
      top_scores, scores = archive['top_scores'], archive['scores']
    displayed[0, 1, 0] = 553473
    np.savez(path, displayed=displayed, top_scores=top_scores, scores=scores)
    with self.assertRaisesRegex(app.UsageError,
                                r'00000.npz does not match its checksum'):
      _run(copy)

  def test_flipped_bytes_in_the_lists_are_caught(self):
    copy = self._copy('bytes')
    path = copy / 'batches' / 'recovr' / '00000.npz'
    raw = bytearray(path.read_bytes())
    for i in range(len(raw) - 200, len(raw) - 100):  # in the arrays' data
      raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    with self.assertRaisesRegex(app.UsageError, r'batch checkpoint .*00000'):
      _run(copy)

  def test_truncated_batch_json_names_the_file(self):
    copy = self._copy('json')
    path = copy / 'batches' / 'recovr' / '00000.json'
    path.write_text(path.read_text()[:50])
    with self.assertRaisesRegex(app.UsageError,
                                r'00000.json is unreadable or incomplete'):
      _run(copy)


  def test_a_batch_computed_by_other_code_is_refused(self):
    # A batch records the package's source digest; after the code changed
    # a resume would mix old and new lists silently.
    copy = self._copy('code')
    path = copy / 'batches' / 'recovr' / '00000.json'
    meta = json.loads(path.read_text())
    self.assertLen(meta['code'], 64)
    meta['code'] = '0' * 64
    path.write_text(json.dumps(meta))
    markers = {n: (copy / n).read_bytes()
               for n in ('flags.txt', 'resolved_config.json')}
    self.assertFalse((copy / 'INCOMPLETE').exists())
    with self.assertRaisesRegex(app.UsageError, r'00000.json was computed by '
                                r'other code .*--noresume'):
      _run(copy)
    # The finished run stays a finished run: no INCOMPLETE marker left by
    # the refused resume, its flags and settings as they were.
    self.assertFalse((copy / 'INCOMPLETE').exists())
    self.assertEqual({n: (copy / n).read_bytes() for n in markers}, markers)
    _run(copy, resume=False)  # recomputed by this code

  def test_an_edited_trajectory_record_is_caught(self):
    copy = self._copy('records')
    path = copy / 'batches' / 'recovr' / '00000.json'
    meta = json.loads(path.read_text())
    text = json.dumps(meta['records'])
    self.assertIn('"sigma": "', text)
    for old, new in (('"sigma": "neg"', '"sigma": "pos"'),
                     ('"sigma": "neu"', '"sigma": "pos"')):
      text = text.replace(old, new)
    meta['records'] = json.loads(text)
    path.write_text(json.dumps(meta))
    with self.assertRaisesRegex(app.UsageError, r'00000.json: its sessions, '
                                'records or counts do not match'):
      _run(copy)

class ArtefactTest(absltest.TestCase):
  """Checkpoints and caches are checked when read."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    flags.FLAGS.mark_as_parsed()
    cls.root = pathlib.Path(tempfile.mkdtemp())

  def _checkpoint_copy(self, name):
    copy = self.root / name
    shutil.copytree(encoders.DEFAULT_CHECKPOINT_DIR, copy)
    return copy

  def test_flipped_bytes_in_the_composer_are_caught_naming_the_file(self):
    copy = self._checkpoint_copy('flipped')
    biggest = reliability.flip_bytes(copy / 'composer', 1000, 400)
    with self.assertRaisesRegex(ValueError, f'{biggest} does not match its '
                                'checksum'):
      training.load_world_models(copy, generator.make_world(
          generator.WorldConfig(num_test_triplets=4, num_train_triplets=4,
                                gallery_size=50)))

  def test_a_checkpoint_without_manifest_is_refused_then_recorded(self):
    # The flipped bytes go unnoticed once the manifest is gone: refused
    # unless --allow_unverified_checkpoints, and then the outputs say so.
    copy = self._checkpoint_copy('no_manifest')
    reliability.flip_bytes(copy / 'composer', 1000, 400)
    (copy / 'composer' / 'checksums.json').unlink()
    out = self.root / 'unverified_run'
    with self.assertRaisesRegex(ValueError, r'composer has no checksums\.json'
                                r'.*--allow_unverified_checkpoints'):
      runs.run_tiny(out, checkpoint_dir=str(copy), methods=['recovr'],
                        num_sessions=2)
    self.assertFalse((out / 'metrics.json').exists())
    runs.run_tiny(out, checkpoint_dir=str(copy), methods=['recovr'],
                      num_sessions=2, allow_unverified_checkpoints=True)
    resolved = json.loads((out / 'resolved_config.json').read_text())
    self.assertLen(resolved['unverified_checkpoints'], 1)
    self.assertIn('composer', resolved['unverified_checkpoints'][0])
    self.assertIn('**Unverified checkpoints**',
                  (out / 'report.md').read_text())

  def test_truncated_weights_are_caught_naming_the_file(self):
    copy = self._checkpoint_copy('truncated')
    biggest = max((p for p in (copy / 'video_encoder').rglob('*')
                   if p.is_file()), key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[:100])
    with self.assertRaisesRegex(ValueError, f'{biggest} does not match its '
                                'checksum'):
      training.load_world_models(copy, generator.make_world(
          generator.WorldConfig(num_test_triplets=4, num_train_triplets=4,
                                gallery_size=50)))

  def test_a_nan_parameter_is_caught_naming_the_leaf(self):
    world = generator.make_world(generator.WorldConfig(
        num_test_triplets=4, num_train_triplets=4, gallery_size=50))
    video, composer = training.load_world_models(
        encoders.DEFAULT_CHECKPOINT_DIR, world)
    composer = jax.tree.map(np.array, composer)
    leaf = jax.tree.leaves(composer)[0]
    leaf.flat[0] = np.nan
    copy = self._checkpoint_copy('nan')
    metadata = encoders.load_metadata(copy / 'composer')
    encoders.save_params(copy / 'composer', composer, metadata)  # checksummed
    with self.assertRaisesRegex(ValueError, 'holds 1 NaN or infinite'):
      training.load_world_models(copy, world)

  def test_a_corrupt_cache_is_recomputed_with_a_warning(self):
    cache = self.root / 'cache'
    calls = []

    def compute():
      calls.append(1)
      return np.ones((3, 4), np.float32), ('a', 'b', 'c')

    progress_memory.load_or_compute(cache, 'k', compute)
    path = cache / 'gallery-k.npz'
    with np.load(path) as data:
      arrays = {k: data[k] for k in data.files}
    arrays['video'][1] = np.nan  # the checksum no longer matches
    np.savez(path, **arrays)
    got = progress_memory.load_or_compute(cache, 'k', compute)
    self.assertFalse(got.from_cache)
    path.write_bytes(path.read_bytes()[:100])  # truncated
    got = progress_memory.load_or_compute(cache, 'k', compute)
    self.assertFalse(got.from_cache)
    self.assertLen(calls, 3)
    self.assertTrue(progress_memory.load_or_compute(cache, 'k',
                                                    compute).from_cache)

  def test_non_finite_embeddings_are_an_error(self):
    with self.assertRaisesRegex(ValueError, '1 gallery rows of video'):
      progress_memory.load_or_compute(
          None, 'x', lambda: (np.array([[np.nan, 0.0], [1.0, 0.0]]),
                              ('a', 'b')))

  def test_encoders_of_another_world_seed_are_refused(self):
    out = self.root / 'seed1'
    with self.assertRaisesRegex(app.UsageError, r'seed 0, test_share 0.2; '
                                r'\d+\.\d% of this world'):
      _run(out, world_seed=1)
    self.assertFalse((out / 'flags.txt').exists())


class MessagesTest(absltest.TestCase):
  """Every loader error names the file and what was expected."""

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(tempfile.mkdtemp())

  def _csv(self, text, encoding='utf-8'):
    path = self.dir / 'ann.csv'
    path.write_bytes(text.encode(encoding))
    return path

  def test_csv_encodings(self):
    header = 'pth1,pth2,edit,txt1,txt2\n'
    latin = self._csv(header + 'a,b,make it caf\u00e9,x,y\n', 'latin-1')
    with self.assertRaisesRegex(ValueError, f'{latin}, line 2: not UTF-8 '
                                'text'):
      data.load_covr_csv(latin)
    bom = self._csv('\ufeff' + header + 'a,b,edit,x,y\n')
    self.assertEqual(data.load_covr_csv(bom).reference, ('a',))

  def test_reference_equal_to_target_is_an_error(self):
    path = self._csv('pth1,pth2,edit,txt1,txt2\na,b,e,x,y\nc,c,e,x,y\n')
    with self.assertRaisesRegex(ValueError, r'row 3: the reference \(pth1\) '
                                'and the target'):
      data.load_covr_csv(path)

  def test_embeddings_that_are_not_archives(self):
    for name in ('g.npz', 'g.safetensors'):
      path = self.dir / name
      path.write_bytes(b'not an archive at all' * 10)
      with self.assertRaisesRegex(ValueError, f'{path}: not a readable'):
        data.load_embeddings(path)

  def test_gallery_without_captions_is_an_error_for_the_caption_user(self):
    gallery = self.dir / 'g.npz'
    data.save_embeddings(gallery, ['a', 'b'], np.eye(2, 4, dtype=np.float32))
    ann = self._csv('pth1,pth2,edit,txt1,txt2\na,b,e,x,y\n')
    clip_dir = self.dir / 'clip'
    clip_dir.mkdir()
    with self.assertRaisesRegex(ValueError, 'has no captions'):
      files_environment.real_environment(str(ann), str(gallery), str(clip_dir))

  def test_clip_directory_without_tokenizer_files(self):
    clip_dir = self.dir / 'clip'
    clip_dir.mkdir()
    (clip_dir / 'config.json').write_text('{}')
    (clip_dir / 'flax_model.msgpack').write_bytes(b'')
    with self.assertRaisesRegex(FileNotFoundError, 'is missing tokenizer '
                                'files'):
      clip_encoder.check_clip_dir(str(clip_dir))

  def test_output_and_cache_directories_are_checked_before_work(self):
    flags.FLAGS.mark_as_parsed()
    with self.assertRaisesRegex(app.UsageError, '--output_dir is empty'):
      runs.run_of(**dict(runs.TINY, output_dir='', methods=['recovr']))
    a_file = self.dir / 'cache_file'
    a_file.write_text('x')
    with self.assertRaisesRegex(app.UsageError, f'--cache_dir {a_file} '
                                'cannot be used as a directory'):
      runs.run_of(
          **dict(runs.TINY, methods=['recovr'], output_dir=str(self.dir / 'o'),
          cache_dir=str(a_file)))


class ValuesTest(absltest.TestCase):

  def test_non_finite_and_out_of_range_values_are_refused_before_work(self):
    flags.FLAGS.mark_as_parsed()
    out = pathlib.Path(tempfile.mkdtemp()) / 'never'
    for overrides, message in (
        (dict(rrf_k=float('nan')), 'rrf_k must be a finite number'),
        (dict(rrf_k=float('inf')), 'rrf_k must be a finite number'),
        (dict(recency='exp', gamma=-1.0), r'gamma .* must be in \(0, 1\]'),
        (dict(methods=['merlin'], merlin_alpha=5.0), 'merlin_alpha must be'),
        (dict(ask_tau=float('nan')), 'ask tau must be a finite number'),
        (dict(max_error_share=2.0), '--max_error_share must be in'),
        (dict(sweep=['rrf_k=60|nan']), r'--sweep rrf_k=nan: rrf_k must be')):
      with self.subTest(overrides):
        with self.assertRaisesRegex(app.UsageError, message):
          _run(out, **overrides)
    self.assertFalse(out.exists())


if __name__ == '__main__':
  absltest.main()
