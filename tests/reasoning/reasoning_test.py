"""Tests for the reasoning modules: schemas, the rules backend, the flax_lm
backend on a tiny random model, and the ask policy."""

import pathlib
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import checksums
from recovr_jax.envs.files import files_source
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world import world_source
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import flax_lm
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas

SHOWN = 'two large blue circles moving left on grass in daylight'


def save_tiny_lm(directory: pathlib.Path) -> None:
  """A random GPT-2 and a byte-level BPE tokenizer, no downloads."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top,g-multiple-import
  from transformers import FlaxGPT2LMHeadModel, GPT2Config, PreTrainedTokenizerFast  # pylint: disable=g-import-not-at-top,g-multiple-import
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=300, special_tokens=['<|endoftext|>'],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(['make it red {"search": "red"}'] * 5, trainer)
  fast = PreTrainedTokenizerFast(tokenizer_object=tok,
                                 eos_token='<|endoftext|>',
                                 pad_token='<|endoftext|>')
  fast.save_pretrained(directory)
  config = GPT2Config(vocab_size=len(fast), n_positions=256, n_embd=32,
                      n_layer=2, n_head=2, bos_token_id=fast.eos_token_id,
                      eos_token_id=fast.eos_token_id)
  FlaxGPT2LMHeadModel(config, seed=0).save_pretrained(directory)
  checksums.write_manifest(directory)  # loaders refuse unverified dirs


class SchemaTest(absltest.TestCase):

  def test_validate(self):
    schemas.validate('intent', {'search': 'a', 'edit': ''})
    schemas.validate('reflect', {'sigma': 'pos', 'keep': ['colour: red'],
                           'avoid': []})
    for module, obj in (('intent', {'search': 'a'}),
                        ('intent', {'search': 1, 'edit': ''}),
                        ('reflect', {'sigma': 'bad', 'keep': [], 'avoid': []}),
                        ('reflect', {'sigma': 'neg', 'keep': [1], 'avoid': []}),
                        ('question', {'question': '  '}),
                        ('t2v_init', ['search'])):
      with self.assertRaises(schemas.SchemaError):
        schemas.validate(module, obj)


class RulesReasonerTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.rules = rules.RulesReasoner(lexicon)
    self.memory = schemas.SessionMemory(keep=('colour: blue',))

  def test_intent_routes_to_both_channels(self):
    out = self.rules.intent([schemas.IntentRequest(
        'Close, but make them small and at night', SHOWN, self.memory)])[0]
    schemas.validate('intent', out)
    self.assertEqual(out['edit'],
                     'change the lighting to night and make them small')
    self.assertEqual(out['search'],
                     'two small blue circles moving left on grass at night')

  def test_intent_without_mentions_has_empty_edit(self):
    out = self.rules.intent([schemas.IntentRequest('not this one', SHOWN,
                                             self.memory)])[0]
    self.assertEqual(out['edit'], '')
    # A rejection: nothing of the shown video, only the kept constraint.
    self.assertEqual(out['search'], 'blue objects')
    out = self.rules.intent([schemas.IntentRequest(
        'not this one', SHOWN, schemas.SessionMemory())])[0]
    self.assertEqual(out, {'search': '', 'edit': ''})

  def test_intent_reads_only_the_latest_feedback_and_constraints(self):
    # Relative feedback: the shown video's values, edited; a rejection: only
    # what it names. No earlier feedback enters without a constraint.
    relative = self.rules.intent([schemas.IntentRequest(
        'make them red', SHOWN, schemas.SessionMemory())])[0]
    self.assertEqual(relative['search'],
                     'two large red circles moving left on grass in daylight')
    rejection = self.rules.intent([schemas.IntentRequest(
        'No. I want red squares', SHOWN, schemas.SessionMemory())])[0]
    self.assertEqual(rejection['search'], lexicon.canonical_description(
        lexicon.parse('red squares')))
    # A kept value enters the search; an avoided shown value leaves it.
    memory = schemas.SessionMemory(keep=('count: three',),
                                   avoid=('background: grass',))
    kept = self.rules.intent([schemas.IntentRequest(
        'make them red', SHOWN, memory)])[0]
    expected = {**lexicon.parse(SHOWN), **lexicon.parse('red three')}
    del expected[lexicon.A.index('background')]
    self.assertEqual(lexicon.parse(kept['search']), expected)

  def test_reflection_sigma_and_constraints(self):
    reflect = lambda fb: self.rules.reflect(
        [schemas.ReflectRequest(fb, SHOWN, self.memory)])[0]
    small = reflect('Almost. make them small')
    self.assertEqual(small['sigma'], 'pos')
    self.assertEqual(small['keep'], ['colour: blue', 'size: small'])
    self.assertEqual(small['avoid'], ['size: large'])
    self.assertEqual(reflect('make them small and at night')['sigma'], 'neu')
    self.assertEqual(reflect('No. I want red squares on a beach')['sigma'],
                     'neg')
    self.assertEqual(reflect('not this one')['sigma'], 'neg')
    changed = reflect('make it red')
    self.assertIn('colour: red', changed['keep'])
    self.assertNotIn('colour: blue', changed['keep'])
    self.assertIn('colour: blue', changed['avoid'])

  def test_question_targets_the_most_uncertain_attribute(self):
    captions = ('two large blue circles moving left on grass in daylight',
                'two large red circles moving left on grass in daylight',
                'two large yellow circles moving left on grass in daylight')
    q = self.rules.question([schemas.QuestionRequest(captions,
                                               schemas.SessionMemory())])[0]
    self.assertEqual(q['question'], 'What colour should they be?')
    # Colour already kept: the next most uncertain attribute is asked.
    captions += ('one large red square moving left on grass in daylight',)
    q = self.rules.question([schemas.QuestionRequest(
        captions, schemas.SessionMemory(keep=('colour: red',)))])[0]
    self.assertIn(q['question'], ('What shape should the objects be?',
                                  'How many objects should there be?'))

  def test_t2v_initializer(self):
    out = self.rules.t2v_init([schemas.T2VInitRequest(SHOWN, 'make it red')])[0]
    self.assertEqual(out['search'],
                     'two large red circles moving left on grass in daylight')

  def test_robust_inputs(self):
    for text in ('', 'ünïcödé ✓', 'x' * 10_000):
      out = self.rules.intent([schemas.IntentRequest(text, SHOWN, self.memory)])[0]
      schemas.validate('intent', out)
      schemas.validate('reflect', self.rules.reflect(
          [schemas.ReflectRequest(text, SHOWN, self.memory)])[0])

  def test_make_reasoner(self):
    vocab = world_source.world_vocabulary(generator.WorldConfig())
    self.assertIsInstance(registry.make(registry.ReasonerConfig('rules'),
                                        vocab), rules.RulesReasoner)
    with self.assertRaisesRegex(ValueError, "unknown reasoner 'gpt'.*rules"):
      registry.make(registry.ReasonerConfig('gpt'), vocab)
    with self.assertRaisesRegex(FileNotFoundError, 'is missing: config.json'):
      registry.make(registry.config_of('flax_lm', checkpoint=tempfile.mkdtemp()),
                    vocab)


class FreeTextTest(absltest.TestCase):
  """On real data no text goes through the world's lexicon."""

  CAPTIONS = ('a man slicing bread in a kitchen',
              'two dogs running on a beach at sunset')

  def test_real_words_survive(self):
    reasoner = registry.make(registry.ReasonerConfig('rules'),
                             files_source.VOCABULARY)
    self.assertIsInstance(reasoner, rules.FreeTextReasoner)
    memory = schemas.SessionMemory(keep=(self.CAPTIONS[0],))
    for caption in self.CAPTIONS:
      intent = reasoner.intent([schemas.IntentRequest(caption, SHOWN,
                                                      memory)])[0]
      self.assertEqual(intent['edit'], caption)
      self.assertIn(caption, intent['search'])
      schemas.validate('intent', intent)
      init = reasoner.t2v_init([schemas.T2VInitRequest(caption,
                                                       'make it night')])[0]
      self.assertEqual(init['search'], caption + ' make it night')
      reflect = reasoner.reflect([schemas.ReflectRequest(caption, SHOWN,
                                                         memory)])[0]
      schemas.validate('reflect', reflect)
    self.assertEqual(reasoner.rewrite([list(self.CAPTIONS)]),
                     [' '.join(self.CAPTIONS)])
    # The world's rules backend would rewrite them into world words.
    world = rules.RulesReasoner(lexicon).intent([schemas.IntentRequest(
        self.CAPTIONS[1], SHOWN, schemas.SessionMemory())])[0]
    self.assertNotIn('dogs', world['search'])

  def test_flax_lm_on_real_data_needs_a_checkpoint(self):
    with self.assertRaisesRegex(ValueError, '--reasoner_checkpoint'):
      registry.make(registry.config_of('flax_lm'),
                    files_source.VOCABULARY)


class FlaxLMTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = pathlib.Path(tempfile.mkdtemp())
    save_tiny_lm(cls.dir)
    cls.lm = flax_lm.FlaxLMReasoner(str(cls.dir),
                                    fallback=rules.RulesReasoner(lexicon),
                                    batch_size=4, max_new_tokens=8)

  def test_random_model_falls_back_and_is_counted(self):
    memory = schemas.SessionMemory()
    requests = [schemas.IntentRequest('make it red', SHOWN, memory)] * 5
    out = self.lm.intent(requests)
    self.assertEqual(out, rules.RulesReasoner(lexicon).intent(requests))
    stats = self.lm.validity()['intent']
    self.assertGreaterEqual(stats['calls'], 5)
    self.assertEqual(stats['fallback'] + stats['retry_valid'] + round(
        stats['first_pass_valid'] * stats['calls']), stats['calls'])

  def test_every_module_and_long_input(self):
    memory = schemas.SessionMemory(keep=('colour: red',))
    schemas.validate('reflect', self.lm.reflect(
        [schemas.ReflectRequest('é' * 10_000, SHOWN, memory)])[0])
    schemas.validate('question', self.lm.question(
        [schemas.QuestionRequest((SHOWN,), memory)])[0])
    schemas.validate('t2v_init', self.lm.t2v_init(
        [schemas.T2VInitRequest(SHOWN, 'make it red')])[0])

  def test_valid_output_is_used(self):
    lm = flax_lm.FlaxLMReasoner(str(self.dir), fallback=None, batch_size=4,
                                max_new_tokens=8)
    lm.generate = lambda prompts: ['{"search": "s", "edit": "e"} trailing'
                                   for _ in prompts]
    out = lm.intent([schemas.IntentRequest('x', SHOWN, schemas.SessionMemory())])
    self.assertEqual(out, [{'search': 's', 'edit': 'e'}])
    self.assertEqual(lm.validity()['intent']['first_pass_valid'], 1.0)
    out = lm.call('intent', [schemas.IntentRequest('x', SHOWN,
                                                   schemas.SessionMemory())])
    self.assertEqual(out.first_pass, [True])

  def test_parse_json(self):
    self.assertEqual(flax_lm.parse_json('x {"a": "}{"} y {"b": 1}'),
                     {'a': '}{'})
    self.assertEqual(flax_lm.parse_json('{bad} {"b": 1}'), {'b': 1})
    self.assertIsNone(flax_lm.parse_json('no json'))

  def test_missing_files_are_named(self):
    empty = tempfile.mkdtemp()
    with self.assertRaisesRegex(FileNotFoundError,
                                'missing: config.json, flax_model.msgpack, '
                                'tokenizer.json'):
      flax_lm.FlaxLMReasoner(empty, fallback=None)


