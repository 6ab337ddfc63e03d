"""reasoning.registry: a backend is one module and one registry line."""

import json
import pathlib
import tempfile

from absl import flags
from absl.testing import absltest

from recovr_jax.envs.files import files_source
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world import world_source
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import rules
from tests.helpers import runs

WORLD = world_source.world_vocabulary(generator.WorldConfig())


class Shouting(rules.RulesReasoner):
  """The source's rules, with every search in capitals (the text encoder
  reads them as other words)."""

  def intent(self, requests):
    out = super().intent(requests)
    return [{**o, 'search': o['search'].upper()} for o in out]


class _Shouting(registry.Backend):
  """A toy backend written in a test: what adding one takes."""
  NAME = 'shouting'
  CONFIG = registry.CheckpointConfig  # it reads --reasoner_checkpoint

  def problems(self, config, vocab):
    if config.checkpoint is None:
      return ['--reasoner=shouting needs --reasoner_checkpoint']
    return []

  def inputs(self, config, vocab):
    return {'reasoner_checkpoint': config.checkpoint}

  def make(self, config, vocab, encode_text=None, **kwargs):
    return Shouting(vocab.rules().lexicon)


class RegistryTest(absltest.TestCase):

  def test_names_and_errors(self):
    self.assertEqual(registry.names()[:2], ('rules', 'grounded'))
    with self.assertRaisesRegex(ValueError, "unknown reasoner 'gpt'; valid: "
                                'rules, grounded'):
      registry.get('gpt')
    with self.assertRaisesRegex(ValueError, "--backends lists 'rules' twice"):
      registry.check_names(['rules', 'grounded', 'rules'])
    self.assertEqual(registry.or_list(['a', 'b', 'c']), 'a, b or c')
    # The readers of a setting: the backends whose config has its field.
    self.assertEqual(registry.reading('adapter'),
                     ('smollm2_world', 'grounded_smollm2'))
    self.assertEqual(registry.reading('wording'),
                     ('smollm2', 'smollm2_world', 'grounded_smollm2'))
    self.assertEqual(registry.reading('no_such_setting'), ())

  def test_what_each_source_offers(self):
    self.assertEqual(registry.offered(WORLD), registry.names())
    self.assertEqual(registry.offered(files_source.VOCABULARY),
                     ('rules', 'flax_lm', 'smollm2', 'smollm2_world'))
    self.assertEqual(
        registry.problems(registry.config_of('grounded'),
                          files_source.VOCABULARY),
        ['--reasoner=grounded is not offered on --data=files; valid '
         'there: rules, flax_lm, smollm2, smollm2_world'])
    self.assertEqual(registry.with_property('JITTED'),
                     ('rules', 'grounded', 'upper_bound'))
    self.assertEqual(registry.with_property('LEXICAL'), ('rules',))

  def test_backend_checks_before_any_load(self):
    self.assertRegex(registry.problems(registry.config_of(
        'grounded', options={'depth': 3}), WORLD)[0],
        '--grounded_options: unknown depth')
    self.assertRegex(registry.problems(registry.config_of(
        'grounded', options={'lm_spans': 'always'}), WORLD)[0],
        "--grounded_options: lm_spans must be one of .*'agree'.*got 'always'")
    # An option that qualifies another is refused without it.
    self.assertRegex(registry.problems(registry.config_of(
        'grounded', options={'lm_tuned': True}), WORLD)[0],
        '--grounded_options: lm_tuned changes nothing without lm_spans')
    self.assertRegex(registry.problems(registry.config_of(
        'grounded', options={'lm_spans': 'veto', 'head_spans': 'veto'}),
                                       WORLD)[0],
        'lm_spans and head_spans are two second sources; give one')
    self.assertEqual(registry.problems(registry.config_of(
        'grounded', options={'head_spans': 'veto', 'head_min_prob': 0.2}),
                                       WORLD), [])
    self.assertRegex(registry.problems(registry.config_of(
        'flax_lm'), files_source.VOCABULARY)[0],
        '--reasoner=flax_lm on --data=files needs '
        '--reasoner_checkpoint')
    self.assertRegex(registry.problems(registry.config_of(
        'smollm2', few_shot=2),
        files_source.VOCABULARY)[0],
        '--few_shot: --data=files has no examples to draw')
    missing = tempfile.mkdtemp()
    self.assertRegex(registry.problems(registry.config_of(
        'smollm2_world', adapter=missing),
        WORLD)[0], 'the adapter .* is missing')

  def test_an_unknown_reasoner_is_named_before_any_work(self):
    flags.FLAGS.mark_as_parsed()
    out = pathlib.Path(tempfile.mkdtemp()) / 'unknown'
    # The layout's and the jitted driver's checks ask the registry too:
    # they leave an unknown name to the reasoner check.
    with self.assertRaisesRegex(Exception, "unknown --reasoner 'gpt'; "
                                'valid: rules, grounded'):
      runs.run_tiny(out, methods=['recovr'], reasoner='gpt',
                        simulation='jit', benchmark='v2',
                        describe_layout=True)

  def test_registered_backend_runs_through_the_runner(self):
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    with registry.registered(_Shouting()):
      self.assertIn('shouting', registry.names())
      with self.assertRaisesRegex(Exception, 'needs --reasoner_checkpoint'):
        runs.run_tiny(root / 'refused', methods=['recovr'],
                          reasoner='shouting')
      self.assertFalse((root / 'refused' / 'metrics.json').exists())
      out = root / 'shouting'
      runs.run_tiny(out, methods=['recovr'], reasoner='shouting',
                        reasoner_checkpoint=str(root))
    self.assertNotIn('shouting', registry.names())
    resolved = json.loads((out / 'resolved_config.json').read_text())
    self.assertIn('reasoner_checkpoint', resolved['files'])
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    searches = [t['search'] for r in rows for t in r['turns'][1:]
                if t.get('search')]
    self.assertNotEmpty(searches)
    self.assertTrue(all(s == s.upper() for s in searches))


if __name__ == '__main__':
  absltest.main()
