"""Every registered method under the host driver, the registry, the entropy
ask policy, and a method defined here run through the runner."""

import dataclasses
import json
import pathlib
import tempfile

from absl import flags
from absl.testing import absltest
import numpy as np

from recovr_jax.core import demotion
from recovr_jax.envs.world.user import simulated_user
from recovr_jax import methods
from recovr_jax.methods import base
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import asking
from tests.helpers import runs
from tests.helpers import toy_world


def _run(name, settings=base.Settings(), user_config=None, turns=3):
  _, env, _ = toy_world.env_for('sum')
  config = ranking.LoopConfig(num_turns=turns, list_length=20,
                              num_ids=len(env.gallery))
  user = simulated_user.SimulatedUser(
      user_config or simulated_user.UserConfig(drop_rate=0.2), seed=3)
  return env, toy_world.run_host(env, methods.make(name, settings),
                                   np.arange(24), user, config)


class RegistryTest(absltest.TestCase):

  def test_unknown_name_lists_the_valid_ones(self):
    with self.assertRaisesRegex(ValueError, "unknown method 'nope'; valid: "
                                'recovr, covr_only'):
      methods.make('nope')

  def test_register_twice_is_an_error(self):
    with self.assertRaisesRegex(ValueError, 'already registered'):
      methods.register('ivr', methods.REGISTRY['ivr'])

  def test_transplant_needs_a_single_list(self):
    with self.assertRaisesRegex(ValueError, 'single-list'):
      methods.rank_cap_transplant.RankCapped(methods.make('recovr'), 'x')


class AnchoredTest(absltest.TestCase):

  def test_rows_without_an_anchor_search_with_their_text(self):
    gallery = np.eye(3, dtype=np.float32)
    edits = np.full((3, 3), 0.5, np.float32)
    calls = []

    def compose(videos, texts):
      calls.append(len(videos))
      return videos + texts

    got = plan.anchored(gallery, compose, np.array([2, -1, 0]), edits)
    np.testing.assert_array_equal(got[0], [0.5, 0.5, 1.5])
    np.testing.assert_array_equal(got[1], edits[1])   # the text alone
    np.testing.assert_array_equal(got[2], [1.5, 0.5, 0.5])
    self.assertEqual(calls, [2])  # one call, the anchored rows only
    got = plan.anchored(gallery, compose, np.array([-1, -1, -1]), edits)
    np.testing.assert_array_equal(got, edits)
    self.assertEqual(calls, [2])  # no anchored row: not called


