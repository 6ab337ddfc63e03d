"""The SmolLM2 adapter's training data (v2 sessions on the train split,
targets from the simulator's ground truth) and its recorded recipe,
checked at load (issue 25)."""

import collections
import dataclasses

from absl.testing import absltest
import numpy as np

from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import reasoner_training
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world.user import user_language
from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import schemas

A = generator.ATTRIBUTES
WORLD = generator.make_world(generator.WorldConfig(renditions=4))
USER = simulated_user.UserConfig(style='paper', language='own',
                                 phrasings='train')


def attr(name):
  return A.index(name)


def value(name, v):
  return generator.VALUES[name].index(v)


def _pool(n=400, seed=0):
  """Train-split combinations with their ground-truth captions (the test
  needs no captioner: ``sample_sessions`` takes any captions)."""
  rng = np.random.default_rng(seed)
  ids = np.sort(rng.choice(WORLD.train_combos, n, replace=False))
  return ids, tuple(generator.caption(rng, WORLD.combos[i]) for i in ids)


class TeacherTest(absltest.TestCase):

  def test_sigma_is_the_decision_and_memory_stays_consistent(self):
    teacher = reasoner_training.TeacherReasoner()
    shown = 'a video of two small red circles moving up on grass at night'
    memory = schemas.SessionMemory(keep=('colour: blue',),
                                   avoid=('shape: square',))
    named = {attr('colour'): value('colour', 'yellow'),
             attr('shape'): value('shape', 'square')}
    for action, sigma in (('modify', 'pos'), ('answer', 'neu'),
                          ('rewrite', 'neg')):
      teacher.set_truth(named, action)
      # Words the lexicon cannot read: the teacher reads the truth.
      out = teacher.reflect([schemas.ReflectRequest(
          'amber arrowheads please', shown, memory)])[0]
      self.assertEqual(out['sigma'], sigma)
      self.assertEqual(out['keep'], ['shape: square', 'colour: yellow'])
      self.assertEqual(out['avoid'], ['colour: red', 'shape: circle'])
      intent = teacher.intent([schemas.IntentRequest(
          'amber arrowheads please', shown, memory)])[0]
      self.assertEqual(lexicon.parse_edit(intent['edit']), {
          attr('colour'): value('colour', 'yellow'),
          attr('shape'): value('shape', 'square')})
      # An edit of the shown video keeps its other values; a rewrite
      # describes the target afresh.
      self.assertEqual(attr('lighting') in lexicon.parse(intent['search']),
                       action != 'rewrite')

  def test_needs_a_truth(self):
    with self.assertRaisesRegex(RuntimeError, 'set_truth'):
      reasoner_training.TeacherReasoner().intent([schemas.IntentRequest(
          'red', 'a red circle', schemas.SessionMemory())])
    with self.assertRaisesRegex(ValueError, "action 'stop'"):
      reasoner_training.TeacherReasoner().set_truth({}, 'stop')


class SampleSessionsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.pool, cls.captions = _pool()
    cls.pairs = reasoner_training.sample_sessions(WORLD, cls.pool, cls.captions, USER, 40,
                                   seed=5)

  def test_modules_and_turns(self):
    count = collections.Counter(m for m, _, _ in self.pairs)
    self.assertEqual(count['t2v_init'], 40)
    self.assertEqual(count['intent'], 200)
    self.assertEqual(count['reflect'], 200)
    self.assertBetween(count['question'], 60, 140)  # QUESTION_RATE 0.5

  def test_memory_is_the_reflectors_chain_and_consistent(self):
    memory = None
    for module, request, reply in self.pairs:
      if module == 't2v_init':
        memory = schemas.SessionMemory()
      elif module in ('intent', 'reflect', 'question'):
        self.assertEqual(request.memory, memory)
      if module == 'reflect':
        keep = [lexicon.parse_constraint(x) for x in reply['keep']]
        avoid = [lexicon.parse_constraint(x) for x in reply['avoid']]
        self.assertNotIn(None, keep + avoid)
        self.assertLen({a for a, _ in keep}, len(keep))
        self.assertEmpty(set(keep) & set(avoid))
        memory = schemas.SessionMemory(tuple(reply['keep']),
                                       tuple(reply['avoid']))

  def test_targets_are_the_simulators_truth_on_the_train_split(self):
    pool = set(self.pool.tolist())
    self.assertTrue(pool <= set(WORLD.train_combos.tolist()))
    sigmas = collections.Counter(r['sigma'] for m, _, r in self.pairs
                                 if m == 'reflect')
    self.assertEqual(set(sigmas), {'neg', 'neu', 'pos'})
    shown = set(self.captions)
    for module, request, _ in self.pairs:
      if module in ('intent', 'reflect'):
        self.assertIn(request.shown_caption, shown)

  def test_no_held_out_phrasing_reaches_training(self):
    held = {p for _, _, p in user_language.held_out_phrasings()}
    words = [p if isinstance(p, str) else p[1] for p in held]
    for module, request, _ in self.pairs:
      if module == 'intent':
        text = request.feedback.lower()
        for w in words:
          self.assertNotRegex(text, rf'\b{w}\b', request.feedback)

  def test_same_seed_same_pairs(self):
    again = reasoner_training.sample_sessions(WORLD, self.pool, self.captions, USER, 40,
                               seed=5)
    self.assertEqual(again, self.pairs)

  def test_refuses_a_user_with_held_out_phrasings(self):
    with self.assertRaisesRegex(ValueError, "phrasings='train'"):
      reasoner_training.sample_sessions(WORLD, self.pool, self.captions,
                         dataclasses.replace(USER, phrasings='all'), 1, 0)


class AdapterRecipeTest(absltest.TestCase):

  def test_shipped_adapter_records_its_recipe(self):
    meta = chat_lm.adapter_meta()
    data = meta['data']
    # The shipped adapter is trained on the default benchmark's sessions.
    self.assertEqual(data['recipe'], reasoner_training.SESSION_RECIPE)
    self.assertEqual(data['benchmark'], 'v2')
    self.assertEqual(data['split'], 'train')
    self.assertEqual(data['user']['phrasings'], 'train')
    self.assertEqual(data['targets']['reflect'], 'simulator')
    self.assertFalse(meta['prompt']['spelling_fixer'])
    self.assertEqual(reasoner_training.check_adapter(meta, WORLD.config, USER), [])
    # On the first benchmark a run is told what differs.
    v1 = dataclasses.replace(WORLD.config, renditions=1)
    notes = reasoner_training.check_adapter(meta, v1, simulated_user.UserConfig())
    self.assertLen(notes, 2)
    self.assertIn('4 rendition(s) per combination, this world has 1',
                  notes[0])

  def test_the_v2_sessions_record_checks_clean_on_v2(self):
    meta = {'data': {'recipe': reasoner_training.SESSION_RECIPE, 'benchmark': 'v2',
                     'world': {'seed': 0, 'test_share': 0.2,
                               'renditions': 4},
                     'user': {'style': 'paper', 'language': 'own',
                              'phrasings': 'train'}}}
    self.assertEqual(reasoner_training.check_adapter(meta, WORLD.config, USER), [])

  def test_check_at_load(self):
    meta = chat_lm.adapter_meta()
    with self.assertRaisesRegex(ValueError, 'no training data'):
      reasoner_training.check_adapter({'prompt': meta['prompt']}, WORLD.config)
    other = dataclasses.replace(WORLD.config, seed=WORLD.config.seed + 1)
    with self.assertRaisesRegex(ValueError, r'seed \d+, test_share .* '
                                r'\d+\.\d% of this world'):
      reasoner_training.check_adapter(meta, other)
    notes = reasoner_training.check_adapter(meta, other, allow_other_world=True)
    self.assertLen(notes, 1)
    self.assertIn('(accepted)', notes[0])


if __name__ == '__main__':
  absltest.main()
