"""CoVR feature files without torch, the real-data options, TREC export."""

import json
import pathlib
import pickle
import subprocess
import sys
import tempfile
import zipfile

from absl import flags
from absl.testing import absltest
import numpy as np

from recovr_jax.envs.files import covr_import
from recovr_jax.envs.files import data
from recovr_jax.envs.files import files_environment
from recovr_jax.envs.files import torch_files
from recovr_jax.run import trec
from tests.helpers import runs
from tests.helpers import forked

ROOT = pathlib.Path(__file__).resolve().parents[3]
D = 16   # the tiny CLIP's projection


def _csv(path, rows):
  path.write_text('pth1,pth2,edit,txt1,txt2\n' + ''.join(
      f'{r},{t},make it {i},caption of {r},caption of {t}\n'
      for i, (r, t) in enumerate(rows)))
  return path


def _features(root, ids, shape=(3, D), seed=0):
  """``<root>/<id>.pth`` per id (ids are ``page/video``); returns arrays."""
  rng = np.random.default_rng(seed)
  out = {}
  for vid in ids:
    out[vid] = rng.normal(size=shape).astype(np.float32)
    (root / vid).parent.mkdir(parents=True, exist_ok=True)
    torch_files.save(root / f'{vid}.pth', out[vid])
  return out


def _unit_mean(x):
  x = x / np.linalg.norm(x, axis=-1, keepdims=True)
  return (x.mean(axis=1) if x.ndim == 3 else x).mean(axis=0)


class TorchFileTest(absltest.TestCase):

  def test_round_trip_and_the_zip_layout(self):
    root = pathlib.Path(tempfile.mkdtemp())
    for shape in ((4, D), (2, 32, D), (D,)):
      x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
      torch_files.save(root / 'a.pth', x)
      np.testing.assert_array_equal(torch_files.load(root / 'a.pth'), x)
    names = zipfile.ZipFile(root / 'a.pth').namelist()
    self.assertEqual(names, ['archive/data.pkl', 'archive/byteorder',
                             'archive/data/0', 'archive/version'])
    # Another archive prefix (older torch: the file's stem) reads the same.
    torch_files.save(root / 'b.pth', x, prefix='b')
    np.testing.assert_array_equal(torch_files.load(root / 'b.pth'), x)

  def _rewrite(self, path, pkl=None, drop=None):
    with zipfile.ZipFile(path) as z:
      files = {n: z.read(n) for n in z.namelist()}
    if pkl is not None:
      files['archive/data.pkl'] = pkl
    if drop:
      del files[drop]
    with zipfile.ZipFile(path, 'w') as z:
      for n, b in files.items():
        z.writestr(n, b)

  def test_bad_files_are_refused_with_the_file_named(self):
    root = pathlib.Path(tempfile.mkdtemp())
    bad = root / 'bad.pth'
    bad.write_bytes(b'not a zip')
    with self.assertRaisesRegex(torch_files.TorchFileError,
                                'bad.pth: not a torch zip'):
      torch_files.load(bad)
    torch_files.save(bad, np.ones((2, D), np.float32))
    # Code in the pickle: refused, never run.
    evil = b'\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.'
    self._rewrite(bad, pkl=evil)
    with self.assertRaisesRegex(torch_files.TorchFileError,
                                r'bad.pth: refusing os.system'):
      torch_files.load(bad)
    # An integer tensor: refused.
    torch_files.save(bad, np.ones((2, D), np.float32))
    with zipfile.ZipFile(bad) as z:
      pkl = z.read('archive/data.pkl').replace(b'FloatStorage',
                                               b'LongStorage\n'[:-1])
    self._rewrite(bad, pkl=pkl)
    with self.assertRaisesRegex(torch_files.TorchFileError, 'LongStorage'):
      torch_files.load(bad)
    torch_files.save(bad, np.ones((2, D), np.float32))
    self._rewrite(bad, drop='archive/data/0')
    with self.assertRaisesRegex(torch_files.TorchFileError,
                                'storage archive/data/0 is missing'):
      torch_files.load(bad)
    # A plain pickle of a dict of floats comes back as it is.
    torch_files.save(bad, np.ones((2, D), np.float32))
    self._rewrite(bad, pkl=pickle.dumps({'x': 1.5}, protocol=2))
    self.assertEqual(torch_files.load(bad), {'x': 1.5})


