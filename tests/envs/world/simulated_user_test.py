"""Tests for the simulated user and the lexicon it speaks with."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from recovr_jax.envs.files import caption_user
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world.user import user_language

COMBOS = generator.all_combos()


def combo_with(base, changes):
  out = np.array(base)
  for a, v in changes.items():
    out[a] = v
  return out


class LexiconTest(absltest.TestCase):

  def test_parses_every_caption_and_edit(self):
    rng = np.random.default_rng(0)
    for combo in COMBOS[::61]:
      self.assertEqual(lexicon.parse(generator.caption(rng, combo)),
                       {a: int(v) for a, v in enumerate(combo)})
    for a, n in enumerate(generator.NUM_VALUES):
      for v in range(n):
        for _ in range(4):
          phrase = generator.edit_phrase(rng, generator.ATTRIBUTES[a], v)
          self.assertEqual(lexicon.parse(phrase), {a: v}, phrase)

  def test_spelling_fixer(self):
    self.assertEqual(lexicon.parse('make it bleu and at nigth'), {1: 1, 5: 3})
    self.assertEqual(lexicon.fix_spelling('trianlge'), 'triangle')
    self.assertEqual(lexicon.parse('zzzz qqqq'), {})
    self.assertEqual(lexicon.parse('résumé ünïcode'), {})

  def test_describe_names_exactly_the_subset(self):
    rng = np.random.default_rng(1)
    for combo in COMBOS[::499]:
      subset = rng.permutation(7)[:int(rng.integers(1, 7))]
      text = lexicon.describe(rng, combo, subset)
      self.assertEqual(lexicon.parse(text),
                       {int(a): int(combo[a]) for a in subset}, text)

  def test_questions_round_trip(self):
    rng = np.random.default_rng(2)
    for a in range(7):
      self.assertEqual(lexicon.question_attribute(
          lexicon.question_text(rng, a)), a)
    self.assertIsNone(lexicon.question_attribute('anything else?'))


class SimulatedUserTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.target = COMBOS[4321]
    self.user = simulated_user.SimulatedUser(seed=0)

  def respond(self, changes, question=None, user=None, session=0):
    shown = combo_with(self.target, changes)
    return (user or self.user).respond(session, 1, 1, 2, self.target, shown,
                                       question=question)

  def test_stops_only_on_the_target(self):
    f = self.user.respond(0, 1, 7, 7, self.target, self.target)
    self.assertEqual((f.action, f.text), ('stop', ''))

  @parameterized.parameters(1, 2)
  def test_modify_at_or_below_threshold(self, num_diff):
    changes = {a: (self.target[a] + 1) % generator.NUM_VALUES[a]
               for a in range(num_diff)}
    for session in range(10):
      f = self.respond(changes, session=session)
      self.assertEqual(f.action, 'modify')
      self.assertTrue(f.mentioned)
      for a, v in f.mentioned.items():
        self.assertIn(a, changes)  # names only differing attributes
        self.assertEqual(v, self.target[a])
      self.assertEqual(lexicon.parse(f.text), f.mentioned)

  def test_rewrite_above_threshold_names_a_strict_subset(self):
    changes = {a: (self.target[a] + 1) % generator.NUM_VALUES[a]
               for a in range(3)}
    for session in range(10):
      f = self.respond(changes, session=session)
      self.assertEqual(f.action, 'rewrite')
      self.assertBetween(len(f.mentioned), 2, 5)
      self.assertEqual(lexicon.parse(f.text), f.mentioned)
      for a, v in f.mentioned.items():
        self.assertEqual(v, self.target[a])

  def test_answer_only_with_a_question_and_a_major_discrepancy(self):
    major = {a: (self.target[a] + 1) % generator.NUM_VALUES[a]
             for a in range(4)}
    question = lexicon.QUESTIONS['colour'][0]
    f = self.respond(major, question=question)
    self.assertEqual(f.action, 'answer')
    self.assertEqual(f.mentioned, {1: int(self.target[1])})
    self.assertEqual(self.respond(major).action, 'rewrite')
    minor = {0: (self.target[0] + 1) % 4}
    self.assertEqual(self.respond(minor, question=question).action, 'modify')

  def test_modify_threshold_is_a_dial(self):
    user = simulated_user.SimulatedUser(simulated_user.UserConfig(modify_threshold=0))
    self.assertEqual(self.respond({0: (self.target[0] + 1) % 4},
                                  user=user).action, 'rewrite')

  def test_deterministic_per_session_and_seed(self):
    changes = {a: (self.target[a] + 1) % generator.NUM_VALUES[a]
               for a in range(4)}
    texts = [self.respond(changes, session=s).text for s in range(8)]
    self.assertEqual(texts, [self.respond(changes, session=s).text
                             for s in range(8)])
    self.assertGreater(len(set(texts)), 4)  # varied language
    other = simulated_user.SimulatedUser(seed=1)
    self.assertNotEqual(texts, [self.respond(changes, user=other,
                                             session=s).text for s in range(8)])

  @parameterized.parameters('jax', 'numpy')
  def test_respond_many_is_respond_of_each(self, draws):
    rng = np.random.default_rng(7)
    user = simulated_user.SimulatedUser(
        simulated_user.UserConfig(draws=draws), seed=3)
    questions = [None, lexicon.QUESTIONS['colour'][0], 'what now?']
    calls = []
    for i in range(13):  # not a power of two: the batch is padded
      target, shown = COMBOS[rng.integers(len(COMBOS), size=2)]
      same = i % 5 == 0  # the target shown: a stop
      calls.append((i // 2, 1 + i % 3, 4, 4 if same else 9, target,
                    target if same else shown, questions[i % 3]))
    many = user.respond_many(calls)
    self.assertEqual(many, [user.respond(*c) for c in calls])
    # What each reply names, its words unwritten: the same.
    self.assertEqual(user.named_many(calls), [f.mentioned for f in many])
    self.assertTrue(any(f.mentioned for f in many))
    self.assertIn('stop', [f.action for f in many])
    self.assertGreater(len({f.action for f in many}), 2)

  def test_policies(self):
    one = {0: (self.target[0] + 1) % 4}
    many = {a: (self.target[a] + 1) % generator.NUM_VALUES[a] for a in range(5)}
    rewrite = simulated_user.SimulatedUser(
        simulated_user.UserConfig(policy='rewrite_only'))
    modify = simulated_user.SimulatedUser(simulated_user.UserConfig(policy='modify_only'))
    self.assertEqual(self.respond(one, user=rewrite).action, 'rewrite')
    f = self.respond(many, user=modify)
    self.assertEqual(f.action, 'modify')
    self.assertEqual(lexicon.parse(f.text), f.mentioned)

  def test_constraint_dropping(self):
    many = {a: (self.target[a] + 1) % generator.NUM_VALUES[a] for a in range(5)}
    clean = [self.respond(many, session=s) for s in range(30)]
    dropping = simulated_user.SimulatedUser(simulated_user.UserConfig(drop_rate=0.5))
    dropped = [self.respond(many, user=dropping, session=s) for s in range(30)]
    n_clean = sum(len(f.mentioned) for f in clean)
    n_dropped = sum(len(f.mentioned) for f in dropped)
    self.assertBetween(n_dropped / n_clean, 0.3, 0.7)
    for f in dropped:
      self.assertEqual(lexicon.parse(f.text), f.mentioned)
    everything = simulated_user.SimulatedUser(simulated_user.UserConfig(drop_rate=1.0))
    f = self.respond(many, user=everything)
    self.assertEqual(f.mentioned, {})
    self.assertIn(f.text, simulated_user._GENERIC)  # pylint: disable=protected-access

  def test_surface_noise(self):
    rng = np.random.default_rng(0)
    text = 'make it blue and change the background to a beach please'
    self.assertEqual(simulated_user.add_surface_noise(rng, text, 0.0), text)
    noisy = [simulated_user.add_surface_noise(rng, text, 0.5) for _ in range(20)]
    changed = np.mean([a != b for t in noisy
                       for a, b in zip(t.split(), text.split())])
    self.assertGreater(changed, 0.2)
    self.assertTrue(all(t != text for t in noisy[:5]))

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "unknown user policy 'x'.*mixed"):
      simulated_user.UserConfig(policy='x')
    with self.assertRaisesRegex(ValueError, 'noise_rate must be in'):
      simulated_user.UserConfig(noise_rate=2.0)
    with self.assertRaisesRegex(ValueError, 'max_described'):
      simulated_user.UserConfig(max_described=7)

  def test_integer_settings_refuse_other_numbers(self):
    # NaN passed every `< 1` check (and 10.0 is no static shape).
    from recovr_jax.protocol import ranking  # pylint: disable=g-import-not-at-top
    from recovr_jax.reasoning import asking  # pylint: disable=g-import-not-at-top
    nan = float('nan')
    for make, message in (
        (lambda: ranking.LoopConfig(window=nan), 'window must be an integer, '
         'got nan'),
        (lambda: ranking.LoopConfig(list_length=10.0), 'list_length must be '
         'an integer, got 10.0'),
        (lambda: ranking.LoopConfig(num_ids=0), 'num_ids must be >= 1, got 0'),
        (lambda: ranking.LoopConfig(kappa=(11, 4.5, 2)), r'kappa \(neg, neu, '
         r'pos\) must be three integers >= 1, got \(11, 4.5, 2\)'),
        (lambda: asking.AskPolicy(budget=2.5), 'ask budget must be an '
         'integer, got 2.5'),
        (lambda: simulated_user.UserConfig(modify_threshold=nan),
         'modify_threshold must be an integer, got nan')):
      with self.assertRaisesRegex(ValueError, message):
        make()
    self.assertEqual(ranking.LoopConfig(window=np.int64(3)).window, 3)


class CaptionUserTest(absltest.TestCase):

  def test_caption_user(self):
    user = caption_user.CaptionUser(seed=0)
    self.assertEqual(user.respond(0, 1, 'a', 'a', 'x', 'y').action, 'stop')
    target = 'a brown dog running on a sunny beach'
    f = user.respond(0, 1, 'a', 'b', target, 'a cat sleeping indoors')
    self.assertEqual(f.action, 'rewrite')   # little in common
    self.assertNotIn(target, f.text)        # never the caption verbatim
    self.assertEqual(f.text, 'Not this one. I am looking for brown dog '
                     'running sunny beach')
    # Close captions: Modify names the differences only.
    f = user.respond(0, 1, 'a', 'b', target,
                     'a black dog running on a beach')
    self.assertEqual(f.action, 'modify')
    self.assertEqual(f.text, 'Close, but with brown sunny; no black')
    for w in ('dog', 'running', 'beach'):   # shared words are not repeated
      self.assertNotIn(w, f.text)
    # Dropping: at most max_words, a seeded subset, never empty.
    dropping = caption_user.CaptionUser(drop_rate=0.5, seed=3, max_words=2)
    f = dropping.respond(7, 2, 'a', 'b', target, 'a cat indoors')
    words = f.text.split('for ')[1].split()
    self.assertBetween(len(words), 1, 2)
    self.assertContainsSubset(words, caption_user.content_words(target))
    self.assertEqual(f, dropping.respond(7, 2, 'a', 'b', target,
                                         'a cat indoors'))
    phrased = caption_user.CaptionUser(phrase=lambda t, s: f'want {t} not {s}')
    self.assertEqual(phrased.respond(0, 1, 'a', 'b', 'dog', 'cat').text,
                     'want dog not cat')
    with self.assertRaisesRegex(ValueError, 'max_words'):
      caption_user.CaptionUser(max_words=0)


class PaperUserOwnWordsTest(absltest.TestCase):
  """The user as the paper describes it, in its own words."""

  CONFIG = simulated_user.UserConfig(style='paper', language='own')

  def _turns(self, config, num=300):
    user = simulated_user.SimulatedUser(config, seed=1)
    combos = generator.all_combos()
    rng = np.random.default_rng(0)
    for i in range(num):
      target, shown = combos[rng.choice(len(combos), 2, replace=False)]
      yield target, shown, user.respond(i, 1, 0, 1, target, shown)

  def test_vocabulary_is_not_the_lexicon(self):
    held_out = user_language.held_out_vocabulary()
    self.assertNotEmpty(held_out)
    self.assertFalse(held_out & lexicon.vocabulary())
    used = set()
    for _, _, fb in self._turns(self.CONFIG):
      used |= set(fb.text.lower().replace(',', ' ').replace(';', ' ')
                  .replace(':', ' ').replace('-', ' ').split())
    self.assertTrue(used & held_out)           # unseen words reach the reader
    self.assertFalse(used <= lexicon.vocabulary())

  def test_rules_reader_reads_own_words_well_below_always(self):
    own = simulated_user.parse_agreement(self.CONFIG, lexicon.parse, 500)
    self.assertLess(own['all'], 0.5)
    self.assertLess(own['mentions_read'], 0.9)
    known = simulated_user.parse_agreement(
        simulated_user.UserConfig(style='paper'), lexicon.parse, 500)
    self.assertEqual(known['all'], 1.0)

  def test_rewrite_complete_modify_at_most_m_real_differences(self):
    for config in (self.CONFIG, dataclasses.replace(
        self.CONFIG, policy='modify_only'), dataclasses.replace(
            self.CONFIG, draws='jax')):
      seen = set()
      for target, shown, fb in self._turns(config):
        seen.add(fb.action)
        if fb.action == 'rewrite':
          self.assertEqual(fb.mentioned, {a: int(v)
                                          for a, v in enumerate(target)})
        elif fb.action == 'modify':
          self.assertBetween(len(fb.mentioned), 1, config.modify_threshold)
          for a, v in fb.mentioned.items():
            self.assertNotEqual(target[a], shown[a])   # a real difference
            self.assertEqual(v, target[a])
      self.assertIn('modify', seen)


if __name__ == '__main__':
  absltest.main()
