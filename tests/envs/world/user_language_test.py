"""The user's phrase bank and its three splits (benchmark v3's test split)."""

import collections
import re

from absl.testing import absltest
import numpy as np

from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world.user import user_language
from recovr_jax.envs.world import world_source

NAMES = generator.attribute_names(generator.NUM_ATTRIBUTES + 1)


def surfaces(phrase):
  return phrase if isinstance(phrase, tuple) else (phrase,)


def whole(phrase: str, text: str) -> bool:
  return re.search(r'(?<![a-z-])' + re.escape(phrase) + r'(?![a-z-])',
                   text) is not None


class TestSplitTest(absltest.TestCase):

  def test_at_least_three_per_value_and_a_hundred_in_all(self):
    test = user_language.test_phrasings()
    self.assertGreaterEqual(len(test), 100)
    per_value = collections.Counter((a, v) for a, v, _ in test)
    for name in NAMES:
      for v in generator.VALUES[name]:
        self.assertGreaterEqual(per_value[(name, v)], 3, (name, v))

  def test_new_words_only(self):
    # No test phrase holds a lexicon phrase or a v2 phrase (caption words,
    # training or dev phrasings) as whole words.
    table = lexicon.phrase_table()
    old = {s for name in NAMES for phrases in
           user_language.bank(name, 'dev').values()
           for p in phrases for s in surfaces(p)}
    for name, value, phrase in user_language.test_phrasings():
      for s in surfaces(phrase):
        words = tuple(lexicon.words(s))
        for k in table:
          self.assertFalse(
              any(words[i:i + len(k)] == k
                  for i in range(len(words) - len(k) + 1)),
              (name, value, s, k))
        for o in old:
          self.assertFalse(whole(o, s), (name, value, s, o))

  def test_splits_are_disjoint_and_widen(self):
    dev, test = user_language.dev_phrasings(), user_language.test_phrasings()
    self.assertEmpty(dev & test)
    self.assertEqual(user_language.held_out_phrasings(), dev | test)
    for name in NAMES:
      train = user_language.bank(name, 'train')
      v2 = user_language.bank(name, 'dev')
      v3 = user_language.bank(name, 'test')
      for v in v3:
        self.assertContainsSubset(train[v], v2[v])
        self.assertContainsSubset(v2[v], v3[v])
        for p in v3[v]:
          split = user_language.split_of(name, v, p)
          self.assertEqual(p in train[v], split in (None, 'train'))
          self.assertEqual(p in v2[v], split != 'test')

  def test_widest_split_of_a_user(self):
    widest = user_language.widest_split
    self.assertEqual(widest('own', 'all'), 'dev')
    self.assertEqual(widest('own_v3', 'all'), 'test')
    self.assertEqual(widest('own_v3', 'train'), 'train')
    with self.assertRaisesRegex(ValueError, 'phrasings'):
      widest('own', 'held_out')
    with self.assertRaisesRegex(ValueError, "language 'lexicon'"):
      widest('lexicon', 'all')
    with self.assertRaisesRegex(ValueError, 'unknown split'):
      user_language.bank('colour', 'all')


class V3UserTest(absltest.TestCase):

  def turns(self, language, phrasings='all', num=400):
    user = simulated_user.SimulatedUser(simulated_user.UserConfig(
        style='paper', language=language, phrasings=phrasings), seed=3)
    combos = generator.all_combos()
    rng = np.random.default_rng(0)
    for i in range(num):
      target, shown = combos[rng.choice(len(combos), 2, replace=False)]
      yield user.respond(i, 1, 0, 1, target, shown)

  def kinds(self, language, phrasings='all'):
    out = collections.Counter()
    for fb in self.turns(language, phrasings):
      for a, v in fb.mentioned.items():
        out[user_language.phrasing_of(a, v, fb.text)] += 1
    return out

  def test_v3_user_speaks_every_split_and_v2_none_of_the_test(self):
    v3 = self.kinds('own_v3')
    self.assertContainsSubset({'lexicon', 'train', 'dev', 'test'}, set(v3))
    self.assertNotIn(None, v3)  # every named value is found in the words
    self.assertNotIn('test', self.kinds('own'))
    self.assertEmpty({'dev', 'test'} & set(self.kinds('own_v3', 'train')))

  def test_v2_draws_are_unchanged(self):
    # The v2 user's words do not depend on the test split existing: its
    # bank is v2's, in v2's order.
    for fb2, fb3 in zip(self.turns('own', num=50),
                        self.turns('own_v3', num=50)):
      self.assertEqual(fb2.action, fb3.action)
      self.assertEqual(fb2.mentioned, fb3.mentioned)
    for name, table in (('colour', user_language.COLOUR),
                        ('size', user_language.SIZE)):
      self.assertEqual(table, user_language.bank(name, 'dev'))

  def test_v3_is_the_default_benchmark(self):
    self.assertEqual(world_source.DEFAULT_BENCHMARK, 'v3')
    v3, v2 = world_source.BENCHMARKS['v3'], world_source.BENCHMARKS['v2']
    self.assertEqual(v3['user_language'], 'own_v3')
    self.assertEqual({k: x for k, x in v3.items() if k != 'user_language'},
                     {k: x for k, x in v2.items() if k != 'user_language'})


if __name__ == '__main__':
  absltest.main()
