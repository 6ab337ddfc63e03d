"""The embedded offline benchmark: a generated world of short videos.

Every video is rendered from a structured latent of seven attributes that are
visible in the pixels (shape, colour, count, motion, background, lighting,
size); 4 x 4 x 4 x 4 x 4 x 4 x 3 = 12,288 attribute combinations exist. Train
and test splits partition the combinations, so no combination is shared. The
test gallery holds test combinations only, and every test target has gallery
neighbours one attribute away (hard negatives).

Language comes from templates with synonyms and varied word order. Every
synonym occurs in training captions and edits (the split is over attribute
combinations, not words), because a frozen MiniLM separates unseen synonyms
poorly and the text side is kept frozen (locked-text tuning).

The whole world is a pure function of ``WorldConfig`` (its seed included).
"""

import dataclasses
import functools
import itertools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import config_tree

# Each attribute: values and, per value, phrases for captions and edits.
ATTRIBUTES = ('shape', 'colour', 'count', 'motion', 'background', 'lighting',
              'size')
VALUES = {
    'shape': ('circle', 'square', 'triangle', 'cross'),
    'colour': ('red', 'blue', 'yellow', 'white'),
    'count': ('one', 'two', 'three', 'four'),
    'motion': ('left', 'right', 'up', 'down'),
    'background': ('grass', 'sand', 'water', 'road'),
    'lighting': ('day', 'sunset', 'cloudy', 'night'),
    'size': ('small', 'medium', 'large'),
}
NUM_VALUES = tuple(len(VALUES[a]) for a in ATTRIBUTES)
NUM_ATTRIBUTES = len(ATTRIBUTES)  # of a combination (the layout aside)
NUM_COMBOS = int(np.prod(NUM_VALUES))  # 12,288

# (singular, plural) nouns per shape.
SHAPE_WORDS = {
    'circle': (('circle', 'circles'), ('disc', 'discs'), ('ball', 'balls')),
    'square': (('square', 'squares'), ('box', 'boxes'), ('block', 'blocks')),
    'triangle': (('triangle', 'triangles'), ('wedge', 'wedges')),
    'cross': (('cross', 'crosses'), ('plus sign', 'plus signs')),
}
COLOUR_WORDS = {
    'red': ('red', 'crimson', 'scarlet'),
    'blue': ('blue', 'azure', 'navy'),
    'yellow': ('yellow', 'golden', 'lemon'),
    'white': ('white', 'snowy', 'ivory'),
}
COUNT_WORDS = {  # the determiner; one takes the singular noun
    'one': ('one', 'a single', 'a lone'),
    'two': ('two', 'a pair of'),
    'three': ('three', 'a trio of'),
    'four': ('four', 'a group of four'),
}
MOTION_WORDS = {
    'left': ('moving left', 'drifting to the left', 'heading left'),
    'right': ('moving right', 'drifting to the right', 'heading right'),
    'up': ('moving up', 'rising', 'drifting upward'),
    'down': ('moving down', 'falling', 'sinking downward'),
}
BACKGROUND_WORDS = {
    'grass': ('on grass', 'over a lawn', 'in a grassy field'),
    'sand': ('on sand', 'on a sandy beach', 'over the dunes'),
    'water': ('over water', 'on a lake', 'above the sea'),
    'road': ('on a road', 'over asphalt', 'on a street'),
}
BACKGROUND_NOUNS = {
    'grass': ('grass', 'a lawn', 'a field'),
    'sand': ('sand', 'a beach', 'dunes'),
    'water': ('water', 'a lake', 'the sea'),
    'road': ('a road', 'asphalt', 'a street'),
}
LIGHTING_WORDS = {
    'day': ('in daylight', 'during the day', 'on a sunny day'),
    'sunset': ('at sunset', 'at dusk', 'in the evening glow'),
    'cloudy': ('on a cloudy day', 'under overcast skies', 'in grey weather'),
    'night': ('at night', 'in the dark', 'after dark'),
}
LIGHTING_NOUNS = {
    'day': ('daytime', 'daylight', 'a sunny day'),
    'sunset': ('sunset', 'dusk', 'evening'),
    'cloudy': ('cloudy weather', 'an overcast sky', 'grey weather'),
    'night': ('night', 'nighttime', 'darkness'),
}
SIZE_WORDS = {
    'small': ('small', 'tiny', 'little'),
    'medium': ('medium-sized', 'mid-sized', 'average-sized'),
    'large': ('large', 'big', 'huge'),
}