class TrainedReasonerTest(absltest.TestCase):
  """The shipped world reasoner loads and writes valid JSON."""

  def test_valid_json_on_fixed_prompts(self):
    lm = registry.make(registry.config_of('flax_lm'),
                       world_source.world_vocabulary(generator.WorldConfig()),
                       batch_size=8)
    memory = schemas.SessionMemory(keep=('colour: red',))
    shown = 'three big blue squares rising on a street at night'
    outputs = {
        'intent': lm.intent([schemas.IntentRequest('make it red and on grass',
                                             shown, memory),
                             schemas.IntentRequest('No. I want two circles',
                                             shown, memory)]),
        'reflect': lm.reflect([schemas.ReflectRequest('Almost. make them small',
                                                shown, memory)]),
        'question': lm.question([schemas.QuestionRequest((shown, SHOWN), memory)]),
        't2v_init': lm.t2v_init([schemas.T2VInitRequest(SHOWN, 'make it red')]),
    }
    for module, objs in outputs.items():
      for obj in objs:
        schemas.validate(module, obj)
    stats = lm.validity()
    self.assertEqual(sum(m['fallback'] for m in stats.values()), 0, stats)
    self.assertEqual(outputs['t2v_init'][0],
                     rules.RulesReasoner(lexicon).t2v_init(
                         [schemas.T2VInitRequest(SHOWN, 'make it red')])[0])
    # A prompt longer than the model's 256 positions minus the reply's
    # budget is cut from the left; it used to raise in generate.
    self.assertEqual(lm.max_prompt_tokens, 256 - lm.max_new_tokens)
    many = schemas.QuestionRequest((shown,) * 12, schemas.SessionMemory(
        keep=('colour: red', 'shape: circle', 'motion: up')))
    schemas.validate('question', lm.question([many])[0])


