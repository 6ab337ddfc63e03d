"""Tests of the jitted driver against the host driver."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from recovr_jax.drivers import jit_runner
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.benchmark import words
from recovr_jax.envs.world.face import phrase_table
from recovr_jax.envs.world.face import traced_face
from recovr_jax.envs.world.user import simulated_user
from recovr_jax import methods
from recovr_jax.protocol import ranking
from recovr_jax.protocol import traced
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas
from tests.helpers import toy_world

class DecideTest(absltest.TestCase):

  def test_policy(self):
    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.key(1), 400)
    config = simulated_user.UserConfig()
    decide = jax.jit(jax.vmap(simulated_user.decide, in_axes=(0, 0, 0, None)),
                     static_argnums=3)
    target = toy_world.COMBOS[rng.integers(len(toy_world.COMBOS), size=400)]
    shown = toy_world.COMBOS[rng.integers(len(toy_world.COMBOS), size=400)]
    action, named, _ = map(np.asarray, decide(keys, target, shown, config))
    diff = target != shown
    for i in range(400):
      if diff[i].sum() <= 2:
        self.assertEqual(action[i], simulated_user.MODIFY)
        self.assertTrue(named[i].any())
        self.assertFalse((named[i] & ~diff[i]).any())  # only what differs
      else:
        self.assertEqual(action[i], simulated_user.REWRITE)
        self.assertBetween(named[i].sum(), config.min_described,
                           config.max_described)
    # Every subset size of a 2-attribute difference occurs.
    sizes = {int(named[i].sum()) for i in range(400) if diff[i].sum() == 2}
    self.assertEqual(sizes, {1, 2})

  def test_answer_and_drop(self):
    target, shown = toy_world.COMBOS[0], toy_world.COMBOS[-1]
    key = jax.random.key(0)
    action, named, _ = simulated_user.decide(key, target, shown,
                                        simulated_user.UserConfig(), asked=3)
    self.assertEqual(int(action), simulated_user.ANSWER)
    np.testing.assert_array_equal(named, np.arange(7) == 3)
    _, named, _ = simulated_user.decide(key, target, shown,
                                   simulated_user.UserConfig(drop_rate=1.0))
    self.assertFalse(np.asarray(named).any())

  def test_host_text_says_what_was_decided(self):
    user = simulated_user.SimulatedUser(simulated_user.UserConfig(draws='jax'), seed=2)
    rng = np.random.default_rng(1)
    for s in range(60):
      target = toy_world.COMBOS[rng.integers(len(toy_world.COMBOS))]
      shown = toy_world.COMBOS[rng.integers(len(toy_world.COMBOS))]
      fb = user.respond(s, 1, 0, 1, target, shown)
      action, named, prefix = simulated_user.decide(
          simulated_user.decision_key(jax.random.key(2), s, 1), target, shown,
          user.config)
      self.assertEqual(fb.action, simulated_user.ACTIONS[int(action)])
      self.assertEqual(sorted(fb.mentioned),
                       list(np.flatnonzero(np.asarray(named))))
      self.assertEqual(lexicon.parse(fb.text), fb.mentioned, fb.text)
      negative = any(m in ' ' + fb.text.lower() + ' '
                     for m in schemas.NEGATIVE_MARKERS)
      want = not fb.mentioned or (
          fb.action == 'rewrite' and
          simulated_user.NEGATIVE_REWRITE_PREFIX[int(prefix)])
      self.assertEqual(negative, want, fb.text)


class CodeTest(absltest.TestCase):

  def test_codes_round_trip_and_parse(self):
    rng = np.random.default_rng(0)
    partial = np.where(rng.random((300, 7)) < 0.3, -1,
                       toy_world.COMBOS[rng.integers(len(toy_world.COMBOS), size=300)])
    codes = np.asarray(phrase_table.code(partial))
    self.assertEqual(int(phrase_table.code(np.full(7, -1))), 0)
    self.assertLess(codes.max(), traced_face.NUM_CODES)
    for row, c in zip(partial, codes):
      want = {a: int(v) for a, v in enumerate(row) if v >= 0}
      self.assertEqual(phrase_table.decode(c), want)
      text = phrase_table.phrase_text(int(c))
      self.assertEqual(text, lexicon.canonical_description(want))
      if want:  # the reasoner re-reads its own running query
        self.assertEqual(lexicon.parse(text), want)
      self.assertEqual(phrase_table.phrase_text(int(c) + traced_face.NUM_CODES),
                       lexicon.canonical_edit(want))


class JitEqualsHostTest(parameterized.TestCase):
  """With the same (jax) draws the jitted mode shows the host loop's lists."""

  @parameterized.parameters(
      [('recovr', 'sum', None), ('recovr', 'mlp', 7)] +
      # Every registered method with a jitted form, in both drivers.
      [(name, 'sum', 7) for name in methods.names()
       if methods.make(name).jax_form is not None])
  def test_same_lists(self, name, composer, chunk_size):
    world, env, jit_env = toy_world.env_for(composer)
    user_config = simulated_user.UserConfig(draws='jax', drop_rate=0.2)
    method = methods.make(name, toy_world.NO_ASK)
    host_result, trace, config = toy_world.run_both(env, jit_env, method, user_config,
                                          chunk_size)
    np.testing.assert_allclose(trace.top_scores, host_result.top_scores,
                               atol=1e-5)
    jit = traced_face.batch_result(
        jit_env, trace, traced_face.word_table(jit_env, config, 5))
    answers = 0
    for h, j in zip(host_result.records, jit.records):
      for hr, jr in zip(h[1:], j[1:]):
        self.assertEqual(hr['action'], jr['action'])
        self.assertEqual(hr['sigma'], jr['sigma'])
        answers += hr['action'] == 'answer'
        if hr['action'] != 'stopped':
          # The texts the host method wrote (IVR's family: none; with
          # tabulated words, what the user said).
          for key in {'search', 'edit'} & set(hr):
            self.assertEqual(hr[key], jr[key])
          if config.face.words:
            self.assertEqual(hr['feedback'], jr['feedback'])
    # The methods that ask every turn get answers.
    self.assertEqual(answers > 0, method.asks_every_turn)
    # Some sessions stop early, some never: both paths are exercised.
    found = (trace.displayed[:, :, 0] == world.test.target[:, None]).any(1)
    if name == 'recovr' and composer == 'sum':
      self.assertTrue(found.any() and not found.all())

  @parameterized.parameters(
      # (method, composer, chunk size, user language, noise rate)
      ('recovr', 'sum', 7, 'own', 0.0),
      ('recovr', 'mlp', None, 'own', 0.15),
      ('no_reflection', 'sum', 7, 'lexicon', 0.15),
      ('history_rewrite', 'sum', 7, 'own', 0.15),
      ('fixed_anchor', 'sum', 5, 'own', 0.1),
  )
  def test_same_lists_with_tabulated_words(self, name, composer, chunk_size,
                                           language, noise_rate):
    # The user's own words and surface noise: the reasoner reads something
    # other than what the user named, tabulated per decision.
    world, env, jit_env = toy_world.env_for(composer)
    user_config = simulated_user.UserConfig(
        draws='jax', drop_rate=0.1, language=language, noise_rate=noise_rate,
        style='paper' if language == 'own' else 'template')
    method = methods.make(name, toy_world.NO_ASK)
    host_result, trace, config = toy_world.run_both(env, jit_env, method, user_config,
                                          chunk_size, seed=3)
    self.assertTrue(config.face.words)
    table = traced_face.word_table(jit_env, config, 3)
    jit = traced_face.batch_result(jit_env, trace, table)
    misread = 0
    for i, (h, j) in enumerate(zip(host_result.records, jit.records)):
      for t, (hr, jr) in enumerate(zip(h[1:], j[1:])):
        self.assertEqual(hr['action'], jr['action'])
        self.assertEqual(hr['sigma'], jr['sigma'])
        if hr['action'] == 'stopped':
          continue
        self.assertEqual(hr['feedback'], jr['feedback'])  # the same words
        for key in {'search', 'edit'} & set(hr):
          self.assertEqual(hr[key], jr[key])
        named = {a: int(world.gallery_attributes[world.test.target[i], a])
                 for a in np.flatnonzero(trace.own['word'][i, t] >= 0 and
                                         words.decode(
                                             trace.own['word'][i, t])[2])}
        misread += lexicon.parse(hr['feedback']) != named
    # The words are read differently from what was named, sometimes.
    self.assertGreater(misread, 0)

  @parameterized.parameters(
      ('always', 'recovr', 'lexicon', 0.0),
      ('entropy', 'no_keep', 'own', 0.1),
      ('always', 'fixed_anchor', 'own', 0.0),
  )
  def test_same_lists_with_questions(self, mode, name, language, noise_rate):
    # ReCoVR's Question Asker (AskStream's gate, a budget of 2) in JAX.
    _, env, jit_env = toy_world.env_for('sum')
    user_config = simulated_user.UserConfig(
        draws='jax', drop_rate=0.2, language=language, noise_rate=noise_rate)
    settings = methods.base.Settings(ask=asking.AskPolicy(
        mode=mode, threshold=0.5, budget=2))
    method = methods.make(name, settings)
    host_result, trace, config = toy_world.run_both(env, jit_env, method, user_config)
    num_turns = trace.active.shape[1]
    jit = traced_face.batch_result(
        jit_env, trace, traced_face.word_table(jit_env, config, 5))
    questions = answers = 0
    for i, (h, j) in enumerate(zip(host_result.records, jit.records)):
      for t, (hr, jr) in enumerate(zip(h[1:], j[1:])):
        self.assertEqual(hr['action'], jr['action'])
        self.assertEqual(hr['feedback'], jr['feedback'])
        if (t + 1 < num_turns and trace.active[i, t + 1] and
            hr['asked'] is not None):
          questions += 1  # the user reads it at the next turn
          self.assertEqual(lexicon.question_attribute(hr['asked']),
                           trace.asked[i, t + 1])
        answers += hr['action'] == 'answer'
    self.assertGreater(questions, 0)
    self.assertGreater(answers, 0)
    self.assertLessEqual(int((trace.asked >= 0).sum(axis=1).max()), 2)

  def test_compacted_schedule_equals_plain(self):
    _, env, jit_env = toy_world.env_for('sum')
    base = ranking.LoopConfig(num_turns=4, list_length=20,
                              num_ids=len(env.gallery))
    config = toy_world.jit_config(methods.make('recovr', toy_world.NO_ASK), base,
                                   simulated_user.UserConfig(), 'sum')
    sessions = np.arange(24)[::-1]
    plain = jit_runner.run(jit_env, config, sessions, seed=1, chunk_size=None)
    for chunk_size in (1, 5, 64):
      compact = jit_runner.run(jit_env, config, sessions, seed=1,
                               chunk_size=chunk_size)
      jax.tree.map(np.testing.assert_array_equal, compact, plain)
    self.assertFalse(plain.active[:, -1].all())  # some sessions stopped

  def test_a_partial_batch_padded_to_the_full_one_is_the_same(self):
    # The runner's partial last batch runs padded (jit_runner.run's pad_to) so
    # that it reuses the full batches' program: the copies of its last
    # session are dropped, the other sessions' results are unchanged.
    _, env, jit_env = toy_world.env_for('sum')
    base = ranking.LoopConfig(num_turns=4, list_length=20,
                              num_ids=len(env.gallery))
    config = toy_world.jit_config(methods.make('recovr', toy_world.NO_ASK),
                                   base, simulated_user.UserConfig(), 'sum')
    sessions = np.arange(3, 10)
    plain = jit_runner.run(jit_env, config, sessions, seed=1, chunk_size=5)
    padded = jit_runner.run(jit_env, config, sessions, seed=1, chunk_size=5,
                            pad_to=12)
    self.assertEqual(padded.displayed.shape[0], len(sessions))
    jax.tree.map(np.testing.assert_array_equal, padded, plain)
    self.assertFalse(plain.active[:, -1].all())  # some sessions stopped

  def test_table_fills_itself(self):
    _, env, _ = toy_world.env_for('sum')
    jit_env = traced_face.prepare(env)  # an empty table
    base = ranking.LoopConfig(num_turns=3, list_length=20,
                              num_ids=len(env.gallery))
    config = toy_world.jit_config(methods.make('recovr', toy_world.NO_ASK), base,
                                   simulated_user.UserConfig(), 'sum')
    log = []
    trace = jit_runner.run(jit_env, config, np.arange(8), seed=0,
                           log=log.append)
    self.assertNotEmpty(log)
    needed = trace.needed[trace.needed > 0]
    self.assertEqual(jit_env.table.missing(needed), [])

  def test_unsupported(self):
    class HostOnly(methods.base.Method):
      name = 'host_only'
      init = step = None

    with self.assertRaisesRegex(ValueError, 'host loop'):
      traced.check_supported(HostOnly())
    # Every registered method, questions, noise and the user's own words.
    for name in methods.names():
      traced.check_supported(methods.make(name))
    with self.assertRaisesRegex(ValueError, 'user draws'):
      simulated_user.UserConfig(draws='torch')