class CraftedHeaderTest(absltest.TestCase):
  """Crafted tensor headers (sizes, strides, offsets) over a small storage:
  each file is either read to exactly what NumPy's strided view of the
  storage holds or refused with the file named; run in a child process so
  that a read outside the storage (a crash) fails the test instead of
  killing the runner."""

  def test_hostile_strides_and_sizes(self):
    cases = [((0,), (4,), (-1,)),           # negative stride
             ((10,), (4,), (-3,)),
             ((0,), (1 << 30,), (0,)),      # stride 0: 1G values from 12
             ((0,), (3, 4), (4, 1 << 28)),  # far past the storage
             ((0,), (100000, 100000), (1, 1)),  # overlapping, 1e10 values
             ((-4,), (2,), (1,)),           # negative offset
             ((0,), (2, -3), (1, 1)),       # negative size
             ((11,), (2,), (1,)),           # one past the end
             ((0,), (3, 4), (4, 1)),        # the plain view: read
             ((2,), (2, 2), (1, 3)),        # a strided view: read
             ((0,), (0, 5), (0, 0))]        # empty: read
    rng = np.random.default_rng(0)
    for _ in range(200):  # random headers
      ndim = int(rng.integers(0, 4))
      cases.append(((int(rng.integers(-20, 20)),),
                    tuple(int(x) for x in rng.integers(-3, 20, ndim)),
                    tuple(int(x) for x in rng.integers(-8, 16, ndim))))
    code = f"""
import sys, numpy as np, pathlib, tempfile
from recovr_jax.envs.files import torch_files
root = pathlib.Path(tempfile.mkdtemp())
data = np.arange(12, dtype=np.float32)
for i, ((offset,), size, stride) in enumerate({cases!r}):
  path = root / f'{{i}}.pth'
  torch_files.save(path, data, header=(offset, size, stride))
  try:
    got = torch_files.load(path)
  except torch_files.TorchFileError as e:
    assert str(path) in str(e), e
    print('refused', i)
    continue
  want = np.lib.stride_tricks.as_strided(
      data[offset:], shape=size, strides=tuple(4 * s for s in stride))
  assert (got == want).all() and got.shape == tuple(size), (i, got)
  print('read', i)
"""
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    verdicts = proc.stdout.split()
    self.assertLen(verdicts, 2 * len(cases))
    outcome = dict(zip(map(int, verdicts[1::2]), verdicts[0::2]))
    for i in range(8):
      self.assertEqual(outcome[i], 'refused', cases[i])
    for i in (8, 9, 10):
      self.assertEqual(outcome[i], 'read', cases[i])


class ImportTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(tempfile.mkdtemp())
    self.rows = [('00/r0', '01/t0'), ('00/r1', '01/t1'), ('01/t0', '01/t2'),
                 ('00/r3', '01/t3')]
    self.csv = _csv(self.root / 'ann.csv', self.rows)
    ids = sorted({v for r in self.rows for v in r})
    self.feats = _features(self.root / 'emb', ids)

  def test_pooling_gallery_and_references(self):
    got = covr_import.import_features(self.root / 'emb', self.csv,
                                      progress=lambda s: None)
    self.assertEqual(got.ids, ('01/t0', '01/t1', '01/t2', '01/t3'))
    self.assertEqual(got.reference_ids, ('00/r0', '00/r1', '00/r3'))
    for i, vid in enumerate(got.ids):
      np.testing.assert_allclose(got.video[i], _unit_mean(self.feats[vid]),
                                 rtol=1e-6)
    self.assertEqual(got.captions[0], 'caption of 01/t0')
    everything = covr_import.import_features(self.root / 'emb', self.csv,
                                             gallery='all',
                                             progress=lambda s: None)
    self.assertLen(everything.ids, 7)
    self.assertEmpty(everything.reference_ids)
    raw = covr_import.import_features(self.root / 'emb', self.csv,
                                      unit_tokens=False,
                                      progress=lambda s: None)
    np.testing.assert_allclose(raw.video[0], self.feats['01/t0'].mean(0),
                               rtol=1e-6)
    # BLIP-2 tokens [F, 32, D] and per-frame weights.
    x = np.random.default_rng(5).normal(size=(3, 32, D)).astype(np.float32)
    w = np.array([1.0, 0.0, 3.0], np.float32)
    unit = x / np.linalg.norm(x, axis=-1, keepdims=True)
    np.testing.assert_allclose(
        covr_import.pool(x, 'f', weights=w),
        (unit.mean(1) * w[:, None]).sum(0) / 4, rtol=1e-5)
    with self.assertRaisesRegex(ValueError, 'f: frame weights'):
      covr_import.pool(x, 'f', weights=[1.0, 2.0])

  def test_covr_scores_weigh_a_targets_frames_as_covr_does(self):
    # CoVR's emb_pool=query: softmax(scores / 0.1) over the target's frames,
    # the scores a Python list per row; an empty list weighs frames alike.
    scores = {'01/t0': [0.2, 0.5, 0.3], '01/t1': [], '01/t2': [1, 0, 0.25],
              '01/t3': [0.3, 0.3, 0.9]}
    text = self.csv.read_text().splitlines()
    self.csv.write_text('\n'.join(
        [text[0] + ',scores'] + [
            f'{line},"{scores[t]}"' for line, (_, t) in
            zip(text[1:], self.rows)]) + '\n')
    got = covr_import.import_features(self.root / 'emb', self.csv,
                                      progress=lambda s: None)
    self.assertEqual(got.frames['frame_pooling'], 'query')
    self.assertEqual(got.frames['scored_targets'], 3)
    for i, vid in enumerate(got.ids):
      x = self.feats[vid] / np.linalg.norm(self.feats[vid], axis=-1,
                                           keepdims=True)
      if scores[vid]:
        z = np.asarray(scores[vid]) / 0.1
        w = np.exp(z) / np.exp(z).sum()
        want = (w[:, None] * x).sum(0)
      else:
        want = x.mean(0)
      np.testing.assert_allclose(got.video[i], want, rtol=1e-5)
    # References are never scored: their frames are averaged.
    np.testing.assert_allclose(got.reference_video[0],
                               _unit_mean(self.feats['00/r0']), rtol=1e-6)
    mean = covr_import.import_features(self.root / 'emb', self.csv,
                                       frame_pooling='mean',
                                       progress=lambda s: None)
    np.testing.assert_allclose(mean.video[0], _unit_mean(self.feats['01/t0']),
                               rtol=1e-6)
    middle = covr_import.import_features(self.root / 'emb', self.csv,
                                         frame_pooling='middle',
                                         progress=lambda s: None)
    x = self.feats['01/t0']
    np.testing.assert_allclose(middle.video[0], x[1] / np.linalg.norm(x[1]),
                               rtol=1e-6)
    # A list of the wrong length, or not a list of numbers: named.
    bad = self.csv.read_text().replace('"[1, 0, 0.25]"', '"[1, 0]"')
    self.csv.write_text(bad)
    with self.assertRaisesRegex(ValueError, r"'scores' of target '01/t2' "
                                'list 2 frames, but .*t2.pth holds 3'):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  progress=lambda s: None)
    self.csv.write_text(bad.replace('"[1, 0]"', '"[1, x]"'))
    with self.assertRaisesRegex(ValueError, r"row 4, column 'scores': not a "
                                'list of numbers'):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  progress=lambda s: None)
    self.csv.write_text(bad.replace('"[1, 0]"', '"[1, nan]"').replace(
        '"[1, 0]"', '"{1: 2}"'))
    with self.assertRaisesRegex(ValueError, r"row 4, column 'scores'"):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  progress=lambda s: None)

  def test_scores_near_the_float_limit_weigh_finitely(self):
    w = covr_import.score_weights(np.array([1e308, -1e308, 1e308, 0.0]))
    np.testing.assert_array_equal(w, [0.5, 0.0, 0.5, 0.0])
    # Ordinary scores: CoVR's softmax(scores / 0.1).
    s = np.array([0.1, 0.2, 0.3])
    e = np.exp(s / 0.1 - (s / 0.1).max())
    np.testing.assert_array_equal(covr_import.score_weights(s), e / e.sum())

  def test_query_pooling_needs_scores(self):
    with self.assertRaisesRegex(ValueError, "needs a 'scores' column"):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  frame_pooling='query',
                                  progress=lambda s: None)
    got = covr_import.import_features(self.root / 'emb', self.csv,
                                      progress=lambda s: None)
    self.assertEqual(got.frames['frame_pooling'], 'mean')
    with self.assertRaisesRegex(ValueError, '--frame_weights gives'):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  frame_pooling='middle', frame_weights={},
                                  progress=lambda s: None)

  def test_missing_mixed_and_corrupt(self):
    (self.root / 'emb' / '00' / 'r1.pth').unlink()
    with self.assertRaisesRegex(ValueError, r'ann.csv: row 3 names video '
                                r"'00/r1' but .*00/r1.pth does not exist"):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  progress=lambda s: None)
    got = covr_import.import_features(self.root / 'emb', self.csv,
                                      missing_ids='drop',
                                      progress=lambda s: None)
    self.assertEqual(got.dropped_rows, [{'row': 3, 'pth1': '00/r1',
                                         'pth2': '01/t1',
                                         'missing': ['00/r1']}])
    self.assertNotIn('01/t1', got.ids)
    torch_files.save(self.root / 'emb' / '01' / 't2.pth',
                     np.ones((3, D + 1), np.float32))
    with self.assertRaisesRegex(ValueError, r't2.pth: embedding size 17, but '
                                r'.*t0.pth has 16'):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  missing_ids='drop', progress=lambda s: None)
    with zipfile.ZipFile(self.root / 'emb' / '01' / 't2.pth', 'w') as z:
      z.writestr('archive/data.pkl', pickle.dumps({'x': 1.0}, protocol=2))
    with self.assertRaisesRegex(ValueError, 't2.pth: expected one tensor, '
                                'got a dict'):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  missing_ids='drop', progress=lambda s: None)
    (self.root / 'emb' / '01' / 't2.pth').write_bytes(b'garbage')
    with self.assertRaisesRegex(ValueError, 't2.pth: not a torch zip'):
      covr_import.import_features(self.root / 'emb', self.csv,
                                  missing_ids='drop', progress=lambda s: None)
    with self.assertRaisesRegex(ValueError, 'outside --embeddings_dir'):
      covr_import.feature_path(self.root / 'emb', '../x')

  def _cli(self, *args):
    return forked.run('experiments.data.import_covr',
                      f'--embeddings_dir={self.root / "emb"}',
                      f'--annotations={self.csv}', *args)

  def test_command_writes_nothing_on_error(self):
    out, refs = self.root / 'g.npz', self.root / 'r.npz'
    (self.root / 'emb' / '01' / 't3.pth').write_bytes(b'garbage')
    r = self._cli(f'--output={out}', f'--reference_output={refs}')
    self.assertNotEqual(r.returncode, 0)
    self.assertIn('t3.pth: not a torch zip', r.stderr)
    self.assertFalse(out.exists() or refs.exists())
    torch_files.save(self.root / 'emb' / '01' / 't3.pth', np.ones((3, D)))
    r = self._cli(f'--output={out}')   # references left nowhere
    self.assertIn('give --reference_output', r.stderr)
    self.assertFalse(out.exists())
    (self.root / 'emb' / '01' / 't3.pth').unlink()
    r = self._cli(f'--output={out}', f'--reference_output={refs}',
                  '--missing_ids=drop')
    self.assertEqual(r.returncode, 0, r.stderr)
    self.assertIn('1 CSV rows dropped', r.stdout)
    report = json.loads((self.root / 'g.npz.dropped.json').read_text())
    self.assertEqual(report['dropped_rows'][0]['row'], 5)
    self.assertEqual(data.load_embeddings(out).ids,
                     ('01/t0', '01/t1', '01/t2'))