class EveryMethodTest(absltest.TestCase):
  """Each registered method runs at tiny size and keeps the protocol."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.results = {name: _run(name)[1] for name in methods.names()}

  def test_shared_turn_zero_and_shapes(self):
    first = self.results['recovr']
    for name, result in self.results.items():
      self.assertEqual(result.displayed.shape, (24, 4, 20), name)
      np.testing.assert_array_equal(result.displayed[:, 0],
                                    first.displayed[:, 0], err_msg=name)
      for rows in result.records:
        self.assertLen(rows, 4)
        self.assertEqual(rows[0]['turn'], 0)

  def test_stopped_sessions_carry_their_list(self):
    _, env, _ = toy_world.env_for('sum')
    target = np.asarray(env.target)[:24]
    for name, result in self.results.items():
      for i in range(24):
        for t in range(1, 4):
          if result.displayed[i, t - 1, 0] == target[i]:
            np.testing.assert_array_equal(result.displayed[i, t],
                                          result.displayed[i, t - 1])
            self.assertEqual(result.records[i][t]['action'], 'stopped',
                             name)

  def test_methods_differ(self):
    # Each method changes what is shown (no registered name is a no-op copy
    # of another; a few may coincide on 24 sessions of this tiny world).
    lists = {n: r.displayed[:, 1:].tobytes() for n, r in self.results.items()}
    self.assertGreater(len(set(lists.values())), len(lists) - 4)

  def test_rank_capped_methods_never_repeat_a_rejected_top1(self):
    for name, result in self.results.items():
      method = methods.make(name)
      if not method.rank_cap or getattr(method, 'placement', None) == (
          'current'):  # the current turn's lists only: a top-1 may return
        continue
      for i in range(24):
        seen = set()
        for t in range(4):
          top1 = int(result.displayed[i, t, 0])
          if t and result.records[i][t]['action'] != 'stopped':
            self.assertNotIn(top1, seen, f'{name} session {i} turn {t}')
          seen.add(top1)

  def test_baselines_ask_as_their_papers_do(self):
    # IVR, UMIVR and MERLIN ask with every list; history rewriting never.
    for name in ('ivr', 'umivr', 'merlin', 'umivr_rankcap'):
      for rows in self.results[name].records:
        for rec in rows[1:]:
          if rec['action'] != 'stopped':
            self.assertIsNotNone(rec['asked'], name)
    for rows in self.results['history_rewrite'].records:
      self.assertTrue(all(rec.get('asked') is None for rec in rows[1:]))
    # ReCoVR asks by default (the paper's protocol) and gets answers.
    recovr = [rec for rows in self.results['recovr'].records
              for rec in rows[1:] if rec['action'] != 'stopped']
    self.assertTrue(all(rec['asked'] for rec in recovr))
    self.assertIn('answer', [rec['action'] for rec in recovr])


class PlacementTest(absltest.TestCase):

  def test_recovr_current_is_recovr_under_the_papers_placement(self):
    _, env, _ = toy_world.env_for('sum')
    user = simulated_user.SimulatedUser(
        simulated_user.UserConfig(drop_rate=0.2), seed=3)
    config = ranking.LoopConfig(num_turns=3, list_length=20,
                                num_ids=len(env.gallery))
    run = lambda name, base: toy_world.run_host(
        env, methods.make(name), np.arange(24), user, base)
    current = run('recovr_current', config)
    np.testing.assert_array_equal(
        current.displayed, run('recovr', dataclasses.replace(
            config, rank_cap_placement='current')).displayed)
    self.assertFalse(np.array_equal(current.displayed,
                                    run('recovr', config).displayed))
    # Its own placement wins over the run's.
    np.testing.assert_array_equal(current.displayed, run(
        'recovr_current', dataclasses.replace(
            config, rank_cap_placement='all')).displayed)


class ReadsThroughTheReasonerTest(absltest.TestCase):
  """Which baselines read the user through the reasoning backend: only
  history_rewrite (its ``rewrite``); IVR, MERLIN and UMIVR do not, so their
  lists are the same under every backend (docs/reading.md)."""

  def test_only_history_rewrite_changes_with_the_reasoner(self):
    from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.benchmark import lexicon  # pylint: disable=g-import-not-at-top

    class Blind(rules.RulesReasoner):
      """The rules, except that its rewrite of any dialogue is empty."""

      def rewrite(self, dialogue):
        return [''] * len(dialogue)

    env, _ = _run('ivr')
    config = ranking.LoopConfig(num_turns=3, list_length=20,
                                num_ids=len(env.gallery))
    for name in ('history_rewrite', 'ivr', 'umivr', 'merlin'):
      lists = []
      for reasoner in (rules.RulesReasoner(lexicon), Blind(lexicon)):
        user = simulated_user.SimulatedUser(
            simulated_user.UserConfig(drop_rate=0.2), seed=3)
        result = toy_world.run_host(env, methods.make(name), np.arange(24),
                                      user, config, reasoner=reasoner)
        lists.append(np.asarray(result.displayed))
      self.assertEqual(np.array_equal(*lists), name != 'history_rewrite',
                       name)


class EntropyAskTest(absltest.TestCase):

  def test_entropy_policy_asks_within_budget_and_gets_answers(self):
    settings = base.Settings(ask=asking.AskPolicy(mode='entropy',
                                                  threshold=0.3, tau=0.05,
                                                  budget=1))
    _, result = _run('recovr', settings,
                     simulated_user.UserConfig(modify_threshold=0), turns=4)
    asked = [sum(rec.get('asked') is not None for rec in rows[1:])
             for rows in result.records]
    self.assertGreater(sum(asked), 0)
    self.assertLessEqual(max(asked), 1)  # the budget
    answers = [rec['action'] for rows in result.records for rec in rows[1:]
               if rec.get('question')]
    self.assertIn('answer', answers)
    _, never = _run('recovr', base.Settings(
        ask=asking.AskPolicy(mode='entropy', threshold=1.0, budget=3)))
    self.assertFalse(any(rec.get('asked') for rows in never.records
                         for rec in rows[1:]))


class ToyBaseline(base.Method):
  """A toy baseline for the README's example: the modification text
  composed with v_ref at every turn (feedback ignored)."""

  name = 'toy'

  def init(self, ctx, start):
    del ctx
    return start, plan.covr_plan(
        start.covr_query, np.full(len(start.reference), demotion.SIGMA_NEU))

  def step(self, ctx, state, obs):
    return state, plan.covr_plan(
        state.covr_query[obs.sessions],
        np.full(len(obs.sessions), demotion.SIGMA_NEU))


class DisplayNameTest(absltest.TestCase):

  def test_every_registered_method_has_a_distinct_display_name(self):
    shown = [methods.display_name(m) for m in methods.names()]
    self.assertLen(set(shown), len(shown))
    self.assertEqual(set(methods.DISPLAY_NAMES), set(methods.names()))
    self.assertContainsSubset(methods.MAIN, methods.names())

  def test_a_method_registered_with_or_without_one(self):
    methods.register('toy', ToyBaseline, display='Toy baseline')
    try:
      self.assertEqual(methods.display_name('toy'), 'Toy baseline')
    finally:
      methods.unregister('toy')
    self.assertEqual(methods.display_name('toy'), 'toy')
    self.assertNotIn('toy', methods.DISPLAY_NAMES)


class CustomMethodTest(absltest.TestCase):

  def test_registered_method_runs_through_the_runner(self):
    flags.FLAGS.mark_as_parsed()
    methods.register('toy', ToyBaseline, baseline=True)
    try:
      out = pathlib.Path(tempfile.mkdtemp()) / 'toy'
      runs.run_tiny(out, methods=['recovr', 'toy'])
    finally:
      methods.unregister('toy')
    metrics = json.loads((out / 'metrics.json').read_text())
    self.assertEqual(set(metrics), {'recovr', 'toy'})
    self.assertEqual(metrics['toy']['R@1'][0], metrics['recovr']['R@1'][0])
    # The toy never moves: every turn shows turn 0's list until it is found.
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    for row in rows:
      if row['method'] == 'toy':
        self.assertTrue(all(t['top10'] == row['turns'][0]['top10']
                            for t in row['turns']))
    boot = json.loads((out / 'bootstrap.json').read_text())
    self.assertEqual(boot['b'], 'toy')
    self.assertNotIn('toy', methods.names())


if __name__ == '__main__':
  absltest.main()
