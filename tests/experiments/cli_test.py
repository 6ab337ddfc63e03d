"""A refused flag value is one clear line and a hint, not the whole help."""

import os
import pathlib
import re
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

from tests.helpers import entry_points
from tests.helpers import forked

ROOT = pathlib.Path(__file__).resolve().parents[2]


class BadFlagValueTest(parameterized.TestCase):

  @parameterized.parameters(
      ('run', ['--suite=fidelity', '--methods=recovr'], 'drop --methods'),
      ('eval_reading', ['--noise_rates=2'], '--noise_rates: each must be in'),
      ('fidelity', ['--fidelity_dirs=/nonexistent'],
       '--fidelity_dirs: /nonexistent does not exist'),
      ('study', ['--host=0.0.0.0'], 'pass --allow_remote to mean it'),
      ('train_adapter', ['--init_adapter=/nonexistent'],
       "--init_adapter: LoRA adapter '/nonexistent' has no adapter"),
  )
  def test_one_line_and_the_hint(self, script, args, expected):
    proc = forked.run(entry_points.module(script), *args)
    self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
    lines = [l for l in proc.stderr.splitlines()
             if not l.startswith(('W', 'I')) or ': error: ' in l]
    self.assertLess(len(lines), 10, proc.stderr)
    self.assertIn(f'{entry_points.module(script)}: error: ', proc.stderr)
    self.assertIn(expected, proc.stderr)
    self.assertIn('Pass --helpshort to see the flags.', proc.stderr)
    self.assertNotIn('flags:', proc.stderr)  # no help dump



class OneLineRefusalTest(parameterized.TestCase):
  """A flag file that is not UTF-8 and a negated boolean given a value:
  one line naming the file or the flag (a traceback before), on the
  runner (answered before jax) and on another entry point."""

  @parameterized.parameters('run', 'compare_runs', 'view')
  def test_a_flag_file_that_is_not_utf8_is_named(self, script):
    folder = pathlib.Path(self.create_tempdir().full_path)
    latin = folder / 'latin.flags'
    latin.write_bytes(b'--seed=1\n# caf\xe9\n')
    outer = folder / 'outer.flags'   # one that names it
    outer.write_text(f'--flagfile={latin}\n')
    proc = forked.run(entry_points.module(script), f'--flagfile={outer}')
    self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
    self.assertIn(f'--flagfile={latin}: not UTF-8 text (byte 0xe9 at offset '
                  '14); save it as UTF-8', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)

  @parameterized.parameters(('run', 'plots'), ('view', 'media'))
  def test_a_negated_flag_given_a_value_is_named(self, script, name):
    proc = forked.run(entry_points.module(script), f'--no{name}=false')
    self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
    self.assertIn(f'--no{name}=false: --no{name} takes no value; write '
                  f'--{name}=false', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)


class FlagsFileTest(absltest.TestCase):

  def test_paths_in_flags_txt_are_absolute(self):
    from experiments.common import run_flags  # pylint: disable=g-import-not-at-top
    text = ('--cache_dir=cache\n--output_dir=/tmp/x\n--methods=recovr\n'
            '--annotations=data/ann.csv\n--log_dir=\n')
    self.assertEqual(run_flags.absolute_paths(text), (
        f'--cache_dir={os.path.abspath("cache")}\n--output_dir=/tmp/x\n'
        '--methods=recovr\n'
        f'--annotations={os.path.abspath("data/ann.csv")}\n--log_dir=\n'))
    from absl import flags  # pylint: disable=g-import-not-at-top
    for name in run_flags.PATH_FLAGS:  # every one is a flag of the run
      self.assertIn(name, flags.FLAGS)


if __name__ == '__main__':
  absltest.main()


class StudyPortTest(absltest.TestCase):

  def test_a_busy_port_is_found_before_the_models_load(self):
    import socket  # pylint: disable=g-import-not-at-top
    with socket.socket() as s:
      s.bind(('127.0.0.1', 0))
      s.listen()
      port = s.getsockname()[1]
      proc = forked.run('experiments.study', f'--port={port}',
                        f'--output_dir={self.create_tempdir().full_path}')
    self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
    self.assertIn(f'--port={port} cannot be used', proc.stderr)
    self.assertNotIn('loading the environment', proc.stdout)


