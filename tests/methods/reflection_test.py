"""State Reflection that acts (issue #13): constraints reach the next turn,
the avoid penalty, rank-cap placement and firing, and the baselines'
questions (docs/definitions.md §§1, 3, 5, 6)."""

import dataclasses

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import demotion
from recovr_jax.core import list_metrics
from recovr_jax.core import retrieval
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax import methods
from recovr_jax.methods import base
from recovr_jax.methods import umivr
from recovr_jax.protocol import plan
from recovr_jax.protocol import records
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import rules
from recovr_jax.run import reporting
from tests.helpers import toy_world

CAPTIONS = ('two large blue circles moving left on grass in daylight',
            'two large red circles moving left on grass in daylight',
            'one small red square moving right on sand at night',
            'three large green triangles moving up on water at sunset')


def _hash_encoder(texts):
  """A deterministic stand-in text encoder (the tests read texts, not
  retrieval quality)."""
  out = []
  for t in texts:
    rng = np.random.default_rng(abs(hash(t)) % (2**32))
    v = rng.normal(size=8)
    out.append(v / np.linalg.norm(v))
  return np.asarray(out, np.float32)


def _ctx():
  gallery = _hash_encoder(CAPTIONS)
  return plan.Context(
      gallery=gallery, captions=CAPTIONS, encode_text=_hash_encoder,
      compose=lambda r, e: (r + e) / np.linalg.norm(r + e, axis=1,
                                                    keepdims=True),
      reasoner=rules.RulesReasoner(lexicon))


def _start(method, ctx):
  return method.init(ctx, plan.Start(
      reference=np.array([3]), modification=('make it blue',),
      covr_query=ctx.gallery[[3]]))


def _obs(feedback, shown):
  return plan.Observation(
      sessions=np.array([0]), feedback=(feedback,), action=('modify',),
      shown=np.array([shown]), shown_caption=(CAPTIONS[shown],))


class ConstraintsTest(absltest.TestCase):

  def test_kept_constraint_enters_the_next_t2v_query(self):
    ctx = _ctx()
    for name, kept in (('recovr', True), ('no_keep', False),
                       ('no_reflection', False)):
      method = methods.make(name)
      state, _ = _start(method, ctx)
      state, _ = method.step(ctx, state, _obs('make them red', 0))
      # A rejection naming only the shape: the colour comes from memory.
      state, turn_plan = method.step(ctx, state, _obs('No. I want squares', 3))
      search = turn_plan.records[0]['search']
      parsed = lexicon.parse(search)
      self.assertEqual(parsed.get(lexicon.A.index('colour')) ==
                       lexicon.parse('red')[lexicon.A.index('colour')],
                       kept, (name, search))
      self.assertIn(lexicon.A.index('shape'), parsed)

  def test_reflection_off_leaves_constraints_empty_and_sigma_neutral(self):
    ctx = _ctx()
    method = methods.make('no_reflection')
    state, _ = _start(method, ctx)
    for feedback, shown in (('No. I want squares', 0), ('make them red', 1),
                            ('not this one', 2)):
      state, turn_plan = method.step(ctx, state, _obs(feedback, shown))
      self.assertEqual(int(turn_plan.sigma[0]), demotion.SIGMA_NEU)
      self.assertIsNone(turn_plan.penalty)
      self.assertEqual(method.memory(state, 0).keep, ())
      self.assertEqual(method.memory(state, 0).avoid, ())
    # With reflection on, the same feedback writes both kinds.
    method = methods.make('recovr')
    state, _ = _start(method, ctx)
    state, turn_plan = method.step(ctx, state, _obs('make them red', 0))
    self.assertEqual(int(turn_plan.sigma[0]), demotion.SIGMA_POS)
    self.assertEqual(method.memory(state, 0).keep, ('colour: red',))
    self.assertEqual(method.memory(state, 0).avoid, ('colour: blue',))

  def test_avoided_value_penalises_matching_candidates(self):
    ctx = _ctx()
    settings = base.Settings(avoid_penalty=0.25)
    for name, penalised in (('recovr', True), ('no_avoid', False)):
      method = methods.make(name, settings)
      state, _ = _start(method, ctx)
      state, turn_plan = method.step(ctx, state, _obs('make them red', 0))
      # Constraints written at a turn shape the next turn's lists.
      self.assertFalse(np.any(turn_plan.penalty) if turn_plan.penalty is not None
                       else False)
      state, turn_plan = method.step(ctx, state, _obs('make them small', 1))
      if not penalised:
        self.assertIsNone(turn_plan.penalty)
        continue
      # 'colour: blue' is avoided: only video 0 is blue.
      np.testing.assert_allclose(turn_plan.penalty[0], [0.25, 0, 0, 0])

  def test_penalty_lowers_the_candidate_in_retrieval(self):
    gallery = jnp.eye(4, dtype=jnp.float32)
    query = jnp.array([[0.9, 0.8, 0.1, 0.0]], jnp.float32)
    ids, _ = retrieval.retrieve(query, gallery, 4)
    chex.assert_trees_all_equal(ids, jnp.array([[0, 1, 2, 3]]))
    penalty = jnp.array([[0.25, 0.0, 0.0, 0.0]], jnp.float32)
    ids, scores = retrieval.retrieve(query, gallery, 4, penalty=penalty)
    chex.assert_trees_all_equal(ids, jnp.array([[1, 0, 2, 3]]))
    chex.assert_trees_all_close(scores, jnp.array([[0.8, 0.65, 0.1, 0.0]]))
    with self.assertRaisesRegex(ValueError, 'penalty'):
      retrieval.retrieve(query, gallery, 4, penalty=jnp.zeros((1, 3)))


