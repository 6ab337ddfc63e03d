"""The real-data path end to end on a tiny random Flax CLIP saved to disk."""

import json
import pathlib
import shutil
import tempfile

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np
from PIL import Image

from experiments.data import embed_videos
from recovr_jax.core import list_metrics
from recovr_jax.core import vectors
from recovr_jax.envs.files import clip_encoder
from recovr_jax.envs.files import data
from recovr_jax import retrieve
from tests.helpers import real_files
from tests.helpers import runs


class RealDataPathTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    flags.FLAGS.mark_as_parsed()
    cls.root = pathlib.Path(tempfile.mkdtemp())
    cls.clip_dir = cls.root / 'clip'
    cls.clip_dir.mkdir()
    real_files.save_tiny_clip(cls.clip_dir)
    cls.videos = cls.root / 'videos'
    rng = np.random.default_rng(0)
    for v in range(6):
      folder = cls.videos / f'vid{v}'
      folder.mkdir(parents=True)
      for f in range(3):
        pixels = rng.integers(0, 256, (24, 28, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f'{f:03d}.png')

  def test_embed_annotate_retrieve(self):
    output = self.root / 'gallery.safetensors'
    with flagsaver.flagsaver(clip_dir=str(self.clip_dir),
                             videos_dir=str(self.videos), output=str(output)):
      embed_videos.main(['embed_videos'])
    gallery = data.load_embeddings(output, dim=16)
    self.assertEqual(gallery.ids, tuple(f'vid{v}' for v in range(6)))

    csv = self.root / 'ann.csv'
    csv.write_text('pth1,pth2,edit,txt1,txt2\n'
                   'vid0,vid1,make it brighter,a,b\n'
                   'vid2,vid5,at night,c,d\n')
    ann = data.load_covr_csv(csv, video_ids=gallery.ids)
    index = gallery.index()
    encoder = clip_encoder.ClipEncoder(str(self.clip_dir))
    reference = gallery.video[[index[r] for r in ann.reference]]
    queries = np.asarray(vectors.sum_composer(
        reference, encoder.encode_text(ann.edit)))
    ref_ids = np.array([index[r] for r in ann.reference], np.int32)
    ids, _ = retrieve(queries, gallery.video, 4, exclude=ref_ids)
    ranks = list_metrics.target_ranks(np.asarray(ids)[:, None, :],
                                 np.array([index[t] for t in ann.target]))
    self.assertEqual(ranks.shape, (2, 1))
    self.assertTrue(np.all(np.asarray(ids) != ref_ids[:, None]))
    self.assertTrue(np.all((ranks >= 1) & (ranks <= 5)))

  def test_covr_page_folders_and_their_captions(self):
    # WebVid-CoVR names a video <page>/<id>: nested folders, ids their
    # paths; --annotations gives each its caption (txt2, else txt1), so the
    # runner's caption user can read the gallery.
    nested = self.root / 'pages'
    for i, v in enumerate(('page0/11', 'page0/12', 'page1/13')):
      shutil.copytree(self.videos / f'vid{i}', nested / v)
    csv = self.root / 'pages.csv'
    csv.write_text('pth1,pth2,edit,txt1,txt2\n'
                   'page0/11,page0/12,at night,a cube,two cubes\n'
                   'page1/13,page0/12,brighter,a sphere,\n')
    output = self.root / 'pages.npz'
    with flagsaver.flagsaver(clip_dir=str(self.clip_dir),
                             videos_dir=str(nested), output=str(output),
                             annotations=str(csv)):
      embed_videos.main(['embed_videos'])
    gallery = data.load_embeddings(output, dim=16)
    self.assertEqual(gallery.ids, ('page0/11', 'page0/12', 'page1/13'))
    self.assertEqual(gallery.captions, ('a cube', 'two cubes', 'a sphere'))
    # ... and the runner takes the file as it is: frame folders -> run.
    out = self.root / 'pages_run'
    self.assertIsNone(runs.run_tiny(
        out, data='files', annotations=str(csv),
        gallery_embeddings=str(output), clip_dir=str(self.clip_dir),
        methods=['recovr', 'ivr'], num_sessions=2, batch_size=2))
    metrics = json.loads((out / 'metrics.json').read_text())
    self.assertCountEqual(metrics, ['recovr', 'ivr'])
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(rows, 4)
    self.assertEqual({r['target_id'] for r in rows}, {'page0/12'})
    # Lists of the gallery's nested ids (padded with null past its 3 videos).
    shown = {i for r in rows for t in r['turns'] for i in t['top10_ids']}
    self.assertLessEqual(shown - {None}, set(gallery.ids))
    self.assertIn('page0/12', shown)
    # A video the CSV does not name is an error naming it, before the model.
    (csv).write_text('pth1,pth2,edit,txt1,txt2\n'
                     'page0/11,page0/12,at night,a,b\n')
    with flagsaver.flagsaver(clip_dir=str(self.clip_dir),
                             videos_dir=str(nested), output=str(output),
                             annotations=str(csv)):
      with self.assertRaisesRegex(app.UsageError, "names no video 'page1/13'"):
        embed_videos.main(['embed_videos'])

  def test_video_embedding_is_mean_of_frames(self):
    encoder = clip_encoder.ClipEncoder(str(self.clip_dir))
    frames = embed_videos.read_frames(self.videos / 'vid3', 8)
    self.assertEqual(frames.shape, (3, 24, 28, 3))
    single = [encoder.encode_video(frames[i:i + 1]) for i in range(3)]
    mean = np.mean(single, axis=0)
    np.testing.assert_allclose(encoder.encode_video(frames),
                               mean / np.linalg.norm(mean), atol=1e-5)

  def test_bad_input(self):
    with self.assertRaisesRegex(FileNotFoundError, 'is missing config.json'):
      clip_encoder.ClipEncoder(str(self.root))
    broken = self.root / 'broken'
    broken.mkdir(exist_ok=True)
    (broken / 'config.json').write_text('{"model_type": "clip", "oops": ')
    with self.assertRaisesRegex(FileNotFoundError, 'is missing weights'):
      clip_encoder.ClipEncoder(str(broken))
    bad_config = self.root / 'bad_config'
    shutil.copytree(self.clip_dir, bad_config, dirs_exist_ok=True)
    (bad_config / 'config.json').write_text('{"model_type": "clip", "oops": ')
    with self.assertRaisesRegex(ValueError, 'cannot load a FlaxCLIPModel '
                                f'from {str(bad_config)!r}'):
      clip_encoder.ClipEncoder(str(bad_config))
    with self.assertRaisesRegex(FileNotFoundError, 'is not a directory'):
      embed_videos.video_folders(self.root / 'nope')
    empty = self.root / 'empty_videos' / 'vidX'
    empty.mkdir(parents=True, exist_ok=True)
    with self.assertRaisesRegex(ValueError, 'has no .png'):
      embed_videos.video_folders(empty.parent)
    # Through the command: a one-line error, not a traceback, and a
    # damaged frame found mid-run names its folder and writes nothing.
    output = self.root / 'never.npz'
    with flagsaver.flagsaver(clip_dir=str(self.clip_dir),
                             videos_dir=str(empty.parent), output=str(output)):
      with self.assertRaisesRegex(app.UsageError, 'vidX has no .png'):
        embed_videos.main(['embed_videos'])
    damaged = self.root / 'damaged_videos'
    shutil.copytree(self.videos / 'vid0', damaged / 'vid0')
    shutil.copytree(self.videos / 'vid1', damaged / 'vid1')
    (damaged / 'vid1' / '001.png').write_bytes(b'not a png')
    with flagsaver.flagsaver(clip_dir=str(self.clip_dir),
                             videos_dir=str(damaged), output=str(output)):
      with self.assertRaisesRegex(app.UsageError, 'video folder .*vid1: .*'
                                  'nothing was written'):
        embed_videos.main(['embed_videos'])
    self.assertFalse(output.exists())


if __name__ == '__main__':
  absltest.main()
