"""The entry points' refusals: bad flags, unwritable outputs and missing
models named before any work (a benchmark or trainer runs for minutes; an
error at its last line loses them). The shared checks (``experiments.common.cli``,
``bench_common.list_values``) are tested in this process; one subprocess per
entry point whose own code calls them checks the wiring (forked from a
process that has imported the libraries: ``tests/helpers/forked.py``)."""

import json
import os
import pathlib
import tempfile

from absl import app
from absl import flags
from absl.testing import absltest

from experiments.bench import bench_common
from experiments.common import cli
from recovr_jax.reasoning import registry
from tests.helpers import entry_points
from tests.helpers import forked



def _blocker() -> pathlib.Path:
  """A file where a folder is needed: nothing can be written below it."""
  path = pathlib.Path(tempfile.mkdtemp()) / 'a_file'
  path.write_text('')
  return path


class SharedChecksTest(absltest.TestCase):

  def test_every_output_file_flag_is_checked(self):
    blocker = _blocker()
    fv = flags.FlagValues()
    for name in cli.OUTPUT_FILE_FLAGS:
      flags.DEFINE_string(name, f'{blocker}/x/{name}.out', '', flag_values=fv)
    fv(['prog'])
    with self.assertRaises(app.UsageError) as raised:
      cli.check_output_files(fv)
    for name in cli.OUTPUT_FILE_FLAGS:  # one line per flag
      self.assertIn(f'--{name} {blocker}/x/{name}.out: cannot write there',
                    str(raised.exception))
    fv['output_json'].value = str(blocker.parent)
    with self.assertRaisesRegex(app.UsageError, 'a directory; expected'):
      cli.check_output_files(fv)
    for name in cli.OUTPUT_FILE_FLAGS:  # writable: passes, folders made
      fv[name].value = str(blocker.parent / 'made' / f'{name}.out')
    cli.check_output_files(fv)
    self.assertTrue((blocker.parent / 'made').is_dir())
    self.assertEqual(os.listdir(blocker.parent / 'made'), [])  # no probe left

  def test_writable_dir_and_list_values(self):
    blocker = _blocker()
    fv = flags.FlagValues()
    folder = flags.DEFINE_string('output_dir', f'{blocker}/x', '',
                                 flag_values=fv)
    sizes = flags.DEFINE_list('sizes', ['10', '0'], '', flag_values=fv)
    names = flags.DEFINE_list('methods', [], '', flag_values=fv)
    fv(['prog'])
    with self.assertRaisesRegex(app.UsageError,
                                f'--output_dir {blocker}/x: cannot write'):
      cli.writable_dir(folder)
    fv['output_dir'].value = str(blocker.parent / 'ok')
    self.assertEqual(cli.writable_dir(folder), str(blocker.parent / 'ok'))
    with self.assertRaisesRegex(app.UsageError,
                                "--sizes: '0' is not a positive integer"):
      bench_common.list_values(sizes, bench_common.positive_int,
                               what='a positive integer')
    with self.assertRaisesRegex(app.UsageError,
                                '--methods: give at least one value'):
      bench_common.list_values(names)
    fv['methods'].value = ['numpy', 'bogus']
    with self.assertRaisesRegex(app.UsageError,
                                "--methods: unknown 'bogus'; valid: numpy"):
      bench_common.list_values(names, valid=('numpy',))
    fv['methods'].value = ['numpy', 'numpy']
    with self.assertRaisesRegex(app.UsageError,
                                "--methods lists 'numpy' twice"):
      bench_common.list_values(names, valid=('numpy',))
    fv['sizes'].value = ['32', '32']  # a shape may repeat a dimension
    self.assertEqual(bench_common.list_values(
        sizes, bench_common.positive_int, distinct=False), [32, 32])
    with self.assertRaisesRegex(app.UsageError, "--sizes lists '32' twice"):
      bench_common.list_values(sizes, bench_common.positive_int)
    with self.assertRaisesRegex(ValueError, "--backends lists 'rules' twice"):
      registry.check_names(['rules', 'grounded', 'rules'])