class SeveralProblemsTest(absltest.TestCase):

  def test_every_independent_problem_in_one_error(self):
    from recovr_jax.reasoning import registry  # pylint: disable=g-import-not-at-top
    from recovr_jax.run import run_config  # pylint: disable=g-import-not-at-top
    from recovr_jax.run import validation  # pylint: disable=g-import-not-at-top
    config = run_config.RunConfig(
        methods=('recovr', 'bogus'), batch_size=0, num_sessions=0,
        jit_chunk_size=-1, max_error_share=2.0, user_seed=-1,
        reasoner=registry.config_of('flax_lm', checkpoint='/nonexistent'),
        output_dir=self.create_tempdir().full_path)
    with self.assertRaises(validation.ConfigError) as e:
      validation.validate(config, run_config.source(config))
    lines = str(e.exception).splitlines()
    for expected in ('unknown --methods bogus', '--batch_size must be >= 1',
                     '--num_sessions must be >= 1',
                     '--jit_chunk_size must be >= 0',
                     '--max_error_share must be in [0, 1]',
                     '--user_seed must be >= 0',
                     '--reasoner_checkpoint /nonexistent is not a directory'):
      self.assertLen([l for l in lines if expected in l], 1, lines)
    self.assertLen(lines, 7, lines)

  def test_the_command_line_prints_a_line_per_problem(self):
    proc = forked.run('experiments.run', '--batch_size=0', '--rrf_k=-1',
                      '--methods=recovr,bogus', '--window=0')
    self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
    self.assertIn('unknown --methods bogus; valid: recovr', proc.stderr)
    self.assertIn('Pass --helpshort to see the flags.', proc.stderr)
    self.assertNotIn('flags:', proc.stderr)  # no help dump
    errors = [l for l in proc.stderr.splitlines()
              if l.startswith('experiments.run: error: ')]
    self.assertLen(errors, 4, proc.stderr)
    for expected in ('window must be >= 1', 'rrf_k must be',
                     'unknown --methods bogus', '--batch_size must be >= 1'):
      self.assertLen([l for l in errors if expected in l], 1, errors)


class LibraryConfigTest(absltest.TestCase):
  """The tests run the library with ``tests.helpers.runs.config_of``; it
  must give what the command line's flags give."""

  def test_config_of_equals_the_flags_config(self):
    import dataclasses  # pylint: disable=g-import-not-at-top
    from absl import flags  # pylint: disable=g-import-not-at-top
    from absl.testing import flagsaver  # pylint: disable=g-import-not-at-top
    from experiments.common import run_flags  # pylint: disable=g-import-not-at-top
    from tests.helpers import runs  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    out = pathlib.Path(self.create_tempdir().full_path) / 'out'
    for overrides in ({}, dict(simulation='jit', methods=['recovr', 'ivr']),
                      dict(benchmark='v3', num_turns=2, noise_rate=0.1,
                           rrf_k=30),
                      dict(data='files', annotations='/x/a.csv',
                           clip_dir='/x/clip')):
      with self.subTest(overrides=overrides):
        with flagsaver.flagsaver(**runs._values(out, overrides)):  # pylint: disable=protected-access
          flagged = run_flags.config_from_flags()
        library = runs.tiny_config(out, **overrides)
        self.assertEqual(dataclasses.replace(library, flags_text=''),
                         dataclasses.replace(flagged, flags_text=''))
    with self.assertRaisesRegex(ValueError, 'no flag no_such_flag'):
      runs.tiny_config(out, no_such_flag=1)
    # The files source's one name, and its alias as the flag's value.
    files = dict(annotations='/x/a.csv', clip_dir='/x/clip')
    alias = runs.tiny_config(out, data='webvid_covr', **files)
    self.assertEqual(dataclasses.replace(alias, flags_text=''),
                     dataclasses.replace(runs.tiny_config(
                         out, data='files', **files), flags_text=''))
    self.assertEqual(alias.data.NAME, 'files')


