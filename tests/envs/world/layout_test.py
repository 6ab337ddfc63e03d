"""Tests for the describable layout (``--describe_layout``): the world, its
pixels and captions, the user's words and the lexicon that reads them."""

import dataclasses
import json
import pathlib
import tempfile

from absl import flags
from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import training
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world.user import user_language
from recovr_jax.envs.world import world_source
from recovr_jax import paths
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas
from tests.helpers import runs
from tests.helpers import entry_points
from tests.helpers import forked

LAYOUT = generator.NUM_ATTRIBUTES  # the layout's attribute index
SMALL = generator.WorldConfig(num_test_triplets=60, num_train_triplets=300,
                              renditions=4, gallery_size=400)


class WorldTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.plain = generator.make_world(dataclasses.replace(
        SMALL, scene_shared=0.5))
    cls.world = generator.make_world(dataclasses.replace(
        SMALL, scene_shared=0.5, describe_layout=True))

  def test_the_layout_changes_only_what_it_names(self):
    plain, world = self.plain, self.world
    for name in ('reference', 'target', 'edit'):
      self.assertEqual(np.asarray(getattr(plain.test, name)).tolist(),
                       np.asarray(getattr(world.test, name)).tolist())
    np.testing.assert_array_equal(plain.gallery_combos, world.gallery_combos)
    np.testing.assert_array_equal(plain.gallery_attributes,
                                  world.gallery_attributes[:, :LAYOUT])
    np.testing.assert_array_equal(world.gallery_attributes[:, LAYOUT],
                                  world.gallery_scenes % 4)
    self.assertEqual(plain.gallery_attributes.shape[1], LAYOUT)
    self.assertEqual(world.config.attributes[-1], 'layout')

  def test_an_edit_keeps_the_layout_and_a_moved_scene_changes_it(self):
    test = self.world.test
    layout = self.world.gallery_attributes[:, LAYOUT]
    changed = layout[test.reference] != layout[test.target]
    self.assertFalse(test.named[:, LAYOUT].any())
    np.testing.assert_array_equal(test.unmentioned[:, LAYOUT], changed)
    self.assertTrue(0 < changed.mean() < 1)  # scene_shared=0.5
    np.testing.assert_array_equal(self.plain.test.unmentioned,
                                  test.unmentioned[:, :LAYOUT])

  def test_captions_name_the_layout_and_the_lexicon_reads_it(self):
    words = lexicon.LayoutLexicon()
    attrs = self.world.gallery_attributes
    for caption, row in zip(self.world.gallery_captions[:200], attrs):
      read = words.parse(caption)
      self.assertEqual(read.get(LAYOUT), row[LAYOUT], caption)
      self.assertEqual(read, {a: int(v) for a, v in enumerate(row)}, caption)
      # The seven-attribute lexicon reads no layout.
      self.assertNotIn(LAYOUT, lexicon.parse(caption))

  def test_the_pixels_show_the_layout(self):
    row = np.asarray(self.world.gallery_attributes[0])
    key, scene = jax.random.key(1), jax.random.key(2)
    clips = [np.asarray(generator.render(
        jnp.asarray(np.append(row[:LAYOUT], v)), key, scene_key=scene))
             for v in range(generator.NUM_LAYOUTS)]
    plain = np.asarray(generator.render(jnp.asarray(row[:LAYOUT]), key,
                                        scene_key=scene))
    # 'open' draws nothing; every other layout differs from it and from
    # each other.
    np.testing.assert_array_equal(clips[3], plain)
    for i in range(3):
      self.assertGreater(np.abs(clips[i] - plain).mean(), 0.01)
      for j in range(i):
        self.assertGreater(np.abs(clips[i] - clips[j]).mean(), 0.01)

  def test_config_errors(self):
    with self.assertRaisesRegex(ValueError, 'describe_layout needs '
                                'renditions >= 2'):
      generator.WorldConfig(describe_layout=True)
    with self.assertRaisesRegex(ValueError, 'attribute rows hold 7 or 8'):
      generator.attribute_names(6)