def _state(config, shown):
  state = ranking.init_state(config)
  return dataclasses.replace(
      state, top1=state.top1.at[0].set(shown[0]),
      shown_ids=jnp.asarray(shown, jnp.int32),
      shown_scores=jnp.linspace(1.0, 0.5, len(shown)).astype(jnp.float32),
      turn=jnp.array(0, jnp.int32))


class PlacementTest(absltest.TestCase):
  """Rank-cap on every ring list and the fused list (default) against the
  current turn's lists only (the paper's sentence)."""

  def test_rejected_top1_returns_only_under_current(self):
    gallery = jnp.eye(20, dtype=jnp.float32)

    def query(order):
      q = np.zeros(20, np.float32)
      q[list(order)] = np.linspace(1.0, 0.5, len(order))
      return q

    results = {}
    for placement in ranking.PLACEMENTS:
      config = ranking.LoopConfig(num_turns=2, window=3, num_channels=2,
                                  list_length=6, rank_cap_placement=placement)
      # Turn 0: both channels rank video 0 first.
      q0 = jnp.asarray(np.stack([query(range(6))] * 2))
      start = ranking.TurnInputs(queries=q0, valid=jnp.array([True, True]),
                                 exclude=jnp.array(-1),
                                 sigma=jnp.array(demotion.SIGMA_NEU),
                                 stop=jnp.array(False))
      state = jax.jit(ranking.start_step, static_argnums=0)(
          config, gallery, ranking.init_state(config), start)
      # Turn 1: video 0 rejected (sigma neg), second in both new lists.
      q1 = jnp.asarray(np.stack([query([1, 0, 3, 4, 5, 6]),
                                 query([2, 0, 7, 8, 9, 10])]))
      turn = dataclasses.replace(start, queries=q1,
                                 sigma=jnp.array(demotion.SIGMA_NEG))
      results[placement] = jax.jit(ranking.turn_step, static_argnums=0)(
          config, gallery, state, turn)
    # Default: capped in every list and after fusion, it is not shown first.
    self.assertEqual(int(results['all'].shown_ids[5]), 0)
    # Current: turn 0's lists still rank it first, and fusion brings it back.
    self.assertEqual(int(results['current'].shown_ids[0]), 0)
    for state in results.values():
      self.assertTrue(bool(state.fired[1]))


