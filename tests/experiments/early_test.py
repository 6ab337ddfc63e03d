"""experiments.common.early: the runner's help and a misspelt flag answered
before jax is imported, from a manifest that is the runner's flags."""

import json
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest

from experiments.common import early

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(*args):
  return subprocess.run([sys.executable, '-X', 'importtime', '-m',
                         'experiments.run', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300,
                        check=False)


def _imported(stderr: str) -> set:
  return {line.split('|')[-1].strip() for line in stderr.splitlines()
          if line.startswith('import time:')}


def _live() -> dict:
  """``runner_manifest.live()`` in a fresh process: this one may hold
  flags other test modules defined."""
  proc = subprocess.run(
      [sys.executable, '-c', 'import json; from experiments.common import '
       'runner_manifest; print(json.dumps(runner_manifest.live()))'],
      cwd=ROOT,
      capture_output=True, text=True, timeout=300, check=True)
  return json.loads(proc.stdout)


class EarlyTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.live = _live()

  def test_the_manifest_is_the_runners_flags(self):
    stored = json.loads(early.MANIFEST.read_text())
    self.assertEqual(stored, self.live, 'experiments/common/'
                     'runner_flags.json is stale: python -m '
                     'experiments.common.runner_manifest --write')

  def test_help_and_a_misspelt_flag_answer_without_jax(self):
    proc = _run('--helpshort')
    self.assertEqual(proc.returncode, 0)
    self.assertEqual(proc.stdout, self.live['help'])
    self.assertNotIn('jax', _imported(proc.stderr))
    folder = pathlib.Path(tempfile.mkdtemp())
    flagfile = folder / 'f'
    flagfile.write_text('--num_sessions=3\n--num_sesions=4\n')
    for args in (['--num_sesions=3'], [f'--flagfile={flagfile}']):
      proc = _run(*args, f'--output_dir={folder / "out"}')
      self.assertEqual(proc.returncode, 1)
      lines = [l for l in proc.stderr.splitlines()
               if not l.startswith('import time:')]
      self.assertEqual(lines[0], 'experiments.run: error: unknown flag '
                       '--num_sesions; did you mean --num_sessions?')
      self.assertNotIn('jax', _imported(proc.stderr))
    self.assertFalse((folder / 'out').exists())
    # A value the flag's parser refuses, also before jax, as absl words it.
    proc = _run('--recency=cubic', '--num_sessions', '3x',
                f'--output_dir={folder / "out"}')
    self.assertEqual(proc.returncode, 1)
    lines = [l for l in proc.stderr.splitlines()
             if not l.startswith('import time:')]
    self.assertEqual(lines[:2], [
        'experiments.run: error: flag --recency=cubic: value should be one '
        'of <linear|exp|uniform>',
        "experiments.run: error: flag --num_sessions=3x: invalid literal for "
        "int() with base 10: '3x'"])
    self.assertNotIn('jax', _imported(proc.stderr))
    self.assertFalse((folder / 'out').exists())

  def test_a_bad_value_is_absls_under_the_same_prefix(self):
    proc = subprocess.run([sys.executable, '-m', 'experiments.run',
                           '--num_sessions=abc'], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          check=False)
    self.assertEqual(proc.returncode, 1)
    self.assertTrue(proc.stderr.startswith(
        'experiments.run: error: flag --num_sessions=abc: invalid'),
                    proc.stderr)

  def test_bad_values_are_absls_refusals(self):
    manifest = {'names': ['seed', 'gamma', 'resume', 'recency'],
                'booleans': ['resume'], 'values': {
        'seed': {'parser': 'IntegerParser', 'lower': 0, 'upper': None},
        'gamma': {'parser': 'FloatParser', 'lower': None, 'upper': None},
        'resume': {'parser': 'BooleanParser'},
        'recency': {'parser': 'EnumParser', 'choices': ['linear', 'exp'],
                    'case_sensitive': True}}}
    self.assertEqual(early.bad_values(
        ['--seed', '3', '--gamma=0.5', '--resume', '--noresume',
         '--recency=exp', 'positional', '--', '--seed=x'], manifest), [])
    self.assertEqual(early.bad_values(
        ['--seed=-1', '--gamma', 'half', '--recency=cubic', '--resume=maybe'],
        manifest), [
            'flag --seed=-1: -1 is not a non-negative integer',
            "flag --gamma=half: could not convert string to float: 'half'",
            'flag --recency=cubic: value should be one of <linear|exp>',
            "flag --resume=maybe: ('Non-boolean argument to boolean flag', "
            "'maybe')"])

  def test_unknown_flags_reads_as_absl_does(self):
    manifest = {'names': ['num_sessions', 'resume', 'seed', 'flagfile'],
                'booleans': ['resume']}
    self.assertEqual(early.unknown_flags(
        ['--noresume', '--resume', '--seed', '-1', '-num_sessions=2',
         'positional', '--', '--after'], manifest), [])
    self.assertEqual(early.unknown_flags(
        ['--noseed', '--resume=false', '--sed=1'], manifest),
                     [('--noseed', 'seed'), ('--sed', 'seed')])


if __name__ == '__main__':
  absltest.main()