class GroupedHelpTest(absltest.TestCase):

  def test_every_flag_of_the_run_is_in_one_group(self):
    from absl import flags  # pylint: disable=g-import-not-at-top
    from experiments.common import run_flags  # pylint: disable=g-import-not-at-top
    grouped = [n for _, names in run_flags.HELP_GROUPS for n in names]
    self.assertLen(set(grouped), len(grouped))  # none twice
    from experiments.common import run_flags  # pylint: disable=g-import-not-at-top
    # The settings' flags (whichever entry point defined them first) and
    # the run's own.
    by_module = flags.FLAGS.flags_by_module_dict()
    defined = {leaf.name for leaf in run_flags.LEAVES} | {
        f.name for f in by_module['experiments.common.run_flags']}
    self.assertEqual(set(grouped), defined)
    for name in grouped:  # every name is a flag
      self.assertIn(name, flags.FLAGS)

  def test_entry_points_on_the_run_group_their_own_flags(self):
    # Read from the sources: flag names are process-wide and two of these
    # scripts both define --output_json.
    for script, title in (('eval_reading', 'Reading benchmark'),
                          ('study', 'Study app'),
                          ('study_report', 'Study report'),
                          ('bench_study', 'Study benchmark')):
      with self.subTest(script=script):
        source = entry_points.path(script).read_text()
        own = set(re.findall(r"flags\.DEFINE_\w+\(\s*'(\w+)'", source))
        self.assertNotEmpty(own)
        group = source.split(f"(('{title}'")[1].split(')')[0]
        self.assertEqual(set(re.findall(r"'(\w+)'", group)), own)

  def test_help_of_an_entry_point_without_groups_exits_0(self):
    # absl's own --help exits 1, as if asking for help were an error.
    proc = forked.run('experiments.evaluate.compare_runs', '--help')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn('Compares one method across runs', proc.stdout)
    self.assertIn('--runs:', proc.stdout)

  def test_helpshort_of_an_entry_point_on_the_run_shows_its_own_flags(self):
    outs = {}
    for arg in ('--helpshort', '--help'):
      proc = forked.run('experiments.study', arg)
      self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
      outs[arg] = proc.stdout
    short = re.findall(r'^  --(\w+):', outs['--helpshort'], flags=re.M)
    self.assertCountEqual(short, ['port', 'host', 'allow_remote',
                                  'participants', 'instances',
                                  'participant_flow', 'frames_dir',
                                  'video_size', 'debrief'])
    self.assertIn('Every flag of experiments.run applies too',
                  outs['--helpshort'])
    self.assertIn('--num_turns:', outs['--help'])   # the runner's, in --help

  def test_helpshort_prints_the_groups_with_real_data_flags(self):
    proc = forked.run('experiments.run', '--helpshort')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    out = proc.stdout
    for heading in ('Benchmark and world:', 'Files (--data=files',
                    'Reasoner', 'Simulated user:', 'Running:', 'Outputs:'):
      self.assertIn(heading, out)
    self.assertIn('--annotations:', out)
    self.assertIn('--clip_dir:', out)
    self.assertIn("(default: the --benchmark preset's: v3: 4, v2: 4, v1: 1)",
                  out)
    self.assertIn('(default: grounded on --data=world, rules with', out)
    self.assertNotIn('issue #', out)


_QUICK = '''
import atexit, sys
from absl import logging
from experiments.common import cli
atexit.register(lambda: print('teardown ran', flush=True))
def main(argv):
  sys.stdout.write('written')  # no line end: held until flushed
  logging.warning('logged')
  return {result!r}
cli.run(main, quick_exit=lambda: {quick!r})
'''


class QuickExitTest(parameterized.TestCase):
  """A finished run ends at once (no teardown), its output flushed; one
  that failed, or may not end so, goes through absl's exit as before."""

  @parameterized.parameters((None, True, 0, False), (None, False, 0, True),
                            ('FAILED: x', True, 1, True))
  def test_exit(self, result, quick, code, teardown):
    env = {k: v for k, v in os.environ.items()
           if k != 'PYTHONUNBUFFERED'}  # so that only a flush writes
    proc = subprocess.run(
        [sys.executable, '-c', _QUICK.format(result=result, quick=quick)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    self.assertEqual(proc.returncode, code, proc.stderr[-2000:])
    self.assertIn('written', proc.stdout)
    self.assertIn('logged', proc.stderr)
    self.assertEqual('teardown ran' in proc.stdout, teardown)