class RealDataOptionsTest(absltest.TestCase):
  """Imported CoVR files through the runner: references outside the
  gallery, precomputed queries, raw dot products, dropped rows, TREC."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    cls.root = pathlib.Path(tempfile.mkdtemp())
    (cls.root / 'clip').mkdir()
    real_files.save_tiny_clip(cls.root / 'clip')
    rows = [(f'r{i}', f't{i}') for i in range(6)]
    cls.csv = _csv(cls.root / 'ann.csv', rows + [('r6', 'gone')])
    _features(cls.root / 'emb', [v for r in rows for v in r] + ['r6'])
    got = covr_import.import_features(cls.root / 'emb', cls.csv,
                                      missing_ids='drop',
                                      unit_tokens=False,
                                      progress=lambda s: None)
    data.save_embeddings(cls.root / 'g.npz', got.ids, got.video,
                         got.captions)
    data.save_embeddings(cls.root / 'r.npz', got.reference_ids,
                         got.reference_video, got.reference_captions)
    q = np.random.default_rng(9).normal(size=(7, D)).astype(np.float32)
    np.savez(cls.root / 'q.npz', query=q,
             pth1=np.array([r for r, _ in rows] + ['r6']))
    cls.query = q
    cls.args = dict(data='files', annotations=str(cls.csv),
                    gallery_embeddings=str(cls.root / 'g.npz'),
                    reference_embeddings=str(cls.root / 'r.npz'),
                    clip_dir=str(cls.root / 'clip'), list_length=4,
                    num_turns=2, bootstrap_resamples=50, batch_size=8,
                    compilation_cache=False, plots=False)

  def env(self, **kwargs):
    args = dict(normalize_rows=True,
                reference_embeddings=str(self.root / 'r.npz'),
                missing_ids='drop')
    args.update(kwargs)
    return files_environment.real_environment(
        str(self.csv), str(self.root / 'g.npz'), str(self.root / 'clip'),
        **args)

  def test_environment_options(self):
    env = self.env()
    self.assertEqual(env.searchable, 6)
    self.assertLen(env.gallery, 12)     # + 6 references, never retrieved
    self.assertEqual(list(env.dropped), [{
        'row': 8, 'pth1': 'r6', 'pth2': 'gone', 'missing': ['r6', 'gone'],
        'why': 'no embedding'}])
    self.assertTrue((env.reference >= 6).all())
    np.testing.assert_allclose(np.linalg.norm(env.gallery, axis=1), 1.0,
                               rtol=1e-5)
    raw = self.env(normalize_rows=False)
    stored = data.load_embeddings(self.root / 'g.npz', normalize=False)
    np.testing.assert_array_equal(raw.gallery[:6], stored.video)
    self.assertGreater(abs(np.linalg.norm(raw.gallery[0]) - 1), 1e-3)
    queries = self.env(query_embeddings=str(self.root / 'q.npz'),
                       normalize_rows=False)
    np.testing.assert_array_equal(queries.query_embeddings, self.query[:6])
    with self.assertRaisesRegex(ValueError, r"ann.csv: row 8, column "
                                r"'pth1': unknown video id 'r6' \(in no "
                                'embedding file'):
      self.env(missing_ids='error')
    with self.assertRaisesRegex(FileNotFoundError, 'nope.npz does not '
                                'exist'):
      self.env(query_embeddings=str(self.root / 'nope.npz'))
    bad = self.root / 'q_bad.npz'
    np.savez(bad, query=self.query[:5])
    with self.assertRaisesRegex(ValueError, r"q_bad.npz: 'query' has 5 rows "
                                'but the annotation CSV has 7'):
      self.env(query_embeddings=str(bad))
    np.savez(bad, query=self.query, pth1=np.array(['r0', 'x'] + ['r'] * 5))
    with self.assertRaisesRegex(ValueError, r"q_bad.npz: 'pth1' row 1 is "
                                r"'x' but the CSV row 3 has 'r1'"):
      self.env(query_embeddings=str(bad))
    data.save_embeddings(self.root / 'r2.npz', ['t0'], np.ones((1, D)))
    with self.assertRaisesRegex(ValueError, "'t0' is also in"):
      self.env(reference_embeddings=str(self.root / 'r2.npz'))

  def test_run_with_dropped_rows_and_trec_export(self):
    out = self.root / 'out'
    self.assertIsNone(runs.run_of(
        output_dir=str(out), methods=['recovr', 'ivr'], missing_ids='drop',
        normalize_rows=False, query_embeddings=str(self.root / 'q.npz'),
        export_trec=True, **self.args))
    metrics = json.loads((out / 'metrics.json').read_text())
    self.assertEqual(metrics['recovr']['rows_dropped'], 1)
    self.assertIn('1 annotation rows were dropped',
                  (out / 'report.md').read_text())
    self.assertLen(json.loads((out / 'dropped_rows.json').read_text()), 1)
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    ids = data.load_embeddings(self.root / 'g.npz').ids
    qrels = dict(line.split()[::2] for line in
                 (out / 'trec' / 'qrels.txt').read_text().splitlines())
    self.assertEqual(qrels['q0'], 't0')
    for method in ('recovr', 'ivr'):
      for t in range(3):
        parsed = trec.read_run(out / 'trec' / f'{method}.turn{t}.run')
        self.assertLen(parsed, 6)
        hits = []
        for row in rows:
          if row['method'] != method:
            continue
          lines = parsed[f'q{row["session"]}']
          self.assertEqual([d for d, _, _ in lines],
                           [ids[i] for i in row['turns'][t]['top10']])
          self.assertEqual([(r, s) for _, r, s in lines],
                           [(r, 5 - r) for r in range(1, len(lines) + 1)])
          hits.append(lines[0][0] == qrels[f'q{row["session"]}'])
        self.assertAlmostEqual(metrics[method]['R@1'][t], np.mean(hits),
                               places=6)   # metrics.json keeps 6 decimals
        try:
          import ranx  # pylint: disable=g-import-not-at-top
        except ImportError:
          continue
        score = ranx.evaluate(
            ranx.Qrels.from_file(str(out / 'trec' / 'qrels.txt'),
                                 kind='trec'),
            ranx.Run.from_file(str(out / 'trec' / f'{method}.turn{t}.run'),
                               kind='trec'), 'recall@1')
        self.assertAlmostEqual(score, metrics[method]['R@1'][t], places=6)
    with self.assertRaisesRegex(Exception, '--reference_embeddings is for '
                                '--data=files'):
      runs.run_of(
          output_dir=str(self.root / 'w'), reference_embeddings=str(self.root /
          'r.npz'), methods=['recovr'], data='world')
    with self.assertRaisesRegex(Exception, '--user_phraser is for '
                                '--data=files'):
      runs.run_of(
          output_dir=str(self.root / 'w'), user_phraser='smollm2',
          methods=['recovr'], data='world')


  def test_smollm2_phrases_the_caption_users_feedback(self):
    out = self.root / 'phrased'
    self.assertIsNone(runs.run_of(
        output_dir=str(out), methods=['recovr'], missing_ids='drop',
        user_phraser='smollm2', **dict(self.args, num_turns=1)))
    counts = json.loads((out / 'user_phraser.json').read_text())
    captions = data.load_embeddings(self.root / 'g.npz').captions
    said = 0
    for line in (out / 'trajectories.jsonl').read_text().splitlines():
      row = json.loads(line)
      turn = row['turns'][1]
      if turn['action'] != 'stopped':
        said += 1
        self.assertTrue(turn['feedback'])
        self.assertNotIn(captions[row['target']].lower(),
                         turn['feedback'].lower())
    self.assertGreater(said, 0)
    self.assertEqual(counts['calls'], said)
    self.assertBetween(counts['fallbacks_to_rules'], 0, said)


class TrecTest(absltest.TestCase):

  def test_lines(self):
    lines = trec.run_lines([[3, 1, -1]], [4], ['a', 'b', 'c', 'd'], 'x')
    self.assertEqual(lines, ['q4 Q0 d 1 3 x', 'q4 Q0 b 2 2 x'])
    with self.assertRaisesRegex(ValueError, 'session 4: .* repeats'):
      trec.run_lines([[3, 3]], [4], None, 'x')
    path = pathlib.Path(tempfile.mkdtemp()) / 'r.run'
    path.write_text('q1 Q0 a 1 2.0 t\nbad line\n')
    with self.assertRaisesRegex(ValueError, 'r.run, line 2'):
      trec.read_run(path)

  def test_ids_with_whitespace_are_one_field(self):
    ids = ['a b', 'tab\there', 'x%y', 'plain', 'nl\nid', 'ünï côdé']
    d = pathlib.Path(tempfile.mkdtemp())
    displayed = {'m': np.asarray([[[0, 1, 2, 3, 4, 5]], [[5, 4, 3, 2, 1, 0]]])}
    trec.write(d, displayed, [0, 1], [1, 5], ids)
    run = trec.read_run(d / 'm.turn0.run')  # six fields on every line
    self.assertEqual([trec.decode_id(doc) for doc, _, _ in run['q0']], ids)
    self.assertEqual([trec.decode_id(doc) for doc, _, _ in run['q1']],
                     ids[::-1])
    qrels = [l.split() for l in (d / 'qrels.txt').read_text().splitlines()]
    self.assertEqual([len(q) for q in qrels], [4, 4])
    self.assertEqual([trec.decode_id(q[2]) for q in qrels],
                     ['tab\there', 'ünï côdé'])
    self.assertEqual(trec.encode_id('plain'), 'plain')


if __name__ == '__main__':
  absltest.main()