if __name__ == '__main__':
  absltest.main()


class GroundedReaderJitTest(absltest.TestCase):
  """``--reasoner=grounded`` in the jitted driver: the word table reads the
  words with the grounding reader (and the frame classifier) and ReCoVR's
  Reflector uses the same sigma rule, so the lists equal the host's."""

  def test_same_lists_and_sigma_as_the_host(self):
    from recovr_jax.reasoning import grounding  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.models import reader_fit  # pylint: disable=g-import-not-at-top
    _, env, jit_env = toy_world.env_for('sum')
    # It abstains below its threshold (rules_core.ABSTAIN in the table).
    reader = grounding.GroundingReader(
        lexicon, toy_world.fake_encode, reader_fit.prototypes('train'), threshold=0.4,
        exact=reader_fit.training_phrases(), abstain=0.2)
    from recovr_jax.reasoning import frames  # pylint: disable=g-import-not-at-top
    texts, _, actions, _, _ = reader_fit.training_utterances(
        generator.make_world(generator.WorldConfig()), 300,
        with_decisions=True)
    read = [reader.frame(t) for t in texts]
    classifier = frames.FrameClassifier.fit(
        [f for _, f in read], [len(v) for v, _ in read], actions)
    user_config = simulated_user.UserConfig(
        draws='jax', language='own', style='paper', noise_rate=0.1)
    settings = methods.base.Settings(ask=asking.AskPolicy(mode='always'))
    base = ranking.LoopConfig(num_turns=4, list_length=20,
                              num_ids=len(env.gallery))
    sessions = np.arange(24)
    sigmas = set()
    cases = [('recovr', 'paper'), ('recovr', 'frames'),
             ('history_rewrite', 'paper')]
    for name, sigma in cases:
      reasoner = rules.RulesReasoner(
          lexicon, reader=reader, sigma=sigma, name='grounded',
          frame_classifier=classifier if sigma == 'frames' else None)
      label = (None if sigma != 'frames' else
               lambda w: frames.LABELS.index(reasoner.frame_label(w)))  # pylint: disable=cell-var-from-loop
      jit_env.word_tables.clear()
      method = methods.make(name, settings)
      host_result = toy_world.run_host(env, method, sessions,
                             simulated_user.SimulatedUser(user_config, seed=3),
                             base, reasoner=reasoner)
      config = toy_world.jit_config(
          method, base, user_config, jit_env.composer,
          traced.Reading('grounded', lexical=False, sigma=sigma))
      self.assertTrue(config.face.words)
      with self.assertRaisesRegex(ValueError, 'parse'):
        traced_face.word_table(jit_env, dataclasses.replace(
            config, face=dataclasses.replace(config.face, reader='other')),
            3)
      table = traced_face.word_table(jit_env, config, 3,
                                    parse=reasoner.feedback_values,
                                    label=label)
      trace = jit_runner.run(jit_env, config, sessions, seed=3, chunk_size=7)
      np.testing.assert_array_equal(trace.displayed, host_result.displayed)
      jit = traced_face.batch_result(jit_env, trace, table)
      for h, j in zip(host_result.records, jit.records):
        for hr, jr in zip(h[1:], j[1:]):
          self.assertEqual(hr['sigma'], jr['sigma'])
          if name == 'recovr' and hr['action'] != 'stopped':
            sigmas.add(hr['sigma'])
    self.assertGreater(reader.grounded, 0)
    from recovr_jax.reasoning import rules_core  # pylint: disable=g-import-not-at-top
    self.assertTrue(np.any(np.asarray(table.arrays()[3]) ==
                           rules_core.ABSTAIN))  # host and jit abstained
    self.assertIn('neu', sigmas)  # answers to the question shown
    self.assertIn('pos', sigmas)