# The describable layout (``WorldConfig.describe_layout``): an eighth
# attribute of a gallery video, fixed by its scene (scene ``r`` has layout
# ``r % 4``), drawn as a dark structure behind the objects, so words can
# tell a combination's renditions apart. Not an attribute of a combination.
LAYOUT = 'layout'
VALUES[LAYOUT] = ('fence', 'pole', 'arch', 'open')
NUM_LAYOUTS = len(VALUES[LAYOUT])
LAYOUT_WORDS = {
    'fence': ('by a fence', 'beside a fence', 'along a fence'),
    'pole': ('by a pole', 'beside a pole', 'next to a post'),
    'arch': ('under an arch', 'beneath an arch', 'inside an archway'),
    'open': ('in the open', 'in an open space', 'with nothing around'),
}

# Rendering parameters.
_COLOURS = np.array([[0.9, 0.1, 0.1], [0.15, 0.3, 1.0], [1.0, 0.9, 0.1],
                     [1.0, 1.0, 1.0]], np.float32)
_BACKGROUNDS = np.array([[0.2, 0.55, 0.2], [0.8, 0.7, 0.45], [0.1, 0.4, 0.5],
                         [0.35, 0.35, 0.38]], np.float32)
_LIGHT_GAIN = np.array([[1.0, 1.0, 1.0], [1.0, 0.72, 0.5], [0.85, 0.85, 0.88],
                        [0.45, 0.5, 0.75]], np.float32)
_LIGHT_SATURATION = np.array([1.0, 1.0, 0.55, 0.8], np.float32)
_RADII = np.array([4.5, 6.0, 7.5], np.float32)
_DIRECTIONS = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.float32)  # x, y
_SPEED = 1.5  # pixels per frame
_MAX_OBJECTS = 4
_STRUCTURE = np.array([0.1, 0.08, 0.06], np.float32)  # the layout's colour