class UnreflectedRankCapTest(absltest.TestCase):
  """The paper's reading of rank-cap without State Reflection: only
  stagnation demotes (docs/definitions.md §3)."""

  def test_just_rejected_top1_keeps_its_place_until_it_stagnates(self):
    gallery = jnp.eye(8, dtype=jnp.float32)
    q = np.zeros((2, 8), np.float32)
    q[:, :4] = [1.0, 0.9, 0.8, 0.7]  # video 0 first in both channels
    inputs = ranking.TurnInputs(queries=jnp.asarray(q),
                                valid=jnp.array([True, True]),
                                exclude=jnp.array(-1),
                                sigma=jnp.array(demotion.SIGMA_NEU),
                                stop=jnp.array(False))
    top1 = {}
    for reading in (True, False):
      config = ranking.LoopConfig(num_turns=2, window=3, list_length=6,
                                  cap_just_rejected=reading)
      state = jax.jit(ranking.start_step, static_argnums=0)(
          config, gallery, ranking.init_state(config), inputs)
      turns = []
      for _ in range(2):
        state = jax.jit(ranking.turn_step, static_argnums=0)(
            config, gallery, state, inputs)
        turns.append(int(state.shown_ids[0]))
      top1[reading] = turns
    # Today's reading: rejected at turn 1, capped at kappa_neu at once.
    self.assertNotEqual(top1[True][0], 0)
    # The paper's: shown again at turn 1 (no cap of its own); at turn 2 it
    # has stagnated (top-1 twice) and the earlier showing demotes it.
    self.assertEqual(top1[False], [0, top1[False][1]])
    self.assertNotEqual(top1[False][1], 0)

  def test_only_methods_without_reflection_change(self):
    paper = base.Settings(unreflected_rank_cap='stagnation')
    loop = ranking.LoopConfig()
    self.assertFalse(methods.make('no_reflection', paper).ranking(loop)
                     .cap_just_rejected)
    self.assertTrue(methods.make('no_reflection').ranking(loop)
                    .cap_just_rejected)
    for name in ('recovr', 'no_keep', 'umivr_rankcap'):
      self.assertTrue(methods.make(name, paper).ranking(loop)
                      .cap_just_rejected, name)
    with self.assertRaisesRegex(ValueError, 'unreflected_rank_cap must be'):
      base.Settings(unreflected_rank_cap='never')


class FiringTest(absltest.TestCase):

  def test_firing_statistics_match_a_plain_count(self):
    _, env, _ = toy_world.env_for('sum')
    config = ranking.LoopConfig(num_turns=4, list_length=20,
                                num_ids=len(env.gallery))
    user = simulated_user.SimulatedUser(simulated_user.UserConfig(), seed=4)
    result = toy_world.run_host(env, methods.make('recovr'),
                                  np.arange(24), user, config)
    fired = records.fired(result.records, config.num_turns)
    targets = np.asarray(env.target)[:24]
    got = reporting.firing_table(result.displayed, targets, fired)
    # The plain count: over turns the user did not stop before.
    n_active = n_fired = n_improved = 0
    for i in range(24):
      ranks = [list(row).index(targets[i]) + 1 if targets[i] in row else 21
               for row in result.displayed[i]]
      for t in range(1, config.num_turns + 1):
        if result.records[i][t]['action'] == 'stopped':
          continue
        n_active += 1
        if result.records[i][t]['rank_cap_fired']:
          n_fired += 1
          n_improved += ranks[t] < ranks[t - 1]
    self.assertEqual(got['fired']['total'], n_active)
    self.assertEqual(got['fired']['count'], n_fired)
    self.assertEqual(got['improved']['total'], n_fired)
    self.assertEqual(got['improved']['count'], n_improved)
    self.assertGreater(n_fired, 0)
    # Cumulative Hits@K: the target in the top K of any list so far.
    ranks = np.asarray(list_metrics.target_ranks(result.displayed, targets))
    for k in (1, 5):
      want = [np.mean([(ranks[i, :t + 1] <= k).any() for i in range(24)])
              for t in range(config.num_turns + 1)]
      np.testing.assert_allclose(list_metrics.cumulative_hits(ranks, k), want,
                                 rtol=1e-6)


