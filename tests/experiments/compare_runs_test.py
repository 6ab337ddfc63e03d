"""experiments.evaluate.compare_runs on hand-made trajectories, and the chat
reasoners' flag errors before any work."""

import dataclasses
import json
import pathlib
import tempfile

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver

from experiments.evaluate import compare_runs
from recovr_jax.envs.files import files_source
from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import registry
from recovr_jax.run import run_config
from recovr_jax.run import validation
from tests.helpers import runs


def _write_run(d: pathlib.Path, top1s, targets, method='recovr'):
  d.mkdir(parents=True)
  with open(d / 'trajectories.jsonl', 'w') as f:
    for s, (tops, target) in enumerate(zip(top1s, targets)):
      f.write(json.dumps({'method': method, 'session': s, 'target': target,
                          'error': None,
                          'turns': [{'top10': [t, 99]} for t in tops]}) + '\n')


class CompareRunsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    flags.FLAGS.mark_as_parsed()
    self.root = pathlib.Path(tempfile.mkdtemp())
    _write_run(self.root / 'a', [[1, 7], [2, 2], [3, 3]], [7, 2, 5])
    _write_run(self.root / 'b', [[7, 7], [2, 2], [5, 5]], [7, 2, 5])

  def _both_methods_run(self):
    """A run of ``base`` (run a's hits) and ``recovr`` (run b's)."""
    d = self.root / 'both'
    _write_run(d, [[1, 7], [2, 2], [3, 3]], [7, 2, 5], method='base')
    with open(self.root / 'b' / 'trajectories.jsonl') as f:
      (d / 'trajectories.jsonl').open('a').write(f.read())
    return d

  def test_table_matches_a_hand_count(self):
    out = self.root / 'c.md'
    with flagsaver.flagsaver(runs=[str(self.root / 'a'),
                                   str(self.root / 'b')],
                             output_md=str(out), resamples=200):
      compare_runs.main(['x'])
    text = out.read_text()
    # a: T0 hits 1/3 (session 1), T1 2/3; b: T0 3/3, T1 3/3.
    self.assertIn('| a | 33.3 | 66.7 | - | - |', text)
    self.assertIn('| b | 100.0 | 100.0 | - | - |', text)
    self.assertIn('| b | +66.7 [', text)

  def test_an_unfinished_or_cut_run_is_refused_naming_it(self):
    runs = [str(self.root / 'a'), str(self.root / 'b')]
    (self.root / 'b' / 'INCOMPLETE').write_text('')
    with flagsaver.flagsaver(runs=runs, resamples=10):
      with self.assertRaisesRegex(app.UsageError, f'--runs: {self.root / "b"}'
                                  ': its run has not finished'):
        compare_runs.main(['x'])
    (self.root / 'b' / 'INCOMPLETE').unlink()
    path = self.root / 'b' / 'trajectories.jsonl'
    path.write_text(path.read_text()[:-20])
    with flagsaver.flagsaver(runs=runs, resamples=10):
      with self.assertRaisesRegex(app.UsageError, f'--runs: {path}, line 3: '
                                  'the last line has no newline'):
        compare_runs.main(['x'])

  def test_first_method_compares_two_methods_of_one_run(self):
    d = self._both_methods_run()
    out = self.root / 'm.md'
    with flagsaver.flagsaver(runs=[str(d), str(d)], labels=['base', 'new'],
                             first_method='base', method='recovr',
                             output_md=str(out), resamples=200):
      compare_runs.main(['x'])
    text = out.read_text()
    self.assertIn('recovr (first run: base)', text)
    self.assertIn('| base | 33.3 | 66.7 | - | - |', text)
    self.assertIn('| new | +66.7 [', text)

  def test_a_run_twice_with_one_method_is_refused(self):
    a = str(self.root / 'a')
    with flagsaver.flagsaver(runs=[a, a], resamples=200):
      with self.assertRaisesRegex(app.UsageError, 'a run twice with the '
                                  'same method'):
        compare_runs.main(['x'])
    with flagsaver.flagsaver(runs=[a, str(self.root / 'b')],
                             labels=['x', 'x'], resamples=200):
      with self.assertRaisesRegex(app.UsageError, 'two runs share a label'):
        compare_runs.main(['x'])

  def test_default_labels_of_one_run_name_the_methods(self):
    d = self._both_methods_run()
    out = self.root / 'n.md'
    with flagsaver.flagsaver(runs=[str(d), str(d)], first_method='base',
                             method='recovr', output_md=str(out),
                             resamples=200):
      compare_runs.main(['x'])
    text = out.read_text()
    self.assertIn('| both (base) | 33.3 | 66.7 | - | - |', text)
    self.assertIn('| both (recovr) | +66.7 [', text)

  def test_grounded_reasoner_refused_on_real_data(self):
    c = run_config.RunConfig(methods=('recovr',),
                             output_dir=tempfile.mkdtemp(),
                             data=files_source.FilesData(),
                             reasoner=registry.config_of('grounded'))
    with self.assertRaisesRegex(validation.ConfigError, '--reasoner=grounded'):
      validation.validate(c, run_config.source(c))

  def test_other_sessions_are_refused(self):
    _write_run(self.root / 'd', [[7, 7], [2, 2], [5, 5]], [7, 2, 6])
    with flagsaver.flagsaver(runs=[str(self.root / 'a'),
                                   str(self.root / 'd')]):
      with self.assertRaisesRegex(app.UsageError, 'other sessions'):
        compare_runs.main(['x'])

  def test_resamples_are_checked_before_the_runs_load(self):
    with flagsaver.flagsaver(runs=['/nonexistent/a', '/nonexistent/b'],
                             resamples=0):
      with self.assertRaisesRegex(app.UsageError,
                                  '--resamples must be >= 1, got 0'):
        compare_runs.main(['x'])