class TablesSizedForTheRunTest(absltest.TestCase):

  def test_the_tables_are_sized_for_the_whole_run_not_the_batch(self):
    # Before, a run of several batches sized its word tables for one batch:
    # a first run grew them mid-run (the first methods' programs at the
    # small size), and a rerun, finding the grown tables kept, compiled
    # those methods' programs again (10 of them for `main` at 1,000
    # sessions).
    from unittest import mock  # pylint: disable=g-import-not-at-top
    from recovr_jax.drivers import jit_driver  # pylint: disable=g-import-not-at-top

    class Asked(Exception):
      pass

    env = mock.Mock()
    env.filler.side_effect = Asked
    for run_sessions in (None, 1000):
      with self.assertRaises(Asked):
        jit_runner.run(env, None, np.arange(3), 0, run_sessions=run_sessions)
      self.assertEqual(env.filler.call_args.args[2:], (3, run_sessions))
    # The world's filler sizes its tables for the larger of the two.
    from recovr_jax.envs.world.face import traced_face as face  # pylint: disable=g-import-not-at-top
    with mock.patch.object(face, '_Filler') as made:
      face.JitEnvironment.filler(mock.Mock(), 'config', 0, 3, 1000)
      self.assertEqual(made.call_args.args[3], 1000)
      face.JitEnvironment.filler(mock.Mock(), 'config', 0, 3, None)
      self.assertEqual(made.call_args.args[3], 3)
    run = mock.Mock()
    run.env.target = np.arange(600)
    run.config.num_sessions = None
    self.assertEqual(jit_driver._run_sessions(run), 600)  # pylint: disable=protected-access
    run.config.num_sessions = 250
    self.assertEqual(jit_driver._run_sessions(run), 250)  # pylint: disable=protected-access