class UserTest(absltest.TestCase):

  def test_the_user_names_a_differing_layout_in_its_words(self):
    target = np.array([0, 1, 2, 3, 0, 1, 2, 1])
    shown = target.copy()
    shown[LAYOUT] = 0
    words = lexicon.LayoutLexicon()
    for language in simulated_user.LANGUAGES:
      user = simulated_user.SimulatedUser(simulated_user.UserConfig(
          style='paper', language=language))
      for session in range(20):
        fb = user.respond(session, 1, 0, 1, target, shown)
        self.assertEqual(fb.action, 'modify')
        self.assertEqual(fb.mentioned, {LAYOUT: 1})
        kind = user_language.phrasing_of(LAYOUT, 1, fb.text)
        self.assertIsNotNone(kind, fb.text)
        if kind == 'lexicon':  # the caption words: read by the lexicon
          self.assertEqual(words.parse(fb.text), {LAYOUT: 1}, fb.text)

  def test_jax_draws_decide_over_eight_attributes(self):
    target = jnp.array([0, 1, 2, 3, 0, 1, 2, 1])
    shown = target.at[LAYOUT].set(0)
    action, named, _ = simulated_user.decide(
        jax.random.key(0), target, shown,
        simulated_user.UserConfig(style='paper'))
    chex.assert_shape(named, (8,))
    self.assertEqual(int(action), simulated_user.MODIFY)
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(named)), [LAYOUT])

  def test_the_seven_attributes_split_of_phrasings_is_unchanged(self):
    # The split as drawn before the layout existed: one permutation per
    # value, attribute by attribute, from one generator.
    rng = np.random.default_rng(user_language.PHRASING_SEED)
    before = set()
    for name in generator.ATTRIBUTES:
      for value, phrases in user_language._OWN[name].items():  # pylint: disable=protected-access
        order = rng.permutation(len(phrases))
        for i in order[:max(1, len(phrases) // 2)]:
          before.add((name, value, phrases[int(i)]))
    held = user_language.dev_phrasings()
    self.assertEqual({h for h in held if h[0] != 'layout'}, before)
    self.assertLen({h for h in held if h[0] == 'layout'}, 4)


class LexiconTest(absltest.TestCase):

  def test_constraints_edits_and_questions(self):
    words = lexicon.LayoutLexicon()
    self.assertEqual(words.parse_constraint('layout: arch'), (LAYOUT, 2))
    self.assertIsNone(lexicon.parse_constraint('layout: arch'))
    self.assertEqual(words.constraint(LAYOUT, 1), 'layout: pole')
    edit = lexicon.canonical_edit({LAYOUT: 2, 6: 0})
    self.assertEqual(words.parse_edit(edit), {LAYOUT: 2, 6: 0})
    self.assertEqual(words.parse(lexicon.canonical_description({LAYOUT: 3})),
                     {LAYOUT: 3})
    for question in words.QUESTIONS['layout']:
      self.assertEqual(words.question_attribute(question), LAYOUT)
    self.assertIs(lexicon.for_attributes(7), lexicon)
    self.assertIsInstance(lexicon.for_attributes(8), lexicon.LayoutLexicon)

  def test_the_rules_reasoner_carries_the_layout(self):
    reasoner = rules.RulesReasoner(lexicon.LayoutLexicon())
    caption = 'two red circles moving left on grass by a fence at night'
    out = reasoner.intent([schemas.IntentRequest(
        'close, but under an arch instead', caption,
        schemas.SessionMemory())])[0]
    self.assertIn('under an arch', out['search'])
    reflect = reasoner.reflect([schemas.ReflectRequest(
        'close, but under an arch instead', caption,
        schemas.SessionMemory())])[0]
    self.assertIn('layout: arch', reflect['keep'])


class ReadingBenchmarkTest(absltest.TestCase):

  def test_the_layout_is_scored_with_the_worlds_lexicon(self):
    # eval_reading on a layout world reads replies with the layout's
    # lexicon: a read layout counts, and its memory item is readable.
    from recovr_jax.analysis import reading_benchmark  # pylint: disable=g-import-not-at-top
    turn = reading_benchmark.Turn(text='close, but under an arch instead',
                        action='modify', named={LAYOUT: 2},
                        changes={LAYOUT: 2}, kinds={LAYOUT: 'train'})
    intent = {'search': lexicon.canonical_description({LAYOUT: 2, 0: 1}),
              'edit': lexicon.canonical_edit({LAYOUT: 2})}
    reflect = {'sigma': 'pos', 'keep': ['layout: arch'], 'avoid': []}
    request = schemas.ReflectRequest(turn.text, 'x', schemas.SessionMemory())
    read = reading_benchmark.score([turn], [intent], [(request, reflect)],
                         words=lexicon.for_attributes(LAYOUT + 1))['train']
    self.assertEqual((read['intent']['recall'], read['intent']['edit_recall'],
                      read['reflect']['recall'],
                      read['reflect']['unreadable_items']), (1.0, 1.0, 1.0, 0))
    # The seven-attribute lexicon could not read it (what the benchmark
    # did before it took the world's lexicon).
    blind = reading_benchmark.score([turn], [intent], [(request, reflect)])['train']
    self.assertEqual((blind['intent']['recall'],
                      blind['reflect']['unreadable_items']), (0.0, 1))


class SourceTest(absltest.TestCase):

  def test_the_preset_reads_the_layout_checkpoints(self):
    data = world_source.WorldData.preset(
        'v2', world_fields={'describe_layout': True})
    self.assertTrue(data.world.describe_layout)
    self.assertTrue(data.checkpoint_dir.endswith('world_layout'))
    self.assertTrue(data.captioner_checkpoint.endswith('captioner_layout'))
    given = world_source.WorldData.preset(
        'v2', world_fields={'describe_layout': True}, checkpoint_dir='/x')
    self.assertEqual(given.checkpoint_dir, '/x')
    self.assertIsNone(world_source.WorldData.v2().captioner_checkpoint)


def _flags(root) -> dict:
  """A small layout run's flags (host driver, rules; benchmark v2, whose
  words these checks were written for)."""
  return dict(
      benchmark='v2', num_test_triplets=8, num_train_triplets=20, gallery_size=300,
      num_sessions=8, batch_size=8, num_turns=3, bootstrap_resamples=100,
      compilation_cache=False, plots=False, describe_layout=True,
      cache_dir=str(pathlib.Path(root) / 'cache'))


class RunTest(absltest.TestCase):
  """The member run end to end on a small gallery (one test: under
  pytest-xdist a shared set-up would run once per worker)."""

  def test_a_run_reads_the_layout_and_jit_equals_the_host(self):
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    host, jit = root / 'run', root / 'jit'
    methods = ['recovr', 'ivr']  # IVR asks questions and reads dialogues
    runs.run_of(
        **_flags(root), output_dir=str(host), methods=methods, user_draws='jax')
    resolved = json.loads((host / 'resolved_config.json').read_text())
    self.assertTrue(resolved['data']['world']['describe_layout'])
    self.assertTrue(resolved['data']['checkpoint_dir'].endswith(
        'world_layout'))
    self.assertTrue((host / 't2v_ceiling.json').is_file())
    rows = [json.loads(line) for line in
            (host / 'trajectories.jsonl').read_text().splitlines()]
    # ReCoVR's searches carry the layout it reads in the shown captions.
    words = lexicon.LayoutLexicon()
    searches = [t['search'] for r in rows if r['method'] == 'recovr'
                for t in r['turns'] if t.get('search')]
    self.assertTrue(any(LAYOUT in words.parse(s) for s in searches))

    # The jitted driver over eight attributes shows the same lists.
    runs.run_of(
        **_flags(root), output_dir=str(jit), methods=methods, simulation='jit')
    self.assertEqual(json.loads((jit / 'metrics.json').read_text()),
                     json.loads((host / 'metrics.json').read_text()))
    for h, j in zip((host / 'trajectories.jsonl').read_text().splitlines(),
                    (jit / 'trajectories.jsonl').read_text().splitlines()):
      h, j = json.loads(h), json.loads(j)
      for name in ('top10', 'action', 'feedback'):
        self.assertEqual([t.get(name) for t in h['turns']],
                         [t.get(name) for t in j['turns']], name)
    # The user named the layout it saw differ (the jitted records hold
    # what it named).
    mentioned = [t.get('mentioned') or {} for line in (
        jit / 'trajectories.jsonl').read_text().splitlines()
                 for t in json.loads(line)['turns']]
    self.assertTrue(any('layout' in m for m in mentioned))


class RefusalTest(absltest.TestCase):

  def test_what_the_layout_member_cannot_run_is_refused(self):
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    for extra, message in (
        (dict(reasoner='grounded'), '--describe_layout reads the layout '
         'with --reasoner=rules only'),
        (dict(benchmark='v1'), r'describe_layout needs renditions >= 2 .*'
         r'\(benchmark v1 renders 1 per video\)'),
        (dict(checkpoint_dir=encoders_dir('world_renditions')),
         'its encoders were trained without --describe_layout'),
        (dict(captioner_checkpoint=encoders_dir('captioner')),
         'trained without --describe_layout'),
        # And a layout checkpoint in a world without the layout.
        (dict(describe_layout=False,
              checkpoint_dir=encoders_dir('world_layout')),
         'trained with --describe_layout, the run is without it')):
      with self.subTest(str(extra)):
        with self.assertRaisesRegex(Exception, message):
          runs.run_of(
              **{**_flags(root), **extra}, output_dir=str(root / 'refused'),
              methods=['recovr'])
        self.assertFalse((root / 'refused' / 'metrics.json').exists())

  def test_a_preset_names_its_renditions_only_when_they_are_the_cause(self):
    with self.assertRaisesRegex(ValueError, r'\(benchmark v1 renders 1'):
      world_source.WorldData.preset('v1', {'describe_layout': True})
    with self.assertRaises(ValueError) as e:
      world_source.WorldData.preset('v2', {'pixel_noise': float('nan')})
    self.assertEqual(str(e.exception), 'pixel_noise must be a finite '
                     'standard deviation >= 0, got nan')

  def test_models_of_the_other_kind_of_world_are_refused_at_load(self):
    # Where no run checks (eval_world, the trainers): the loaders do.
    layout = generator.make_world(dataclasses.replace(
        SMALL, describe_layout=True))
    plain = generator.make_world(SMALL)
    with self.assertRaisesRegex(ValueError, 'world_renditions: trained '
                                'without --describe_layout; this world is '
                                'with it'):
      training.load_world_models(encoders_dir('world_renditions'), layout)
    with self.assertRaisesRegex(ValueError, 'world_layout: trained with '
                                '--describe_layout; this world is without'):
      training.load_world_models(encoders_dir('world_layout'), plain)
    fake = type('Fake', (), dict(info={'world': {'describe_layout': True}},
                                 directory='/c'))()
    with self.assertRaisesRegex(ValueError, 'the captioner in /c: '
                                'trained with --describe_layout'):
      training.caption_videos(plain, fake, plain.gallery_attributes[:2],
                              plain.video_keys([0, 1]))


  def test_seven_attribute_entry_points_refuse_the_flag(self):
    # Their data and models know seven attributes: refused at once, named.
    for entry in ('train_reasoner', 'train_adapter', 'eval_reasoners'):
      proc = forked.run(entry_points.module(entry), '--describe_layout',
                        '--renditions=4')
      self.assertNotEqual(proc.returncode, 0, entry)
      self.assertIn(f'{entry_points.module(entry)} does not take --describe_layout',
                    proc.stderr)


def encoders_dir(name: str) -> str:
  return str(paths.CHECKPOINTS /
             name)


if __name__ == '__main__':
  absltest.main()