def _split_entropy_reference(scores, values, tau):
  """docs/definitions.md §5's rule, group by group, in NumPy."""
  valid = np.isfinite(scores)
  z = np.where(valid, scores / tau, -np.inf)
  p = np.exp(z - z[valid].max()) * valid
  p = p / p.sum()
  out = []
  for row in values:
    total = 0.0
    for v in set(row[valid].tolist()):
      group = valid & (row == v)
      mass = p[group].sum()
      n = group.sum()
      if n > 1:
        q = p[group] / mass
        total += mass * -(q * np.log(q)).sum() / np.log(n)
    out.append(total)
  return np.asarray(out)


class UMIVRQuestionTest(absltest.TestCase):

  def test_rule_matches_numpy_reference(self):
    rng = np.random.default_rng(0)
    for _ in range(20):
      k, a = 8, 5
      scores = np.sort(rng.normal(size=k))[::-1].astype(np.float32)
      scores[rng.integers(4, k + 1):] = -np.inf
      values = rng.integers(-1, 3, size=(a, k))
      got = asking.expected_split_entropy(scores, values, 0.5)
      np.testing.assert_allclose(got, _split_entropy_reference(
          scores, values, 0.5), rtol=1e-5, atol=1e-6)

  def test_hand_cases(self):
    scores = np.array([[1.0, 0.9, 0.8, 0.7]], np.float32)
    ids = np.array([[0, 1, 2, 3]])
    # Attribute 0: one value for all (splits nothing); attribute 1: four
    # values (each answer leaves one candidate: entropy 0); attribute 2:
    # the top two apart, the last two together.
    values = np.array([[0, 0, 0], [0, 1, 1], [0, 2, 2], [0, 3, 2]])
    best = umivr.choose_attributes(ids, scores, values, 0.05)
    self.assertEqual(best.tolist(), [1])
    best = umivr.choose_attributes(ids, scores, values[:, [0, 2]], 0.05)
    self.assertEqual(best.tolist(), [1])
    # Normalised entropy: two even pairs score as high as no split.
    h = asking.expected_split_entropy(scores[0], np.array(
        [[0, 0, 0, 0], [0, 0, 1, 1]]), 100.0)
    np.testing.assert_allclose(h, [1.0, 1.0], atol=1e-4)
    # Padding takes no part; a caption with no value is its own group.
    h = asking.expected_split_entropy(np.array([1.0, 1.0, -np.inf]),
                                      np.array([[-1, 0, 0]]), 1.0)
    np.testing.assert_allclose(h, [0.0], atol=1e-6)

  def test_umivr_asks_by_the_rule_and_ivr_about_the_top_result(self):
    ctx = _ctx()
    shown = base.Shown(sessions=np.array([0]), ids=np.array([[0, 1, 2, 3]]),
                       scores=np.array([[0.9, 0.89, 0.5, 0.4]], np.float32),
                       asked=np.array([0]))
    um = methods.make('umivr')
    q = um.question(ctx, None, shown)[0]
    values = ctx.reasoner.caption_values(CAPTIONS)
    want = umivr.choose_attributes(shown.ids, shown.scores, values,
                                   um.settings.question_tau)[0]
    self.assertEqual(lexicon.question_attribute(q), int(want))
    # IVR: about the shown top result's caption, one attribute per turn.
    ivr = methods.make('ivr')
    asked = [ivr.question(ctx, None, dataclasses.replace(
        shown, asked=np.array([n])))[0] for n in range(3)]
    self.assertEqual([lexicon.question_attribute(q) for q in asked],
                     [0, 1, 2])
    self.assertIn('circles', asked[0])
    # MERLIN: about the anchor (the reference video, id 3).
    merlin = methods.make('merlin')
    state, _ = _start(merlin, ctx)
    q = merlin.question(ctx, state, shown)[0]
    self.assertIn('triangles', q)
    # History rewriting asks nothing.
    self.assertEqual(methods.make('history_rewrite').question(
        ctx, None, shown), [None])


if __name__ == '__main__':
  absltest.main()
