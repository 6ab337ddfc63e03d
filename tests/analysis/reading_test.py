"""Reading the user: the phrasing split, the grounding reader, the paper's
sigma mapping and the reading benchmark's metrics (issue 25)."""

import dataclasses
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
import chex
import numpy as np

from recovr_jax.analysis import reading_benchmark
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.models import reader_fit
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world.user import user_language
from recovr_jax.reasoning import frames
from recovr_jax.reasoning import grounding
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas
from tests.helpers import forked

A = generator.ATTRIBUTES


def attr(name):
  return A.index(name)


def value(name, v):
  return generator.VALUES[name].index(v)


class PhrasingSplitTest(absltest.TestCase):

  def test_split_is_fixed_and_covers_every_value(self):
    held = user_language.dev_phrasings()
    for name in A:
      for v, phrases in user_language._OWN[name].items():  # pylint: disable=protected-access
        out = [p for p in phrases if (name, v, p) in held]
        self.assertLen(out, max(1, len(phrases) // 2), (name, v))
        self.assertNotIn(out[0], user_language.bank(name, 'train')[v])
        self.assertIn(out[0], user_language.bank(name, 'dev')[v])
    # Chosen once by the seed: the same set on every call.
    user_language.dev_phrasings.cache_clear()
    self.assertEqual(held, user_language.dev_phrasings())

  def test_train_user_never_says_a_held_out_phrasing(self):
    user = simulated_user.SimulatedUser(simulated_user.UserConfig(
        style='paper', language='own', phrasings='train'), seed=3)
    combos = generator.all_combos()
    rng = np.random.default_rng(0)
    kinds = set()
    for i in range(300):
      target, shown = combos[rng.choice(len(combos), 2, replace=False)]
      fb = user.respond(i, 1, 0, 1, target, shown)
      for a, v in fb.mentioned.items():
        kinds.add(user_language.phrasing_of(a, v, fb.text))
    self.assertEmpty({'dev', 'test'} & kinds)
    self.assertContainsSubset({'lexicon', 'train'}, kinds)

  def test_v2_user_is_unchanged_by_the_split(self):
    # v2's bank (the module's tables) is its whole bank, in its original
    # order: the test split is not in it.
    for name, table in (('colour', user_language.COLOUR),
                        ('lighting', user_language.LIGHT)):
      for v in table:
        self.assertEqual(
            table[v], tuple(user_language._KNOWN[name][v]) +  # pylint: disable=protected-access
            tuple(user_language._OWN[name][v]))  # pylint: disable=protected-access

  def test_phrasing_of_takes_the_longest_whole_phrase(self):
    blue = (attr('colour'), value('colour', 'blue'))
    self.assertEqual(user_language.phrasing_of(*blue, 'make it blue'),
                     'lexicon')
    kind = ('dev' if ('colour', 'blue', 'sky-blue') in
            user_language.dev_phrasings() else 'train')
    self.assertEqual(user_language.phrasing_of(*blue, 'rather sky-blue'),
                     kind)
    self.assertIsNone(user_language.phrasing_of(*blue, 'rather red'))
    self.assertEqual(user_language.phrasing_of(*blue, 'rather cerulean'),
                     'test')

  def test_bad_phrasings_named(self):
    with self.assertRaisesRegex(ValueError, 'phrasings'):
      simulated_user.UserConfig(phrasings='held_out')


class _ToyEncoder:
  """Fixed unit vectors per text (templates stripped); unknown texts get
  a vector orthogonal to every known one."""

  def __init__(self, table):
    self.table = table
    self.dim = 8

  def __call__(self, texts):
    out = []
    for t in texts:
      v = np.zeros(self.dim, np.float32)
      if t in self.table:
        v[:len(self.table[t])] = self.table[t]
      else:
        v[-1] = 1.0
      out.append(v / np.linalg.norm(v))
    return np.stack(out)


class GroundingReaderTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    red, blue = value('colour', 'red'), value('colour', 'blue')
    self.colour = attr('colour')
    self.red, self.blue = red, blue
    self.encoder = _ToyEncoder({
        'crimson': [1, 0, 0], 'navy': [0, 1, 0], 'circle': [0, 0, 1],
        'cobalt': [0.1, 0.9, 0], 'ruby': [0.6, 0.5, 0]})
    self.protos = [grounding.Prototype(self.colour, red, 'crimson'),
                   grounding.Prototype(self.colour, blue, 'navy'),
                   grounding.Prototype(attr('shape'), 0, 'circle')]

  def reader(self, threshold):
    return grounding.GroundingReader(lexicon, self.encoder, self.protos,
                                     threshold=threshold)

  def test_lexicon_reads_first_and_unread_words_are_grounded(self):
    r = self.reader(0.8)
    found = r.parse('two cobalt squares')
    self.assertEqual(found[self.colour], self.blue)
    self.assertEqual(found[attr('count')], value('count', 'two'))
    self.assertEqual(found[attr('shape')], value('shape', 'square'))
    self.assertEqual(r.grounded, 1)
    # lexical: the lexicon's reading alone, nothing grounded.
    self.assertEqual(r.lexical('two cobalt squares'), {
        attr('count'): value('count', 'two'),
        attr('shape'): value('shape', 'square')})

  def test_threshold_decides(self):
    # ruby: 0.77 to crimson, below 0.8 and above 0.7.
    self.assertNotIn(self.colour, self.reader(0.8).parse('ruby squares'))
    self.assertEqual(self.reader(0.7).parse('ruby squares')[self.colour],
                     self.red)

  def test_function_words_are_never_grounded(self):
    encoder = _ToyEncoder({'crimson': [1, 0, 0], 'navy': [0, 1, 0],
                           'circle': [0, 0, 1], 'please': [1, 0, 0]})
    r = grounding.GroundingReader(lexicon, encoder, self.protos, 0.5)
    self.assertTrue(lexicon.is_function_word('please'))
    self.assertEqual(r.parse('please'), {})

  def test_the_lexicon_wins_over_a_grounded_value(self):
    # The lexicon is precise by construction: a grounded value of an
    # attribute it read is not taken, wherever it stands.
    r = self.reader(0.8)
    self.assertEqual(r.parse('red, no wait, cobalt')[self.colour], self.red)
    self.assertEqual(r.parse('cobalt, no wait, red')[self.colour], self.red)
    self.assertEqual(r.parse('no wait, cobalt')[self.colour], self.blue)

  def test_leave_out_hides_the_span_own_prototype(self):
    r = grounding.GroundingReader(
        lexicon, self.encoder,
        self.protos + [grounding.Prototype(self.colour, self.red, 'ruby')],
        threshold=0.5)
    _, cands = r.candidates('ruby things')
    self.assertAlmostEqual(max(cands)[0], 1.0, places=5)
    _, cands = r.candidates('ruby things', leave_out=True)
    # Without its own prototype: crimson's similarity, 0.6 / |(0.6, 0.5)|.
    self.assertAlmostEqual(max(cands)[0], 0.6 / np.hypot(0.6, 0.5), places=5)

  def test_fit_threshold_maximises_right_minus_wrong(self):
    r = self.reader(1.0)
    texts = ['cobalt objects', 'ruby objects', 'ruby objects']
    truths = [{self.colour: self.blue}, {self.colour: self.red},
              {self.colour: self.red}]
    fit = grounding.fit_threshold(r, texts, truths,
                                  grid=[0.5, 0.7, 0.8, 0.95])
    self.assertEqual(fit['threshold'], 0.7)  # reads all three
    self.assertEqual((fit['right'], fit['wrong']), (3, 0))
    with self.assertRaisesRegex(ValueError, 'truths'):
      grounding.fit_threshold(r, texts, truths[:1])

  def test_bad_arguments_named(self):
    with self.assertRaisesRegex(ValueError, 'prototype'):
      grounding.GroundingReader(lexicon, self.encoder, [], 0.5)
    with self.assertRaisesRegex(ValueError, 'max_span'):
      grounding.GroundingReader(lexicon, self.encoder, self.protos, 0.5,
                                max_span=0)


class MiniLMGroundingTest(absltest.TestCase):
  """The shipped reader over the real MiniLM (fitted on a small sample)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.world = generator.make_world(generator.WorldConfig())
    cls.encoder = encoders.TextEncoder()
    cls.reader, cls.fit = reader_fit.grounding_reader(
        cls.world, cls.encoder, num=300, **reader_fit.GROUNDED_OPTIONS)

  def test_dictionary_is_the_tokenizers_whole_words(self):
    # Read from tokenizer.json, as transformers' tokenizer gives it.
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    vocab = AutoTokenizer.from_pretrained(encoders.minilm_path()).get_vocab()
    want = {w for w in vocab if w.isalpha() and w.islower() and len(w) > 1}
    self.assertEqual(reader_fit.dictionary(), want)
    self.assertIn('cube', want)
    with tempfile.TemporaryDirectory() as d:  # one without a vocabulary
      (pathlib.Path(d) / 'tokenizer.json').write_text('{"model": {}}')
      with self.assertRaisesRegex(ValueError, 'tokenizer.json: no model '
                                  'vocabulary'):
        reader_fit.dictionary(d)

  def test_never_sees_a_held_out_phrasing(self):
    held = {s for _, _, p in user_language.held_out_phrasings()
            for s in (p if isinstance(p, tuple) else (p,))}
    self.assertEmpty(held & {p.phrase for p in reader_fit.prototypes('train')})
    self.assertEmpty(held & {' '.join(k) for k in
                             reader_fit.training_phrases().table})
    texts, truths = reader_fit.training_utterances(self.world, 300)
    for text, truth in zip(texts, truths):
      for a, v in truth.items():
        self.assertIn(user_language.phrasing_of(a, v, text),
                      ('lexicon', 'train'), text)

  def test_wordnet_prototypes_hold_no_held_out_word(self):
    held = set()
    for _, _, p in user_language.held_out_phrasings():
      for s in (p if isinstance(p, tuple) else (p,)):
        held.update(lexicon.words(s))
    base = reader_fit.prototypes('train')
    lemmas = reader_fit.wordnet_prototypes('train')
    for generated in (lemmas, reader_fit.wordnet_prototypes('train', True)):
      self.assertEqual(generated[:len(base)], base)
      extra = generated[len(base):]
      self.assertNotEmpty(extra)
      for p in extra:
        self.assertEmpty(held & set(lexicon.words(p.phrase)), p.phrase)
      phrases = [p.phrase for p in extra]
      self.assertLen(set(phrases), len(phrases))  # one value each
      self.assertEmpty(set(phrases) & {p.phrase for p in base})
    glosses = {p.phrase for p in reader_fit.wordnet_prototypes('train', True)}
    self.assertGreater(len(glosses), len(lemmas))
    # The colour red's first sense: "red color or pigment".
    self.assertIn('red color or pigment', glosses)

  def test_fit_uses_the_train_split_only(self):
    test = set(np.flatnonzero(self.world.is_test))
    combos = self.world.combos[self.world.train_combos]
    self.assertTrue(test)
    self.assertFalse(np.any(self.world.is_test[self.world.train_combos]))
    self.assertEqual(len(combos), len(self.world.train_combos))

  def test_reads_every_training_phrasing_and_the_lexicon(self):
    for name in A:
      for v, phrases in user_language.bank(name, 'train').items():
        for phrase in phrases:
          surface = phrase[1] if isinstance(phrase, tuple) else phrase
          got = self.reader.parse(f'I want {surface}')
          self.assertEqual(got.get(attr(name)), value(name, v),
                           (surface, got))

  def test_threshold_in_range_and_reads_more_than_the_lexicon(self):
    self.assertBetween(self.fit['threshold'], 0.3, 0.95)
    texts, truths = reader_fit.training_utterances(self.world, 200, seed=5)
    right = {'lexicon': 0, 'grounded': 0}
    for text, truth in zip(texts, truths):
      for name, parse in (('lexicon', lexicon.parse),
                          ('grounded', self.reader.parse)):
        got = parse(text)
        right[name] += sum(got.get(a) == v for a, v in truth.items())
    self.assertGreater(right['grounded'], right['lexicon'])

  def test_a_fit_is_computed_once_per_process_and_key(self):
    # A sweep's runs share the fit (fit_key): the second call fits nothing
    # and reads as the fresh reader of setUpClass does.
    key = ('reading_test', self.encoder.shared_key)
    self.assertIsNotNone(self.encoder.shared_key)
    call = lambda: reader_fit.grounding_reader(
        self.world, self.encoder, num=300, fit_key=key,
        **reader_fit.GROUNDED_OPTIONS)
    _, first = call()
    with mock.patch.object(grounding, 'fit_threshold',
                           side_effect=AssertionError('fitted again')):
      reader, fit = call()
    self.assertEqual(first, self.fit)
    self.assertEqual(fit, self.fit)
    self.assertEqual((reader.threshold, reader.abstain),
                     (self.reader.threshold, self.reader.abstain))
    texts, _ = reader_fit.training_utterances(self.world, 100, seed=9)
    for text in texts + ['I want it bright and swapped for a hexagon']:
      self.assertEqual(reader.frame(text), self.reader.frame(text), text)
      self.assertEqual(reader.abstained(text), self.reader.abstained(text))

  def test_fits_kept_in_the_cache_dir_are_the_fits(self):
    # A later process (the memo cleared) loads them and fits nothing; a
    # damaged file is fitted again, with a warning, and rewritten.
    d = pathlib.Path(self.create_tempdir().full_path)
    grounded = reader_fit.Grounding(generator.WorldConfig(), d)
    first = grounded.reasoner(self.encoder)
    files = list(d.glob('grounded-fit-*.json'))
    self.assertLen(files, 1)
    reader_fit._FITTED.clear()  # pylint: disable=protected-access
    with mock.patch.object(grounding, 'fit_threshold',
                           side_effect=AssertionError('fitted again')), \
        mock.patch.object(reader_fit, 'frame_classifier',
                          side_effect=AssertionError('fitted again')):
      again = grounded.reasoner(self.encoder)
    self.assertEqual(again.fit, first.fit)
    self.assertEqual(again.reader.threshold, first.reader.threshold)
    np.testing.assert_array_equal(again.frames.weights, first.frames.weights)
    texts, _ = reader_fit.training_utterances(self.world, 100, seed=11)
    for text in texts:
      self.assertEqual(again.reader.frame(text), first.reader.frame(text))
    files[0].write_text(files[0].read_text()[:-20])
    reader_fit._FITTED.clear()  # pylint: disable=protected-access
    with self.assertLogs(level='WARNING') as logs:
      third = grounded.reasoner(self.encoder)
    self.assertIn('is unusable', logs.output[0])
    self.assertEqual(third.fit, first.fit)
    reader_fit._FITTED.clear()  # pylint: disable=protected-access
    self.assertTrue(reader_fit.FitCache(
        d, (generator.WorldConfig(), self.encoder.shared_key),
        reader_fit.GROUNDED_OPTIONS).load())  # rewritten whole

  def test_frame_classifier_reads_the_decision(self):
    classifier = reader_fit.frame_classifier(self.world, self.reader, num=400)
    reasoner = rules.RulesReasoner(lexicon, reader=self.reader,
                                   sigma='frames', frame_classifier=classifier)
    # Validation utterances of the train split (another seed): the learnt
    # rule agrees with the simulator's label more than the rules' rule.
    learnt = reader_fit.sigma_agreement(reasoner, self.world, num=300)
    own = reader_fit.sigma_agreement(
        rules.RulesReasoner(lexicon, reader=self.reader), self.world,
        num=300)
    self.assertGreater(learnt, 0.9)
    self.assertGreater(learnt, own)

  def test_real_words_are_not_spelling_fixed(self):
    # "bright" is a real word: the lexicon alone "fixes" it to "right" (a
    # direction); the reader's dictionary keeps it.
    self.assertEqual(lexicon.parse_spans('in bright sunshine')[1][1],
                     'right')
    self.assertEqual(lexicon.parse_spans('in bright sunshine',
                                         keep=self.reader.dictionary)[1][1],
                     'bright')
    # A typo still is.
    self.assertEqual(self.reader.parse('make them bleu')[attr('colour')],
                     value('colour', 'blue'))


class FrameClassifierTest(absltest.TestCase):

  def test_learns_the_frames(self):
    frames_, counts, labels = [], [], []
    for _ in range(20):
      frames_ += [['swap', 'the', 'colour', 'for'], ['i', 'think', 'objects'],
                  ['no', 'i', 'want']]
      counts += [1, 1, 7]
      labels += ['modify', 'answer', 'rewrite']
    model = frames.FrameClassifier.fit(frames_, counts, labels)
    self.assertEqual(model.label(['swap', 'the', 'colour', 'for'], 1),
                     'modify')
    self.assertEqual(model.label(['i', 'think', 'objects'], 1), 'answer')
    self.assertEqual(model.label(['no', 'i', 'want'], 7), 'rewrite')
    # Unknown words count for nothing; the value count still does.
    self.assertEqual(model.label(['zzz'], 7), 'rewrite')

  def test_bad_input_named(self):
    with self.assertRaisesRegex(ValueError, 'labels'):
      frames.FrameClassifier.fit([['a']], [1], ['oops'])
    with self.assertRaisesRegex(ValueError, 'as many'):
      frames.FrameClassifier.fit([['a']], [1, 2], ['modify'])
    with self.assertRaisesRegex(ValueError, 'frames'):
      rules.RulesReasoner(lexicon, sigma='frames')
    model = frames.FrameClassifier.fit([['a']] * 3, [1] * 3, ['modify'] * 3)
    with self.assertRaisesRegex(ValueError, 'frame'):
      rules.RulesReasoner(lexicon, sigma='frames', frame_classifier=model)


class PaperSigmaTest(absltest.TestCase):
  """``sigma='paper'``: docs/definitions.md §10's mapping of the user's
  turns."""

  SHOWN = 'two large blue circles moving left on grass in daylight'

  def reflect(self, feedback, question=None, sigma='paper'):
    reasoner = rules.RulesReasoner(lexicon, sigma=sigma)
    return reasoner.reflect([schemas.ReflectRequest(
        feedback, self.SHOWN, schemas.SessionMemory(), question)])[0]

  def test_mapping(self):
    question = lexicon.QUESTIONS['colour'][0]
    self.assertEqual(self.reflect('make them red and small')['sigma'], 'pos')
    self.assertEqual(self.reflect('make them red')['sigma'], 'pos')
    self.assertEqual(self.reflect('red', question)['sigma'], 'neu')
    self.assertEqual(self.reflect('No. I want three red squares moving up '
                                  'on sand at night')['sigma'], 'neg')
    # An edit of another attribute than the one asked about is an edit.
    self.assertEqual(self.reflect('make them small', question)['sigma'],
                     'pos')
    # The rules' own rule: two changes are neutral, an answer positive.
    self.assertEqual(self.reflect('make them red and small',
                                  sigma='rules')['sigma'], 'neu')
    self.assertEqual(self.reflect('red', question, sigma='rules')['sigma'],
                     'pos')

  def test_bad_sigma_rule(self):
    with self.assertRaisesRegex(ValueError, 'sigma'):
      rules.RulesReasoner(lexicon, sigma='oracle')

  def test_memories_stay_consistent(self):
    """Keep and avoid disjoint, one kept value per attribute, over random
    chains of the Reflector's own replies."""
    reasoner = rules.RulesReasoner(lexicon, sigma='paper')
    user = simulated_user.SimulatedUser(simulated_user.UserConfig(
        style='paper'), seed=1)
    combos = generator.all_combos()
    rng = np.random.default_rng(2)
    for session in range(40):
      target = combos[rng.integers(len(combos))]
      memory = schemas.SessionMemory()
      for turn in range(1, 6):
        shown = combos[rng.integers(len(combos))]
        fb = user.respond(session, turn, 0, 1, target, shown)
        caption = generator.caption(rng, shown)
        out = reasoner.reflect([schemas.ReflectRequest(fb.text, caption,
                                                       memory)])[0]
        keep = [lexicon.parse_constraint(x) for x in out['keep']]
        avoid = [lexicon.parse_constraint(x) for x in out['avoid']]
        self.assertNotIn(None, keep + avoid)
        self.assertEmpty(set(keep) & set(avoid))
        self.assertLen({a for a, _ in keep}, len(keep))
        memory = schemas.update_memory(out)


class ReadingScoreTest(absltest.TestCase):

  def test_metrics_on_a_hand_made_turn(self):
    colour, size = attr('colour'), attr('size')
    red, small = value('colour', 'red'), value('size', 'small')
    blue = value('colour', 'blue')
    turn = reading_benchmark.Turn(
        text='rather ruby, and miniature', action='modify',
        named={colour: red, size: small}, changes={colour: red, size: small},
        kinds={colour: 'test', size: 'train'})
    intent = {'search': lexicon.canonical_description({colour: blue,
                                                       size: small}),
              'edit': lexicon.canonical_edit({colour: blue, size: small})}
    request = schemas.ReflectRequest(turn.text, 'x', schemas.SessionMemory(
        keep=(lexicon.constraint(size, small),)))
    reflect = {'sigma': 'neu',
               'keep': [lexicon.constraint(size, small),
                        lexicon.constraint(colour, blue),
                        lexicon.constraint(colour, red)],
               'avoid': [lexicon.constraint(colour, red)]}
    out = reading_benchmark.score([turn], [intent], [(request, reflect)])
    held, train = out['test'], out['train']
    self.assertEqual(held['turns'], 1)  # the utterance has a test value
    self.assertEqual(train['turns'], 0)
    self.assertEqual(out['dev']['turns'], 0)
    self.assertEqual(held['named_values'], 1)
    self.assertEqual(held['intent']['recall'], 0.0)   # colour misread
    self.assertEqual(train['intent']['recall'], 1.0)  # size read
    self.assertEqual(held['intent']['precision'], 0.5)
    # blue in search and in edit, at a named attribute: two wrong values.
    self.assertEqual(held['intent']['wrong_per_turn'], 2.0)
    # Newly kept: blue (wrong) and red (right); red is also avoided.
    self.assertEqual(held['reflect']['precision'], 0.5)
    self.assertEqual(held['reflect']['wrong_per_turn'], 2.0)
    self.assertEqual(held['reflect']['sigma_agreement'], 0.0)
    self.assertEqual(held['reflect']['contradictory_memories'], 1)
    chex.assert_trees_all_equal(out['all']['turns'], 1)
    # One session: the bootstrap intervals are the point values; a column
    # without turns has none.
    self.assertEqual(held['intervals']['intent_recall'], [0.0, 0.0])
    self.assertEqual(held['intervals']['intent_wrong_per_turn'], [2.0, 2.0])
    self.assertEqual(train['intervals']['intent_recall'], [1.0, 1.0])
    self.assertIsNone(train['intervals']['sigma_agreement'])
    # Two sessions: whole sessions are resampled (the interval spans both).
    other = dataclasses.replace(turn, session=1, text='ruby',
                                named={colour: red}, changes={colour: red},
                                kinds={colour: 'test'})
    both = reading_benchmark.score(
        [turn, other], [intent, {'search': lexicon.canonical_description(
            {colour: red}), 'edit': ''}], [(request, reflect)] * 2)
    self.assertEqual(both['test']['intent']['recall'], 0.5)
    self.assertEqual(both['test']['intervals']['intent_recall'],
                     [0.0, 1.0])
    self.assertIn('[0.0, 100.0]', reading_benchmark.table({'x': {'0.0': both}}))
    # Without the test split: neither the test nor the all column.
    shown = reading_benchmark.table({'x': {'0.0': reading_benchmark.without_test(both)}})
    self.assertNotIn('| test |', shown)
    self.assertNotIn('| all |', shown)
    self.assertIn('| dev |', shown)

  def test_an_utterance_goes_to_its_widest_split(self):
    turn = reading_benchmark.Turn(text='x', action='modify', named={}, changes={},
                             kinds={0: 'train', 1: 'dev'})
    self.assertEqual(turn.column, 'dev')
    turn.kinds[2] = 'test'
    self.assertEqual(turn.column, 'test')
    self.assertEqual(dataclasses.replace(turn, kinds={}).column, 'train')
    self.assertEqual(reading_benchmark.SIGMA_OF_ACTION,
                     {'modify': 'pos', 'answer': 'neu', 'rewrite': 'neg'})


class EvalReadingCliTest(absltest.TestCase):
  """``experiments.evaluate.eval_reading`` end to end on a tiny first-benchmark
  world with the user in its own words (a forked process: its flags share
  names with other entry points)."""

  def run_cli(self, *args):
    out = pathlib.Path(tempfile.mkdtemp())
    proc = forked.run(
        'experiments.evaluate.eval_reading', '--benchmark=v1',
        '--user_language=own_v3', '--user_style=paper',
        '--num_test_triplets=12', '--num_train_triplets=20',
        '--gallery_size=300', '--num_sessions=12', '--num_turns=3',
        '--batch_size=6', f'--cache_dir={out / "cache"}',
        f'--output_json={out / "reader_fit.json"}', *args)
    return proc, out

  def test_rules_and_grounded(self):
    # More sessions than test queries: the run says so and records both.
    proc, out = self.run_cli('--backends=rules,grounded', '--test_split',
                             '--noise_rates=0', '--num_sessions=20')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('--num_sessions=20: the environment has 12 test queries; '
                  'running 12', proc.stdout)
    import json  # pylint: disable=g-import-not-at-top
    written = json.loads((out / 'reader_fit.json').read_text())
    self.assertEqual((written['num_sessions'],
                      written['num_sessions_requested']), (12, 20))
    report = written['report']
    for backend in ('rules', 'grounded'):
      metrics = report[backend]['0.0']
      self.assertGreater(metrics['all']['turns'], 0)
      self.assertEqual(metrics['all']['turns'],
                       metrics['train']['turns'] + metrics['dev']['turns'] +
                       metrics['test']['turns'])
      self.assertEqual(metrics['all']['reflect']['contradictory_memories'],
                       0)
    self.assertIn('threshold_fit', report['grounded']['0.0'])
    # Same requests drawn for both at turn 1; the grounded reader reads at
    # least as many named values as the lexicon alone.
    self.assertGreaterEqual(report['grounded']['0.0']['all']['intent'][
        'recall'], report['rules']['0.0']['all']['intent']['recall'])

  def test_bad_flags_named(self):
    # Refused before any data or model loads, naming the flag and value.
    proc, _ = self.run_cli('--backends=oracle')
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn('--backends', proc.stderr)
    self.assertIn("'oracle'", proc.stderr)
    for args, message in ((['--backends='], '--backends: name at least one'),
                          (['--noise_rates='], '--noise_rates: give at least'),
                          (['--grounded_options=[1]'],
                           '--grounded_options: expected a JSON object'),
                          (['--grounded_options={"depth": 1}'],
                           '--grounded_options: unknown depth; valid: '),
                          (['--grounded_options={'],
                           '--grounded_options: not JSON')):
      proc, out = self.run_cli(*args)
      self.assertNotEqual(proc.returncode, 0)
      self.assertIn(message, proc.stderr)
      self.assertFalse((out / 'reader_fit.json').exists())
    # A layout world is read by the rules only, as a run refuses the rest.
    proc, _ = self.run_cli('--backends=rules,grounded', '--describe_layout',
                           '--renditions=4')
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn('--backends=grounded would be scored on layout values',
                  proc.stderr)


class _Model:
  """A model's Intent Decomposer: the rules' replies to the feedback with
  ``synonyms`` replaced (a model that knows them), counting its requests."""

  def __init__(self, synonyms):
    self.synonyms, self.seen = synonyms, []
    self.rules = rules.RulesReasoner(lexicon)

  def call(self, module, requests):
    self.seen.append((module, [r.feedback for r in requests]))
    plain = []
    for r in requests:
      text = r.feedback
      for word, known in self.synonyms.items():
        text = text.replace(word, known)
      plain.append(dataclasses.replace(r, feedback=text))
    return schemas.Outputs(self.rules.call(module, plain).objects,
                           [True] * len(requests))

  def validity(self):
    return {'from': 'model'}


class RoutedReasonerTest(absltest.TestCase):

  def make(self, synonyms):
    from recovr_jax.reasoning import routed  # pylint: disable=g-import-not-at-top
    base, model = rules.RulesReasoner(lexicon), _Model(synonyms)
    return routed.RoutedReasoner(
        base, model, lambda text: 'cobalt' in text or 'quartet' in text,
        read_reply=reader_fit.model_reading, lexical=lexicon.parse,
        name='r'), model

  def test_the_model_reads_only_the_attributes_the_lexicon_does_not(self):
    reasoner, model = self.make({'cobalt': 'blue', 'a quartet of': 'four'})
    caption = lexicon.canonical_description({attr('colour'): value(
        'colour', 'red'), attr('count'): value('count', 'two')})
    memory = schemas.SessionMemory()
    feedback = ('make it blue', 'make it cobalt', 'red', 'cobalt',
                'make it cobalt, three of them')
    out = reasoner.call('intent', [schemas.IntentRequest(f, caption, memory)
                                   for f in feedback]).objects
    plain = rules.RulesReasoner(lexicon).intent(
        [schemas.IntentRequest(f.replace('cobalt', 'blue'), caption, memory)
         for f in feedback])
    self.assertEqual(out, plain)
    # Only the picked feedback reached the model, once per request; the
    # Reflector of the same turn reuses its reader_fit.
    self.assertEqual(model.seen, [('intent', ['make it cobalt', 'cobalt',
                                              'make it cobalt, three of '
                                              'them'])])
    reflected = reasoner.call('reflect', [
        schemas.ReflectRequest(f, caption, memory) for f in feedback])
    self.assertLen(model.seen, 1)
    self.assertIn('colour: blue', reflected.objects[1]['keep'])
    self.assertIn('colour: red', reflected.objects[1]['avoid'])
    self.assertEqual(reasoner.speed(), {
        'routed_intent': 3.0, 'routed_intent_requests': 5.0,
        'routed_reflect': 3.0, 'routed_reflect_requests': 5.0})
    # Other modules are the base's alone.
    reasoner.call('question', [schemas.QuestionRequest((caption,), memory)])
    self.assertLen(model.seen, 1)
    self.assertEqual(reasoner.validity(), {'from': 'model'})

  def test_a_value_the_lexicon_reads_is_not_the_models(self):
    # A model that misreads "three" as four and "cobalt" as blue: the
    # Intent Decomposer and the memory read the lexicon's "three" and the
    # model's blue.
    reasoner, _ = self.make({'cobalt': 'blue', 'three': 'four'})
    caption = lexicon.canonical_description({attr('colour'): value(
        'colour', 'red')})
    memory = schemas.SessionMemory()
    feedback = 'make it cobalt, three of them'
    out = reasoner.call('intent', [schemas.IntentRequest(
        feedback, caption, memory)]).objects[0]
    self.assertEqual(lexicon.parse_edit(out['edit']),
                     {attr('count'): value('count', 'three'),
                      attr('colour'): value('colour', 'blue')})
    reflected = reasoner.call('reflect', [schemas.ReflectRequest(
        feedback, caption, memory)]).objects[0]
    self.assertEqual(set(reflected['keep']), {'colour: blue',
                                              'count: three'})
    self.assertEqual(reflected['avoid'], ['colour: red'])

  def test_a_model_copy_of_the_shown_value_is_refused(self):
    # A model that cannot read "cobalt" and writes the shown video's red
    # into its edit: not accepted; the colour is abstained on, so the
    # search does not carry red either.
    from recovr_jax.reasoning import routed  # pylint: disable=g-import-not-at-top

    class Copier:
      def call(self, module, requests):
        del module
        return schemas.Outputs([{
            'search': 'small red circles',
            'edit': 'change the colour to red and make them small'}
                                for _ in requests], [True] * len(requests))

    reasoner = routed.RoutedReasoner(
        rules.RulesReasoner(lexicon), Copier(), lambda text: True,
        read_reply=reader_fit.model_reading, lexical=lexicon.parse, name='r')
    caption = lexicon.canonical_description({
        attr('colour'): value('colour', 'red'),
        attr('shape'): value('shape', 'circle')})
    memory = schemas.SessionMemory()
    feedback = 'make it cobalt and tiny'
    out = reasoner.call('intent', [schemas.IntentRequest(
        feedback, caption, memory)]).objects[0]
    search = lexicon.parse(out['search'])
    self.assertNotIn(attr('colour'), search)
    self.assertEqual(search[attr('shape')], value('shape', 'circle'))
    self.assertEqual(lexicon.parse_edit(out['edit']),
                     {attr('size'): value('size', 'small')})
    self.assertEqual(reasoner.speed()['routed_copies_refused'], 1.0)
    reflected = reasoner.call('reflect', [schemas.ReflectRequest(
        feedback, caption, memory)]).objects[0]
    self.assertEqual(reflected['keep'], ['size: small'])
    self.assertEqual(reflected['avoid'], [])

  def test_the_model_reading_inverts_the_rules_composition(self):
    caption = lexicon.canonical_description({attr('colour'): value(
        'colour', 'red'), attr('size'): value('size', 'small')})
    memory = schemas.SessionMemory(keep=('count: four',))
    request = schemas.IntentRequest('x', caption, memory)
    # An edit: the search carries the shown video's small size and the
    # kept count; the shape and the edit's colour are named.
    reply = {'search': 'four small red squares',
             'edit': 'change the colour to blue'}
    self.assertEqual(reader_fit.model_reading(reply, request), {
        attr('colour'): value('colour', 'blue'),
        attr('shape'): value('shape', 'square')})
    # A fresh description (the shown motion is not carried): its small,
    # the shown video's size, is named too.
    request = schemas.IntentRequest('x', lexicon.canonical_description({
        attr('colour'): value('colour', 'red'),
        attr('size'): value('size', 'small'),
        attr('motion'): value('motion', 'up')}), memory)
    reply = {'search': 'four small blue squares',
             'edit': 'change the shape to square and change the colour to '
                     'blue'}
    self.assertEqual(reader_fit.model_reading(reply, request), {
        attr('colour'): value('colour', 'blue'),
        attr('shape'): value('shape', 'square'),
        attr('size'): value('size', 'small')})
    # Three changes are not an edit: the carried-looking size is named.
    reply = {'search': 'four small blue squares moving up at night',
             'edit': 'change the colour to blue and have them move up and '
                     'change the lighting to night'}
    self.assertEqual(reader_fit.model_reading(reply, request)[attr('size')],
                     value('size', 'small'))
    # Every rules reply read back recomposes the same reply, unless the
    # feedback named only values the search carries anyway (drawn turns).
    base = rules.RulesReasoner(lexicon)
    rng = np.random.default_rng(0)
    values = [len(generator.VALUES[name]) for name in A]
    for _ in range(300):
      shown, named, keep = ({a: int(rng.integers(n)) for a, n in
                             enumerate(values) if rng.random() < p}
                            for p in (0.9, 0.3, 0.2))
      avoid = {a: int(rng.integers(n)) for a, n in enumerate(values)
               if rng.random() < 0.2 and a not in keep}
      memory = schemas.SessionMemory(
          keep=tuple(lexicon.constraint(a, v) for a, v in keep.items()),
          avoid=tuple(lexicon.constraint(a, v) for a, v in avoid.items()))
      feedback = lexicon.canonical_description(named)
      caption = lexicon.canonical_description(shown)
      request = schemas.IntentRequest(feedback, caption, memory)
      reply = base.intent([request])[0]
      read = reader_fit.model_reading(reply, request)
      if read:
        self.assertEqual(base.intent([request], mentions=[read]), [reply],
                         (feedback, caption, memory))
      else:  # only values the search carries anyway were named
        self.assertTrue(all(shown.get(a) == v or keep.get(a) == v
                            for a, v in named.items()), feedback)


class UnreadWordsTest(absltest.TestCase):

  def test_only_words_no_lexicon_phrasing_or_frame_reads_are_left(self):
    import types  # pylint: disable=g-import-not-at-top
    reader = types.SimpleNamespace(lexicon=lexicon,
                                   exact=reader_fit.training_phrases(),
                                   dictionary=reader_fit.dictionary())
    world = generator.make_world(generator.WorldConfig(
        num_test_triplets=12, num_train_triplets=20, gallery_size=300))
    frames_ = reader_fit.frame_words(world, reader, num=300)
    self.assertIn('picturing', frames_)
    self.assertIn('swap', frames_)
    held = {s for _, _, p in user_language.held_out_phrasings()
            for s in ((p,) if isinstance(p, str) else p)}
    # Frames are drawn from training phrasings only; the one dev or test
    # word among them is "plus", also the user's joiner of two edits
    # (", plus").
    self.assertEqual(frames_ & {w for p in held for w in p.split()},
                     {'plus'})
    unread = lambda t: reader_fit.unread_words(reader, frames_, t)
    # Caption words and training phrasings are read; held-out ones are not.
    lexical = {q.phrase for q in reader_fit.prototypes('lexicon')}
    train = sorted(q.phrase for q in reader_fit.prototypes('train')
                   if q.phrase not in lexical)
    self.assertTrue(train)
    for phrase in train:
      self.assertEqual(unread(f'{phrase} instead'), [], phrase)
    self.assertEqual(unread('make it sapphire instead'), ['sapphire'])
    self.assertEqual(unread("I'm picturing blue cubes"), [])


if __name__ == '__main__':
  absltest.main()