class EntryPointRefusalsTest(absltest.TestCase):

  def test_refused_before_the_work(self):
    blocker = _blocker()
    never = blocker.parent / 'never.json'
    for module, args, message in (
        # cli.run's output-file check (every entry point runs through it).
        ('bench_lm', [f'--output_json={blocker}/x.json'],
         f'--output_json {blocker}/x.json: cannot write there'),
        # bench_lm's own: lists, the adapter (a traceback), before timing.
        ('bench_lm', ['--reasoner_batches=16,x,16', f'--output_json={never}'],
         '--reasoner_batches must be distinct integers'),
        ('bench_lm', ['--adapter=/nonexistent', f'--output_json={never}'],
         '--adapter /nonexistent: not a LoRA adapter directory'),
        # An unknown method was timed as faiss under its name.
        ('bench_retrieval', ['--methods=bogus', f'--output_json={never}'],
         "--methods: unknown 'bogus'"),
        # B = 0 queries was timed.
        ('bench_retrieval', ['--b=0', f'--output_json={never}'],
         '--b must be >= 1, got 0'),
        # Empty lists wrote an empty report and exited 0.
        ('bench_distributed', ['--parts=', f'--output_json={never}'],
         '--parts: give at least one value'),
        # A warm run with no cold run to warm its cache.
        ('bench_runs', ['--parts=quickstart_warm', f'--output_json={never}'],
         '--parts: quickstart_warm reuses the cache of quickstart'),
        ('eval_reasoners', ['--backends=', f'--eval_json={never}'],
         '--backends: name at least one backend'),
        # Tracebacks.
        ('eval_world', [f'--checkpoint_dir={blocker.parent}',
                        f'--output_json={never}'],
         'no video_encoder or composer checkpoint'),
        ('train_reasoner', ['--eval_only', f'--output_dir={blocker.parent}'],
         '--eval_only --output_dir: reasoner checkpoint'),
        ('fidelity', [f'--save_sessions_dir={blocker}/x'],
         f'--save_sessions_dir {blocker}/x: cannot write there'),
        # NumPy's traceback; every seed flag is >= 0.
        ('eval_user', ['--seed=-1', f'--output_json={never}'],
         'flag --seed=-1: -1 is not a non-negative integer'),
        ('eval_reasoners', ['--wording=9', f'--eval_json={never}'],
         'flag --wording=9: value should be one of <1|2|3>'),
        # Trained on: an adapter of scale 0 (changes nothing), a NaN model.
        ('train_adapter', ['--alpha=0', f'--output_dir={blocker.parent}/a'],
         '--alpha must be a finite number > 0, got 0.0'),
        ('train_captioner', ['--lr=nan', f'--output_dir={blocker.parent}/c'],
         '--lr must be a finite number > 0, got nan'),
        ('train_world', ['--scene_weight=-1',
                         f'--output_dir={blocker.parent}/w'],
         '--scene_weight must be a finite number >= 0, got -1.0')):
      with self.subTest(f'{module} {args[0]}'):
        proc = forked.run(entry_points.module(module), *args)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(message, proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)
        self.assertNotIn('anchors', proc.stdout + proc.stderr)
    self.assertFalse(never.exists())

  def test_eval_reasoners_reports_a_module_it_drew_no_request_of(self):
    # Three requests drew no question: a ZeroDivisionError after the work.
    out = pathlib.Path(tempfile.mkdtemp()) / 'r.json'
    proc = forked.run('experiments.evaluate.eval_reasoners',
                      '--backends=rules', '--eval_requests=3',
                      f'--eval_json={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn('| rules | question | no request drawn |', proc.stdout)
    rules = json.loads(out.read_text())['results']['rules']
    self.assertEqual(rules['question'], {'requests': 0})
    self.assertEqual(sum(rules[m]['requests'] for m in (
        'intent', 'reflect', 'question', 't2v_init')), 3)

  def test_trainers_check_their_output_folder_first(self):
    # A captioner trained 20 minutes, then could not be written.
    blocker = _blocker()
    for module in ('train_world', 'train_captioner', 'train_adapter',
                   'train_reasoner', 'convert_gguf'):
      with self.subTest(module):
        proc = forked.run(entry_points.module(module),
                          f'--output_dir={blocker}/x')
        self.assertIn(f'--output_dir {blocker}/x: cannot write there',
                      proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)


if __name__ == '__main__':
  absltest.main()