def _layout_mask(layout, h: int) -> jax.Array:
  """``[H, H]`` bool: where a layout's structure stands (fence: a rail
  and posts along the bottom; pole: a bar at the left edge; arch: a bar
  along the top and down both sides; open: nothing)."""
  yy, xx = jnp.meshgrid(jnp.arange(h), jnp.arange(h), indexing='ij')
  fence = ((yy >= h - 8) & (yy < h - 6)) | (
      (yy >= h - 10) & (yy < h - 2) & (jnp.mod(xx, 8) < 2))
  pole = (xx >= 2) & (xx < 5)
  arch = ((yy >= 1) & (yy < 4)) | ((yy < h // 2) & ((xx < 3) | (xx >= h - 3)))
  return jnp.select([layout == 0, layout == 1, layout == 2],
                    [fence, pole, arch], jnp.zeros((h, h), bool))


@dataclasses.dataclass(frozen=True)
class WorldConfig:
  """Everything that defines a world; the world is a pure function of it."""
  HELP_GROUP: ClassVar[str] = 'Benchmark and world'
  #: Seed of the generated world.
  seed: int = config_tree.setting(0, flag='world_seed', lower_bound=0)
  #: Share of attribute combinations held out as the test split.
  test_share: float = config_tree.setting(0.2)
  #: Frames per clip (4..8).
  num_frames: int = config_tree.setting(4)
  image_size: int = 32
  #: Standard deviation of Gaussian pixel noise.
  pixel_noise: float = config_tree.setting(0.03)
  #: Test triplets (distinct targets).
  num_test_triplets: int = config_tree.setting(500)
  #: Train triplets for the composer.
  num_train_triplets: int = config_tree.setting(20_000)
  #: Share of triplets whose target also differs in attributes the edit
  #: does not name.
  unmentioned_share: float = config_tree.setting(0.5)
  #: Unnamed differences in such triplets: 1..max_unmentioned (0..2).
  max_unmentioned: int = config_tree.setting(1)
  #: Test combinations in the gallery; default every test combination.
  gallery_size: int | None = config_tree.setting(None)
  #: Gallery videos per combination (1..16): scenes that share everything
  #: words name and differ in layout and texture; a triplet's reference and
  #: target share a scene.
  renditions: int = config_tree.setting(1, preset=True)
  #: Probability that a test triplet's target is in its reference's scene
  #: (rendition); else another scene. 1.0 (the default) as a CoVR target
  #: keeps its reference's scene; the benchmark family also uses 0.5 and 0.0
  #: (docs/benchmark.md). Needs --renditions >= 2 below 1.0. The scene is
  #: what no word names, so sharing it favours reference anchors.
  scene_shared: float = config_tree.setting(1.0)
  #: Make the scene's layout describable: each gallery video gets an eighth
  #: attribute, its scene's layout (fence, pole, arch or open; scene r has
  #: layout r % 4), drawn in the pixels and named by captions and the
  #: user's words, so words can tell renditions apart. Needs --renditions
  #: >= 2, encoders and a captioner trained for it (docs/benchmark.md). A
  #: benchmark-family axis; off in v1 and v2.
  describe_layout: bool = config_tree.setting(False)

  def __post_init__(self):
    if self.seed < 0:
      raise ValueError(f'seed must be >= 0, got {self.seed}')
    if not 0.0 <= self.pixel_noise < float('inf'):  # NaN fails too
      raise ValueError('pixel_noise must be a finite standard deviation >= '
                       f'0, got {self.pixel_noise}')
    if not 0.0 < self.test_share < 1.0:
      raise ValueError(f'test_share must be in (0, 1), got {self.test_share}')
    if not 4 <= self.num_frames <= 8:
      raise ValueError(f'num_frames must be in 4..8, got {self.num_frames}')
    if self.image_size < 24:
      raise ValueError(f'image_size must be >= 24, got {self.image_size}')
    if not 0.0 <= self.unmentioned_share <= 1.0:
      raise ValueError('unmentioned_share must be in [0, 1], got '
                       f'{self.unmentioned_share}')
    if not 0 <= self.max_unmentioned <= 2:
      raise ValueError(
          f'max_unmentioned must be in 0..2, got {self.max_unmentioned}')
    for name in ('num_test_triplets', 'num_train_triplets'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}')
    if self.gallery_size is not None and self.gallery_size < 1:
      raise ValueError(f'gallery_size must be >= 1, got {self.gallery_size}')
    if not 1 <= self.renditions <= 16:
      raise ValueError(f'renditions must be in 1..16, got {self.renditions}')
    if not 0.0 <= self.scene_shared <= 1.0:  # NaN fails too
      raise ValueError(f'scene_shared must be in [0, 1], got '
                       f'{self.scene_shared}')
    if self.scene_shared < 1.0 and self.renditions < 2:
      raise ValueError(f'scene_shared={self.scene_shared} needs renditions '
                       f'>= 2 (one rendition is one scene), got '
                       f'{self.renditions}')
    if self.describe_layout and self.renditions < 2:
      raise ValueError('describe_layout needs renditions >= 2 (the layout '
                       'is a scene\'s, and one rendition is one scene), got '
                       f'{self.renditions}')

  @property
  def attributes(self) -> tuple[str, ...]:
    """The names of a gallery video's attributes: ``ATTRIBUTES``, and
    ``'layout'`` last when the layout is describable."""
    return ATTRIBUTES + ((LAYOUT,) if self.describe_layout else ())


def check_layout(trained: dict, world_config, what: str) -> None:
  """Raises ``ValueError`` when ``what`` (a model trained on the world of
  the ``trained`` config fields) saw the layout and ``world_config`` has
  none, or the other way round: its clips or captions would not match."""
  theirs = bool(trained.get('describe_layout', False))
  if theirs != world_config.describe_layout:
    raise ValueError(
        f'{what}: trained {"with" if theirs else "without"} '
        f'--describe_layout; this world is '
        f'{"with" if world_config.describe_layout else "without"} it')


def attribute_names(num_attributes: int) -> tuple[str, ...]:
  """The attribute names of ``[..., num_attributes]`` attribute rows (7:
  ``ATTRIBUTES``; 8: and ``'layout'``)."""
  if num_attributes == NUM_ATTRIBUTES:
    return ATTRIBUTES
  if num_attributes == NUM_ATTRIBUTES + 1:
    return ATTRIBUTES + (LAYOUT,)
  raise ValueError(f'attribute rows hold {NUM_ATTRIBUTES} or '
                   f'{NUM_ATTRIBUTES + 1} values (with the layout), got '
                   f'{num_attributes}')


def value_names(values: dict, num_attributes: int) -> dict[str, str]:
  """``{attribute index: value index}`` of ``[..., num_attributes]``
  attribute rows as ``{attribute name: value name}``, by attribute."""
  names = attribute_names(num_attributes)
  return {names[a]: VALUES[names[a]][int(v)]
          for a, v in sorted(values.items())}


def num_values(num_attributes: int) -> tuple[int, ...]:
  """Values per attribute of ``[..., num_attributes]`` attribute rows."""
  return tuple(len(VALUES[a]) for a in attribute_names(num_attributes))


def scene_layouts(scenes) -> np.ndarray:
  """``[n]`` the layout (index into ``VALUES['layout']``) of each scene."""
  return np.asarray(scenes, np.int64) % NUM_LAYOUTS


@dataclasses.dataclass(frozen=True)
class Triplets:
  """Composed-retrieval triplets ``(reference, edit, target)``."""
  reference: np.ndarray  # [Q] int64 ids (gallery ids for test, combos train)
  target: np.ndarray     # [Q] int64
  edit: tuple[str, ...]  # [Q] modification texts
  named: np.ndarray      # [Q, A] bool, attributes the edit names
  unmentioned: np.ndarray  # [Q, A] bool, changed but not named


@dataclasses.dataclass(frozen=True)
class World:
  """A generated world (see the module docstring)."""
  config: WorldConfig
  combos: np.ndarray          # [12288, A] int32, every attribute combination
  is_test: np.ndarray         # [12288] bool, the test split
  gallery_combos: np.ndarray  # [G] int64 combination index of gallery video g
  gallery_scenes: np.ndarray  # [G] int64 its scene (rendition) index
  gallery_captions: tuple[str, ...]  # [G] one caption per gallery video
  test: Triplets              # reference / target are gallery ids
  train: Triplets             # reference / target are combination indices

  @property
  def gallery_attributes(self) -> np.ndarray:
    """``[G, A]`` int32 attribute values of the gallery videos (the
    layout last when ``config.describe_layout``)."""
    attrs = self.combos[self.gallery_combos]
    if not self.config.describe_layout:
      return attrs
    return np.concatenate([attrs, scene_layouts(self.gallery_scenes)[
        :, None].astype(np.int32)], axis=1)

  @property
  def gallery_ids(self) -> tuple[str, ...]:
    """``[G]`` unique video ids, ``'w<seed>-<combination index>'`` (and
    ``'-r<scene>'`` when combinations have several renditions)."""
    if self.config.renditions == 1:
      return tuple(f'w{self.config.seed}-{int(c):05d}'
                   for c in self.gallery_combos)
    return tuple(f'w{self.config.seed}-{int(c):05d}-r{int(r)}'
                 for c, r in zip(self.gallery_combos, self.gallery_scenes))

  @property
  def train_combos(self) -> np.ndarray:
    return np.flatnonzero(~self.is_test)

  def video_keys(self, combo_ids) -> jax.Array:
    """Rendering keys of gallery videos: fixed per combination and seed."""
    base = jax.random.key(self.config.seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(
        jnp.asarray(combo_ids, jnp.int32))

  def gallery_keys(self):
    """``(keys [G], scene_keys [G] or None)`` rendering the gallery: with
    one rendition per combination, a key per combination (the first
    benchmark's videos); with several, scene ``r`` fixes the layout and
    texture phase (``scene_keys``) and the key the rest."""
    if self.config.renditions == 1:
      return self.video_keys(self.gallery_combos), None
    base = jax.random.key(self.config.seed)
    keys = jax.vmap(lambda c, r: jax.random.fold_in(
        jax.random.fold_in(base, c), r))(
            jnp.asarray(self.gallery_combos, jnp.int32),
            jnp.asarray(self.gallery_scenes, jnp.int32))
    return keys, scene_keys(self.config.seed, self.gallery_scenes)


def scene_keys(seed: int, scenes) -> jax.Array:
  """The gallery's scene keys of ``[n]`` scene indices (training draws
  fresh random scene keys instead, so it never sees a gallery scene)."""
  base = jax.random.fold_in(jax.random.key(seed), 1_000_003)
  return jax.vmap(lambda r: jax.random.fold_in(base, r))(
      jnp.asarray(scenes, jnp.int32))


def all_combos() -> np.ndarray:
  """``[12288, A]`` int32, in lexicographic order of attribute values."""
  return np.array(list(itertools.product(*(range(n) for n in NUM_VALUES))),
                  np.int32)


def combo_index(attrs) -> np.ndarray:
  """Index into ``all_combos()`` of ``[..., A]`` attribute values."""
  attrs = np.asarray(attrs, np.int64)
  index = np.zeros(attrs.shape[:-1], np.int64)
  for a, n in enumerate(NUM_VALUES):
    index = index * n + attrs[..., a]
  return index


# ----------------------------------------------------------------- language --


def _pick(rng, options):
  return options[rng.integers(len(options))]


def _subject(rng, attrs, with_size=True, with_colour=True):
  """``'two small red circles'``: count, size, colour and shape words."""
  values = {a: VALUES[a][v] for a, v in zip(ATTRIBUTES, attrs)}
  det = _pick(rng, COUNT_WORDS[values['count']])
  noun = _pick(rng, SHAPE_WORDS[values['shape']])[
      0 if values['count'] == 'one' else 1]
  words = [det]
  if with_size:
    words.append(_pick(rng, SIZE_WORDS[values['size']]))
  if with_colour:
    words.append(_pick(rng, COLOUR_WORDS[values['colour']]))
  words.append(noun)
  return ' '.join(words)


def caption(rng: np.random.Generator, attrs) -> str:
  """A caption naming every attribute of ``attrs`` (seven, or eight with
  the layout, named after the background), with a random template."""
  values = {a: VALUES[a][v] for a, v in zip(attribute_names(len(attrs)),
                                           attrs)}
  subject = _subject(rng, attrs)
  motion = _pick(rng, MOTION_WORDS[values['motion']])
  place = _pick(rng, BACKGROUND_WORDS[values['background']])
  if LAYOUT in values:
    place = f'{place} {_pick(rng, LAYOUT_WORDS[values[LAYOUT]])}'
  light = _pick(rng, LIGHTING_WORDS[values['lighting']])
  template = rng.integers(5)
  if template == 0:
    return f'{subject} {motion} {place} {light}'
  if template == 1:
    return f'{light}, {subject} {motion} {place}'
  if template == 2:
    return f'{place} {light}: {subject} {motion}'
  if template == 3:
    return f'a video of {subject} {motion} {place} {light}'
  return f'{subject} {place}, {motion} {light}'


def edit_phrase(rng: np.random.Generator, attribute: str, value: int) -> str:
  """A short instruction that sets one attribute to ``value``."""
  v = VALUES[attribute][value]
  if attribute == 'shape':
    single, plural = _pick(rng, SHAPE_WORDS[v])
    return _pick(rng, (f'make it a {single}', f'change the shape to a {single}',
                       f'turn them into {plural}', f'{plural} instead'))
  if attribute == 'colour':
    c = _pick(rng, COLOUR_WORDS[v])
    return _pick(rng, (f'make it {c}', f'change the colour to {c}',
                       f'paint them {c}', f'{c} instead'))
  if attribute == 'count':
    n = {'one': 'one', 'two': 'two', 'three': 'three', 'four': 'four'}[v]
    return _pick(rng, (f'show {n} of them', f'use {n} objects',
                       f'make it {n} shapes', f'{n} objects instead'))
  if attribute == 'motion':
    m = _pick(rng, MOTION_WORDS[v])
    return _pick(rng, (f'have them {m.replace("moving ", "move ")}',
                       f'{m} instead', f'change the direction: {m}'))
  if attribute == 'background':
    place = _pick(rng, BACKGROUND_WORDS[v])
    noun = _pick(rng, BACKGROUND_NOUNS[v])
    return _pick(rng, (f'put it {place}', f'change the background to {noun}',
                       f'move the scene {place}', f'{place} instead'))
  if attribute == 'lighting':
    noun = _pick(rng, LIGHTING_NOUNS[v])
    light = _pick(rng, LIGHTING_WORDS[v])
    return _pick(rng, (f'make it {noun}', f'switch to {noun}',
                       f'show it {light}', f'{light} instead'))
  if attribute == LAYOUT:
    place = _pick(rng, LAYOUT_WORDS[v])
    return _pick(rng, (f'put it {place}', f'{place} instead',
                       f'change the layout: {place}'))
  size = _pick(rng, SIZE_WORDS[v])
  return _pick(rng, (f'make them {size}', f'{size} instead',
                     f'change the size to {size}'))


def edit_text(rng: np.random.Generator, attrs, named) -> str:
  """The modification text naming ``named`` attributes' values in ``attrs``."""
  names = attribute_names(len(attrs))
  phrases = [edit_phrase(rng, names[a], int(attrs[a]))
             for a in rng.permutation(np.flatnonzero(named))]
  if len(phrases) == 1:
    return phrases[0]
  joiner = _pick(rng, (' and ', ', ', '; also '))
  return joiner.join(phrases)


# ---------------------------------------------------------------- triplets --


def _neighbours(combos_in_split: set, attrs) -> list[int]:
  """Combination indices one attribute away from ``attrs`` within a set."""
  out = []
  for a, n in enumerate(NUM_VALUES):
    for v in range(n):
      if v != attrs[a]:
        other = np.array(attrs)
        other[a] = v
        idx = int(combo_index(other))
        if idx in combos_in_split:
          out.append(idx)
  return out


def _sample_triplets(rng, combos, pool: np.ndarray, count: int, config,
                     distinct_targets: bool):
  """Samples ``count`` triplets with both ends in ``pool`` (combo indices)."""
  in_pool = set(pool.tolist())
  order = rng.permutation(pool)
  refs, targets, edits, named_all, unmentioned_all = [], [], [], [], []
  i = 0
  attempts = 0
  while len(targets) < count:
    attempts += 1
    if attempts > 50 * count + 1000:
      raise ValueError(
          f'could only sample {len(targets)} of {count} triplets from '
          f'{len(pool)} combinations; lower the triplet count or raise '
          'test_share')
    if distinct_targets:
      if i >= len(order):
        raise ValueError(f'num_test_triplets={count} exceeds the '
                         f'{len(order)} test combinations')
      target = int(order[i])
      i += 1
      if not _neighbours(in_pool, combos[target]):
        continue  # every test target needs a hard negative in the gallery
    else:
      target = int(rng.choice(pool))
    t_attrs = combos[target]
    for _ in range(50):  # references for this target until one is in pool
      num_named = int(rng.integers(1, 3))
      num_unmentioned = 0
      if config.max_unmentioned and rng.random() < config.unmentioned_share:
        num_unmentioned = int(rng.integers(1, config.max_unmentioned + 1))
      changed = rng.permutation(NUM_ATTRIBUTES)[:num_named + num_unmentioned]
      r_attrs = t_attrs.copy()
      for a in changed:
        r_attrs[a] = (t_attrs[a] + rng.integers(1, NUM_VALUES[a])
                      ) % NUM_VALUES[a]
      ref = int(combo_index(r_attrs))
      if ref in in_pool:
        break
    else:
      continue
    named = np.zeros(NUM_ATTRIBUTES, bool)
    named[changed[:num_named]] = True
    unmentioned = np.zeros(NUM_ATTRIBUTES, bool)
    unmentioned[changed[num_named:]] = True
    refs.append(ref)
    targets.append(target)
    edits.append(edit_text(rng, t_attrs, named))
    named_all.append(named)
    unmentioned_all.append(unmentioned)
  return Triplets(reference=np.array(refs), target=np.array(targets),
                  edit=tuple(edits), named=np.array(named_all),
                  unmentioned=np.array(unmentioned_all))


def _split(rng, test_share: float) -> np.ndarray:
  num = NUM_COMBOS
  is_test = np.zeros(num, bool)
  is_test[rng.permutation(num)[:int(round(test_share * num))]] = True
  return is_test


def test_split(seed: int, test_share: float) -> np.ndarray:
  """``[12288]`` bool: the test split of the world with this seed and
  test share (what ``make_world`` draws first)."""
  return _split(np.random.default_rng(seed), test_share)


def make_world(config: WorldConfig = WorldConfig()) -> World:
  """The world of ``config``: splits, gallery, captions, triplets. Built
  once per config for the last few configs asked for (a run asks for its
  world more than once), its arrays read-only, since every caller holds the
  same one."""
  return _built_world(config)


@functools.lru_cache(maxsize=2)
def _built_world(config: WorldConfig) -> World:
  world = _build_world(config)
  for part in (world, world.test, world.train):
    for field in dataclasses.fields(part):
      value = getattr(part, field.name)
      if isinstance(value, np.ndarray):
        value.setflags(write=False)
  return world


def _build_world(config: WorldConfig) -> World:
  rng = np.random.default_rng(config.seed)
  combos = all_combos()
  is_test = _split(rng, config.test_share)
  test_pool = np.flatnonzero(is_test)
  train_pool = np.flatnonzero(~is_test)

  test = _sample_triplets(rng, combos, test_pool, config.num_test_triplets,
                          config, distinct_targets=True)
  train = _sample_triplets(rng, combos, train_pool, config.num_train_triplets,
                           config, distinct_targets=False)

  # The gallery: every test combination, or a subset that keeps each
  # triplet's reference, target and the target's one-away neighbours.
  if config.gallery_size is None or config.gallery_size >= len(test_pool):
    if config.gallery_size is not None and config.gallery_size > len(test_pool):
      raise ValueError(
          f'gallery_size={config.gallery_size} exceeds the {len(test_pool)} '
          'test combinations; raise test_share or lower gallery_size')
    gallery = test_pool
  else:
    test_set = set(test_pool.tolist())
    keep = set(test.reference.tolist()) | set(test.target.tolist())
    for t in test.target:
      keep.update(_neighbours(test_set, combos[t]))
    if len(keep) > config.gallery_size:
      raise ValueError(
          f'gallery_size={config.gallery_size} cannot hold the {len(keep)} '
          'references, targets and hard negatives of the test triplets')
    rest = rng.permutation(sorted(test_set - keep))
    gallery = np.sort(np.array(sorted(keep) + rest[:config.gallery_size -
                                                   len(keep)].tolist()))
  r = config.renditions
  # Each combination in `r` renditions (scenes 0..r-1); a triplet's
  # reference and target share a scene: the edit changes what words name and
  # keeps the rest, as a CoVR target keeps its reference's scene.
  gallery_scenes = np.tile(np.arange(r), len(gallery))
  gallery = np.repeat(gallery, r)
  position = {(int(c), int(s)): g
              for g, (c, s) in enumerate(zip(gallery, gallery_scenes))}
  scene = (np.zeros(len(test.target), np.int64) if r == 1 else
           rng.integers(r, size=len(test.target)))
  target_scene = _target_scenes(config, scene)
  test = dataclasses.replace(
      test, reference=np.array([position[int(c), int(s)]
                                for c, s in zip(test.reference, scene)]),
      target=np.array([position[int(c), int(s)]
                       for c, s in zip(test.target, target_scene)]))
  if config.describe_layout:  # an edit keeps the layout; a scene moved
    # to another rendition changes it, unnamed
    layout_changed = (scene_layouts(scene) != scene_layouts(target_scene))
    test = dataclasses.replace(
        test, named=np.concatenate([test.named, np.zeros_like(
            layout_changed)[:, None]], axis=1),
        unmentioned=np.concatenate([test.unmentioned,
                                    layout_changed[:, None]], axis=1))
    captions = tuple(caption(rng, np.append(combos[c], l)) for c, l in zip(
        gallery, scene_layouts(gallery_scenes)))
  else:
    captions = tuple(caption(rng, combos[c]) for c in gallery)
  return World(config=config, combos=combos, is_test=is_test,
               gallery_combos=gallery.astype(np.int64),
               gallery_scenes=gallery_scenes.astype(np.int64),
               gallery_captions=captions, test=test, train=train)


def _target_scenes(config: WorldConfig, scene: np.ndarray) -> np.ndarray:
  """``[Q]`` each target's scene: its reference's with probability
  ``scene_shared``, else one of the others, uniformly. Drawn from a stream
  of its own, so the default (1.0) world is the one it always was."""
  if config.scene_shared >= 1.0:
    return scene
  rng = np.random.default_rng([config.seed, 0x5CE4E])
  other = (scene + rng.integers(1, config.renditions, size=len(scene))) % (
      config.renditions)
  return np.where(rng.random(len(scene)) < config.scene_shared, scene, other)


def hard_negative_counts(world: World) -> np.ndarray:
  """``[Q]`` number of gallery videos one attribute away from each target."""
  gallery = set(world.gallery_combos.tolist())
  return np.array([len(_neighbours(gallery, world.gallery_attributes[t]))
                   for t in world.test.target])


# --------------------------------------------------------------- rendering --


def render(attrs, key, *, num_frames: int = 4, image_size: int = 32,
           pixel_noise: float = 0.03, scene_key=None) -> jax.Array:
  """Renders one clip; pure and jit-able, vmap it over a batch.

  Args:
    attrs: ``[A]`` int attribute values; an eighth value is the layout
      (``VALUES['layout']``), drawn as a dark structure behind the objects.
    key: a ``jax.random`` key: object positions, texture phase, pixel noise.
    scene_key: optional key of the scene: when given, the object positions
      and texture phase come from it (videos of one scene share a layout
      that words do not name) and ``key`` draws only jitter and noise.
    num_frames: frames ``F`` (static).
    image_size: height and width ``H`` (static).
    pixel_noise: standard deviation of the Gaussian pixel noise.

  Returns:
    ``[F, H, H, 3]`` float32 in ``[0, 1]``.
  """
  shape, colour, count, motion, background, lighting, size = (
      attrs[i] for i in range(NUM_ATTRIBUTES))
  k_pos, k_tex, k_noise, k_jit = jax.random.split(key, 4)
  if scene_key is not None:
    k_pos, k_tex = jax.random.split(scene_key)
  h = image_size
  yy, xx = jnp.meshgrid(jnp.arange(h, dtype=jnp.float32),
                        jnp.arange(h, dtype=jnp.float32), indexing='ij')
  t = jnp.arange(num_frames, dtype=jnp.float32)

  # Background: base colour and a texture that tells the surfaces apart.
  base = jnp.asarray(_BACKGROUNDS)[background]
  phase = jax.random.uniform(k_tex, (), maxval=2 * jnp.pi)
  grass = 0.12 * jnp.sin(1.9 * xx + phase + 0.7 * jnp.sin(0.5 * yy))
  sand = 0.08 * jnp.sin(0.9 * xx + 1.3 * yy + phase)
  water = 0.15 * jnp.sin(0.8 * yy[None] + phase + 0.9 * t[:, None, None])
  road = 0.25 * ((jnp.abs(yy - h / 2) < 1.0) & (jnp.mod(xx + phase * 3, 8) < 4))
  texture = jnp.select(
      [background == 0, background == 1, background == 2, background == 3],
      [jnp.broadcast_to(grass, (num_frames, h, h)),
       jnp.broadcast_to(sand, (num_frames, h, h)), water,
       jnp.broadcast_to(road, (num_frames, h, h))])
  frames = jnp.clip(base[None, None, None, :] + texture[..., None], 0, 1)
  if attrs.shape[0] > NUM_ATTRIBUTES:
    frames = jnp.where(_layout_mask(attrs[NUM_ATTRIBUTES], h)[..., None],
                       jnp.asarray(_STRUCTURE), frames)

  # Objects: one object goes anywhere its trajectory fits; several take
  # random quadrants (with jitter) so that they stay countable.
  radius = jnp.asarray(_RADII)[size]
  direction = jnp.asarray(_DIRECTIONS)[motion]
  travel = _SPEED * (num_frames - 1)
  margin = radius + 1.0
  low = margin + jnp.maximum(-direction, 0) * travel
  high = h - margin - jnp.maximum(direction, 0) * travel
  k_single, k_quad, k_shift = jax.random.split(k_pos, 3)
  single = low + jax.random.uniform(k_single, (2,)) * (high - low)
  quadrants = jnp.array([[9.0, 9.0], [23.0, 9.0], [9.0, 23.0], [23.0, 23.0]]
                        ) * (h / 32.0)
  spread = quadrants[jax.random.permutation(k_quad, _MAX_OBJECTS)] + (
      jax.random.uniform(k_shift, (_MAX_OBJECTS, 2), minval=-2.0, maxval=2.0)
  ) - direction * travel / 2
  start = jnp.where(count == 0, jnp.broadcast_to(single, spread.shape), spread)
  jitter = jax.random.uniform(k_jit, (_MAX_OBJECTS,), minval=0.9, maxval=1.1)
  centres = start[:, None, :] + direction * _SPEED * t[None, :, None]  # [O,F,2]
  dx = xx[None, None] - centres[..., 0, None, None]  # [O, F, H, H]
  dy = yy[None, None] - centres[..., 1, None, None]
  r = radius * jitter[:, None, None, None]
  circle = dx ** 2 + dy ** 2 <= r ** 2
  square = jnp.maximum(jnp.abs(dx), jnp.abs(dy)) <= 0.8 * r
  triangle = (dy <= 0.75 * r) & (dy >= -r + 2 * jnp.abs(dx) * 1.0)
  cross = ((jnp.abs(dx) <= 0.3 * r) | (jnp.abs(dy) <= 0.3 * r)) & (
      jnp.maximum(jnp.abs(dx), jnp.abs(dy)) <= r)
  mask = jnp.select([shape == 0, shape == 1, shape == 2, shape == 3],
                    [circle, square, triangle, cross])
  present = jnp.arange(_MAX_OBJECTS) <= count  # count index 0 means one
  mask = jnp.any(mask & present[:, None, None, None], axis=0)  # [F, H, H]

  # Lighting: gain and saturation; objects get the square root of the
  # background's gain, so they stay visible at night (as if lit).
  gain = jnp.asarray(_LIGHT_GAIN)[lighting]
  sat = jnp.asarray(_LIGHT_SATURATION)[lighting]
  obj = jnp.asarray(_COLOURS)[colour]
  obj = (jnp.mean(obj) + sat * (obj - jnp.mean(obj))) * jnp.sqrt(gain)
  gray = jnp.mean(frames, axis=-1, keepdims=True)
  frames = (gray + sat * (frames - gray)) * gain
  frames = jnp.where(mask[..., None], obj, frames)
  frames = frames + pixel_noise * jax.random.normal(k_noise, frames.shape)
  return jnp.clip(frames, 0.0, 1.0)


def render_batch(attrs, keys, *, num_frames: int = 4, image_size: int = 32,
                 pixel_noise: float = 0.03, scene_keys=None) -> jax.Array:
  """``[B, A]`` attributes and ``[B]`` keys (and optional ``[B]`` scene
  keys) -> ``[B, F, H, H, 3]`` clips."""
  if scene_keys is None:
    return jax.vmap(lambda a, k: render(a, k, num_frames=num_frames,
                                        image_size=image_size,
                                        pixel_noise=pixel_noise))(attrs, keys)
  return jax.vmap(lambda a, k, s: render(
      a, k, num_frames=num_frames, image_size=image_size,
      pixel_noise=pixel_noise, scene_key=s))(attrs, keys, scene_keys)
