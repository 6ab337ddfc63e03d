"""The drivers (recovr_jax/drivers): chosen in one place; the stepped
driver's lists equal the host driver's on the world too."""

from absl.testing import absltest
import numpy as np

from recovr_jax import drivers
from recovr_jax.drivers import host_driver
from recovr_jax.drivers import jit_driver
from recovr_jax.envs.files import files_source
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world import world_environment
from recovr_jax.envs.world import world_source
from recovr_jax import methods
from recovr_jax.methods import ivr
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.protocol import data_source
from recovr_jax.reasoning import rules
from recovr_jax.run import assemble
from recovr_jax.run import run_config
from tests.helpers import toy_world


class _Plain(data_source.Source):
  """A source with no optional capability (nothing is called)."""
  NAME = 'plain'
  problems = input_paths = build = user = vocabulary = None


class ChooseTest(absltest.TestCase):

  def test_one_place_picks_the_driver(self):
    world = world_source.WorldSource(world_source.WorldData())
    plain = _Plain(None)
    self.assertIsInstance(drivers.choose('host', world), host_driver.OnHost)
    self.assertIsInstance(drivers.choose('host', plain), host_driver.OnHost)
    self.assertIsInstance(drivers.choose('jit', world), jit_driver.Traced)
    self.assertIsInstance(drivers.choose('jit', plain), jit_driver.Stepped)
    with self.assertRaisesRegex(ValueError,
                                "unknown --simulation 'gpu'; valid: host, jit"):
      drivers.choose('gpu', world)
    self.assertEqual(tuple(drivers.NAMES), ('host', 'jit'))

  def test_capabilities(self):
    host, jit = drivers.choose('host', None), drivers.choose('jit', None)
    self.assertTrue(host.STEPWISE)
    self.assertFalse(jit.STEPWISE)
    self.assertTrue(jit.JOINT and jit.SHARDS)
    self.assertFalse(host.JOINT or host.SHARDS)
    # The jitted drivers draw the user's decisions as inside jit.
    self.assertEqual((drivers.user_draws('host'), drivers.user_draws('jit')),
                     (None, 'jax'))

  def test_a_method_without_a_jax_form_is_named(self):

    class HostOnly(ivr.IVR):  # a method written for the host loop only
      name = 'host_only_toy'

      def __init__(self, settings=methods.base.Settings()):
        super().__init__(settings)
        self.jax_form = None

    methods.register(HostOnly.name, HostOnly)
    self.addCleanup(methods.REGISTRY.pop, HostOnly.name)
    config = run_config.RunConfig(methods=('recovr', HostOnly.name),
                                  output_dir='x')
    problems = drivers.choose('jit', _Plain(None)).problems(config, None)
    self.assertEqual(problems, [
        "--simulation=jit: method 'host_only_toy' runs only in the host "
        'loop (it has no jax_form); change --methods or use '
        '--simulation=host'])
    self.assertEqual(drivers.choose('host', None).problems(config, None), [])


class CapabilitiesTest(absltest.TestCase):
  """A source's optional capabilities are interfaces it implements, and a
  source keeps no state between the runner's calls."""

  def test_each_source_states_what_it_offers(self):
    world = world_source.WorldSource(world_source.WorldData())
    real = files_source.FilesSource(files_source.FilesData())
    for capability, offered in (
        (data_source.TracedFace, (True, False)),
        (data_source.OwnMedia, (True, False)),
        (data_source.ScoresAsking, (True, False)),
        (data_source.ExtraOutputs, (False, True))):
      self.assertEqual((isinstance(world, capability),
                        isinstance(real, capability)), offered,
                       capability.__name__)
    # What a fresh run removes includes every file extra_outputs writes.
    self.assertEqual(real.OUTPUT_FILES,
                     ('user_phraser.json', 'text_truncation.json'))

  def test_a_source_holds_its_config_only(self):
    real = files_source.FilesSource(files_source.FilesData())
    self.assertEqual(list(vars(real)), ['config'])


class SteppedOnTheWorldTest(absltest.TestCase):
  """The stepped driver runs on any source: on the world it shows the
  lists, top scores and records of the host driver."""

  def test_stepped_equals_host(self):
    _, env, _ = toy_world.env_for('sum')
    config = run_config.RunConfig(methods=('recovr',), output_dir='x',
                                  jit_chunk_size=7)
    user = world_environment.attribute_user(
        simulated_user.SimulatedUser(simulated_user.UserConfig(), seed=3),
        env.attributes)
    ctx = plan.Context(gallery=env.gallery, captions=env.captions,
                       encode_text=env.encode_text, compose=env.compose,
                       reasoner=rules.RulesReasoner(lexicon))
    # (ReCoVR's avoid penalty on the world's attributes has no stepped
    # form: the world runs jit on its traced face; UMIVR steps.)
    method = methods.make('umivr', methods.base.Settings())
    loop = ranking.LoopConfig(num_turns=3, list_length=20,
                              num_ids=len(env.gallery))
    sessions = np.arange(12)
    results = {}
    for name, driver in (('host', host_driver.OnHost()),
                         ('stepped', jit_driver.Stepped())):
      run = assemble.Run(config=config, built=data_source.Built(env=env),
                         driver=driver, user=user, ctx=ctx)
      errors = {}
      results[name] = driver.run_batch(run, method, sessions, loop, name,
                                       errors)
      self.assertEqual(errors, {})
    host, stepped = results['host'], results['stepped']
    np.testing.assert_array_equal(stepped.displayed, host.displayed)
    np.testing.assert_allclose(stepped.top_scores, host.top_scores,
                               rtol=1e-6)
    self.assertEqual(
        [[r['action'] for r in recs] for recs in stepped.records],
        [[r['action'] for r in recs] for recs in host.records])
    self.assertGreater(len({tuple(d) for d in host.displayed[:, -1, :5]}), 1)

  def test_host_records_a_session_that_raises(self):
    _, env, _ = toy_world.env_for('sum')
    config = run_config.RunConfig(methods=('recovr',), output_dir='x')
    plain = world_environment.attribute_user(
        simulated_user.SimulatedUser(simulated_user.UserConfig(), seed=3),
        env.attributes)

    def user(session, *args):  # the second session's user fails
      if session == 1:
        raise RuntimeError('cannot answer')
      return plain(session, *args)

    ctx = plan.Context(gallery=env.gallery, captions=env.captions,
                       encode_text=env.encode_text, compose=env.compose,
                       reasoner=rules.RulesReasoner(lexicon))
    run = assemble.Run(config=config, built=data_source.Built(env=env),
                       driver=host_driver.OnHost(), user=user, ctx=ctx)
    errors = {}
    loop = ranking.LoopConfig(num_turns=2, list_length=20,
                              num_ids=len(env.gallery))
    result = run.driver.run_batch(run, run.method('recovr'), np.arange(3),
                                  loop, 'batch 0 of recovr', errors)
    self.assertEqual(list(errors), ['1'])
    self.assertIn('RuntimeError: cannot answer', errors['1'])
    self.assertTrue((result.displayed[1] == -1).all())
    self.assertTrue((result.displayed[[0, 2]] >= 0).all())
    self.assertEqual(result.records[1], [])


if __name__ == '__main__':
  absltest.main()