class ChatReasonerFlagsTest(absltest.TestCase):

  def test_bad_chat_inputs_fail_before_work(self):
    base = run_config.RunConfig(methods=('recovr',),
                                output_dir=tempfile.mkdtemp(),
                                reasoner=registry.config_of('smollm2'))
    cases = [
        (dict(checkpoint=tempfile.mkdtemp()),
         'not a Llama directory with a chat template'),
        (dict(few_shot=-1), '--few_shot must be >= 0'),
        (dict(batch_size=0), '--reasoner_batch must be >= 1'),
    ]
    for overrides, message in cases:
      with self.subTest(message=message):
        c = dataclasses.replace(base, reasoner=dataclasses.replace(
            base.reasoner, **overrides))
        with self.assertRaisesRegex(validation.ConfigError, message):
          validation.validate(c, run_config.source(c))
    self.assertEqual(run_config.with_setting(base, 'prompt_wording', 2)
                     .reasoner.wording, 2)
    # A backend's config, as a --sweep or --suite value gives it.
    rules = run_config.with_setting(base, 'reasoner',
                                    registry.config_of('rules'))
    self.assertEqual(rules.reasoner, registry.ReasonerConfig('rules'))
    # A backend's name: its config, with the settings the two share.
    swapped = run_config.with_setting(
        run_config.with_setting(base, 'prompt_wording', 3), 'reasoner',
        'smollm2_world')
    self.assertEqual((type(swapped.reasoner), swapped.reasoner.wording),
                     (chat_lm.AdaptedChatConfig, 3))
    with self.assertRaisesRegex(ValueError, '--prompt_wording is read by '
                                '--reasoner=smollm2, .* not --reasoner=rules'):
      run_config.with_setting(run_config.with_setting(base, 'reasoner',
                                                      'rules'),
                              'prompt_wording', 2)

  def test_a_reasoner_flag_its_reasoner_does_not_read(self):
    with self.assertRaisesRegex(
        validation.ConfigError, '--reasoner_adapter is for --reasoner='
        'smollm2_world or grounded_smollm2, not --reasoner=rules'):
      runs.config_of(reasoner='rules', reasoner_adapter='/nonexistent',
                     output_dir=tempfile.mkdtemp())
    chat = runs.config_of(reasoner='smollm2_world', prompt_wording=2,
                          reasoner_batch=8, output_dir=tempfile.mkdtemp())
    self.assertEqual(chat.reasoner, chat_lm.AdaptedChatConfig(
        name='smollm2_world', wording=2, batch_size=8))


if __name__ == '__main__':
  absltest.main()