class AskingTest(absltest.TestCase):

  def test_normalized_entropy(self):
    flat = asking.normalized_entropy(jnp.zeros(10), 1.0)
    self.assertAlmostEqual(float(flat), 1.0, places=5)
    peaked = asking.normalized_entropy(jnp.array([10.0, 0.0, 0.0]), 0.1)
    self.assertLess(float(peaked), 0.01)
    padded = jnp.array([1.0, 1.0, -jnp.inf, -jnp.inf])
    self.assertAlmostEqual(float(asking.normalized_entropy(padded, 1.0)), 1.0,
                           places=5)
    self.assertEqual(float(asking.normalized_entropy(
        jnp.array([1.0, -jnp.inf]), 1.0)), 0.0)
    batched = jax.jit(jax.vmap(asking.normalized_entropy, in_axes=(0, None)))
    np.testing.assert_allclose(batched(jnp.stack([jnp.zeros(3)] * 2), 1.0),
                               [1.0, 1.0], rtol=1e-5)

  def test_policy(self):
    entropy = asking.AskPolicy(mode='entropy', threshold=0.5, budget=1)
    self.assertTrue(asking.should_ask(entropy, 0.9, 0))
    self.assertFalse(asking.should_ask(entropy, 0.1, 0))
    self.assertFalse(asking.should_ask(entropy, 0.9, 1))  # budget spent
    self.assertTrue(asking.should_ask(asking.AskPolicy(mode='always'), 0.0, 0))
    self.assertFalse(asking.should_ask(asking.AskPolicy(mode='never'), 1.0,
                                       0))
    # The default is the paper's protocol: a question with every list.
    self.assertTrue(asking.should_ask(asking.AskPolicy(), 0.0, 4))
    self.assertFalse(asking.should_ask(asking.AskPolicy(), 0.0, 5))
    with self.assertRaisesRegex(ValueError, "unknown ask mode 'x'.*entropy"):
      asking.AskPolicy(mode='x')


if __name__ == '__main__':
  absltest.main()
