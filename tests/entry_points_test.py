"""``experiments.bench_lm``'s refusals, and every entry point's check of its
output files (``experiments.cli``): named, before anything is timed (the
benchmark itself takes minutes and is run by hand, not in the suite)."""

import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(module, *args):
  return subprocess.run([sys.executable, '-m', module, *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS='cpu'))


class EntryPointRefusalsTest(absltest.TestCase):

  def test_bad_flags_and_adapters_are_named(self):
    out = pathlib.Path(tempfile.mkdtemp()) / 'never.json'
    for args, message in (
        (['--reasoner_batches=16,x'], '--reasoner_batches must be integers'),
        (['--cache_length=0'], '--cache_length must be >= 1'),
        (['--adapter=/nonexistent'],
         '--adapter /nonexistent: not a LoRA adapter directory')):
      with self.subTest(args[0]):
        proc = _run('experiments.bench_lm', *args, f'--output_json={out}')
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(message, proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)
        self.assertNotIn('anchors', proc.stdout + proc.stderr)
    self.assertFalse(out.exists())

  def test_an_unwritable_output_file_is_refused_before_the_work(self):
    # A file where a folder is needed: no process can write below it.
    blocker = pathlib.Path(tempfile.mkdtemp()) / 'a_file'
    blocker.write_text('')
    for module, flag in (('experiments.bench_lm', 'output_json'),
                         ('experiments.eval_reading', 'output_md'),
                         ('experiments.eval_reasoners', 'eval_json'),
                         ('experiments.embed_videos', 'output'),
                         ('experiments.import_covr', 'reference_output'),
                         ('experiments.bench_study', 'screenshot')):
      with self.subTest(module):
        proc = _run(module, f'--{flag}={blocker}/x/result')
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(f'--{flag} {blocker}/x/result: cannot write there',
                      proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)
    proc = _run('experiments.eval_reasoners', '--backends=',
                f'--eval_json={blocker.parent}/reasoners.json')
    self.assertIn('--backends: name at least one backend', proc.stderr)
    self.assertFalse((blocker.parent / 'reasoners.json').exists())
    # The trainers check their output folder before training, not at the
    # save (a captioner trained 20 minutes, then could not be written).
    for module in ('train_world', 'train_captioner', 'train_adapter',
                   'train_reasoner', 'convert_gguf'):
      with self.subTest(module):
        proc = _run(f'experiments.{module}', f'--output_dir={blocker}/x')
        self.assertIn(f'--output_dir {blocker}/x: cannot write there',
                      proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)
    proc = _run('experiments.bench_lm', f'--output_json={blocker.parent}')
    self.assertIn('a directory; expected a file path', proc.stderr)


  def test_benchmark_lists_and_checkpoints_are_checked(self):
    # Empty, unconvertible or unknown list values are named (an unknown
    # --methods of bench_retrieval timed faiss under its name; empty lists
    # wrote empty results and exited 0, or raised a traceback); so is a
    # checkpoint folder without the encoders (a traceback).
    out = pathlib.Path(tempfile.mkdtemp()) / 'never.json'
    blocker = out.parent / 'a_file'  # a file where a folder is needed
    blocker.write_text('')
    for module, arg, message in (
        ('bench_retrieval', '--methods=bogus', "--methods: unknown 'bogus'"),
        ('bench_retrieval', '--sizes=0', "--sizes: '0' is not a positive"),
        ('bench_core', '--shapes=', '--shapes: give at least one value'),
        ('bench_methods', '--methods=', '--methods: give at least one'),
        ('bench_distributed', '--parts=', '--parts: give at least one'),
        ('bench_import', '--shape=3,x', "--shape: 'x' is not a positive"),
        ('eval_world', f'--checkpoint_dir={out.parent}',
         'no video_encoder or composer checkpoint'),
        ('fidelity', f'--save_sessions_dir={blocker}/x',
         f'--save_sessions_dir {blocker}/x: cannot write there')):
      with self.subTest(f'{module} {arg}'):
        extra = ([] if module in ('bench_import', 'fidelity') else
                 [f'--output_json={out}'])
        proc = _run(f'experiments.{module}', arg, *extra)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(message, proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)
    self.assertFalse(out.exists())


if __name__ == '__main__':
  absltest.main()
