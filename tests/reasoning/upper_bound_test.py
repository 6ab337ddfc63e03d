"""``--reasoner=upper_bound``: the simulated user's own meaning of its
words, an upper bound on reading; never chosen unless named, and labelled
wherever it shows."""

import pathlib

from absl.testing import absltest
import numpy as np

from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import upper_bound
from recovr_jax.run import run_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


class UpperBoundTest(absltest.TestCase):

  def test_it_reads_exactly_what_the_user_meant(self):
    # In the user's own words, test phrasings and surface noise included:
    # every value named is read, and nothing else.
    words = lexicon.for_attributes(7)
    meanings = simulated_user.meanings(words)
    reasoner = registry.get('upper_bound').make(
        registry.config_of('upper_bound'), _Vocab(words))
    rng = np.random.default_rng(0)
    user = simulated_user.SimulatedUser(simulated_user.UserConfig(
        language='own_v3', noise_rate=0.2, style='paper'), seed=1)
    said = 0
    for session in range(200):
      target, shown = rng.integers(0, 3, 7), rng.integers(0, 3, 7)
      fb = user.respond(session, 1, 1, 2, target, shown)
      if fb.action == 'stop':
        continue
      said += 1
      self.assertEqual(reasoner.feedback_values(fb.text), fb.mentioned,
                       fb.text)
    self.assertGreater(said, 150)
    self.assertIs(simulated_user.meanings(words), meanings)
    # The rules reader, on the same words, reads far less (the bound is
    # not the rules reader under another name).
    rules = registry.get('rules').make(registry.config_of('rules'),
                                       _Vocab(words))
    self.assertNotEqual(rules.reader, reasoner.reader)

  def test_never_chosen_unless_named_and_labelled(self):
    # Not a default (world, files), in no flagfile, in no suite.
    from recovr_jax.envs.files import files_source  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world import world_source  # pylint: disable=g-import-not-at-top
    for data in (world_source.WorldData.preset('v3'),
                 world_source.WorldData.preset('v1'),
                 world_source.WorldData.preset(
                     'v3', {'describe_layout': True}),
                 files_source.FilesData()):
      config = run_config.RunConfig(methods=('recovr',), data=data,
                                    output_dir='unused')
      self.assertNotEqual(run_config.source(config).default_reasoner(),
                          upper_bound.NAME)
    named = [p.name for p in (ROOT / 'experiments' / 'flagfiles').iterdir()
             if p.is_file() and upper_bound.NAME in p.read_text()]
    self.assertEqual(named, [])
    from recovr_jax.analysis import paper_claims  # pylint: disable=g-import-not-at-top
    self.assertNotIn(upper_bound.NAME, repr(paper_claims.FIDELITY_PARTS))
    self.assertIn('upper bound on reading', upper_bound.LABEL)
    # Named, the report says what it is.
    import types  # pylint: disable=g-import-not-at-top
    from recovr_jax.run import outputs  # pylint: disable=g-import-not-at-top
    config = run_config.RunConfig(
        methods=('recovr',), data=world_source.WorldData.preset('v3'),
        output_dir='unused', reasoner=registry.config_of(upper_bound.NAME))
    header = outputs._header(  # pylint: disable=protected-access
        config, types.SimpleNamespace(searchable=300), 12, 'the world')
    self.assertIn(f'**Upper bound on reading**: {upper_bound.LABEL}', header)


class DriversTest(absltest.TestCase):

  def test_the_jitted_driver_reads_as_the_host_does(self):
    from tests.helpers import runs  # pylint: disable=g-import-not-at-top
    root = pathlib.Path(self.create_tempdir().full_path)
    for name, extra in (('host', dict(user_draws='jax')),
                        ('jit', dict(simulation='jit'))):
      self.assertIsNone(runs.run_tiny(
          root / name, methods=['recovr', 'umivr'],
          reasoner=upper_bound.NAME, **extra))
    self.assertEqual((root / 'host' / 'ranks.csv').read_text(),
                     (root / 'jit' / 'ranks.csv').read_text())
    self.assertIn('**Upper bound on reading**',
                  (root / 'jit' / 'report.md').read_text())
    # experiments.evaluate.reader_share reads them (the same sessions).
    from tests.helpers import forked  # pylint: disable=g-import-not-at-top
    out = root / 'share.md'
    proc = forked.run('experiments.evaluate.reader_share',
                      f'--runs=a={root / "host"},b={root / "jit"}',
                      '--resamples=50', f'--output_md={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    text = out.read_text()
    self.assertIn('| a | recovr |', text)
    self.assertIn('| b | less_drift |', text)
    proc = forked.run('experiments.evaluate.reader_share',
                      f'--runs=a={root / "host"},a={root / "jit"}')
    self.assertEqual(proc.returncode, 1)
    self.assertIn("--runs: the label 'a' is given twice", proc.stderr)


class _Vocab:
  """What the world offers the two backends here."""

  def __init__(self, words):
    self._words = words
    self.meanings = lambda: simulated_user.meanings(words)
    self.grounding = None

  def rules(self):
    from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
    return rules.RulesReasoner(self._words)


if __name__ == '__main__':
  absltest.main()
