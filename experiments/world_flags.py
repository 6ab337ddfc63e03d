"""absl flags of the embedded world, shared by the experiment entry points."""

from absl import app
from absl import flags

from recovr_jax.world import generator as world_lib

_DEFAULT = world_lib.WorldConfig()

_SEED = flags.DEFINE_integer('world_seed', _DEFAULT.seed,
                             'Seed of the generated world.', lower_bound=0)
_TEST_SHARE = flags.DEFINE_float(
    'test_share', _DEFAULT.test_share,
    'Share of attribute combinations held out as the test split.')
_FRAMES = flags.DEFINE_integer('num_frames', _DEFAULT.num_frames,
                               'Frames per clip (4..8).')
_NOISE = flags.DEFINE_float('pixel_noise', _DEFAULT.pixel_noise,
                            'Standard deviation of Gaussian pixel noise.')
_TEST_TRIPLETS = flags.DEFINE_integer('num_test_triplets',
                                      _DEFAULT.num_test_triplets,
                                      'Test triplets (distinct targets).')
_TRAIN_TRIPLETS = flags.DEFINE_integer('num_train_triplets',
                                       _DEFAULT.num_train_triplets,
                                       'Train triplets for the composer.')
_UNMENTIONED = flags.DEFINE_float(
    'unmentioned_share', _DEFAULT.unmentioned_share,
    'Share of triplets whose target also differs in attributes the edit does '
    'not name.')
_MAX_UNMENTIONED = flags.DEFINE_integer(
    'max_unmentioned', _DEFAULT.max_unmentioned,
    'Unnamed differences in such triplets: 1..max_unmentioned (0..2).')
_GALLERY = flags.DEFINE_integer(
    'gallery_size', None,
    'Test combinations in the gallery; default every test combination.')
_RENDITIONS = flags.DEFINE_integer(
    'renditions', _DEFAULT.renditions,
    'Gallery videos per combination (1..16): scenes that share everything '
    'words name and differ in layout and texture; a triplet\'s reference '
    'and target share a scene.')

_SCENE_SHARED = flags.DEFINE_float(
    'scene_shared', _DEFAULT.scene_shared,
    'Probability that a test triplet\'s target is in its reference\'s scene '
    '(rendition); else another scene. 1.0 (the default) as a CoVR target '
    'keeps its reference\'s scene; the benchmark family also uses 0.5 and '
    '0.0 (docs/benchmark.md). Needs --renditions >= 2 below 1.0.')

_DESCRIBE_LAYOUT = flags.DEFINE_bool(
    'describe_layout', _DEFAULT.describe_layout,
    'Make the scene\'s layout describable: each gallery video gets an '
    'eighth attribute, its scene\'s layout (fence, pole, arch or open; '
    'scene r has layout r % 4), drawn in the pixels and named by captions '
    'and the user\'s words, so words can tell renditions apart. Needs '
    '--renditions >= 2, encoders and a captioner trained for it '
    '(docs/benchmark.md). A benchmark-family axis; off in v1 and v2.')


def world_config(**overrides) -> world_lib.WorldConfig:
  """The ``WorldConfig`` of the flags (validated by ``WorldConfig``), with
  ``overrides`` of some fields (the runner's benchmark preset)."""
  return world_lib.WorldConfig(**{**world_fields(),
                                  'renditions': _RENDITIONS.value,
                                  **overrides})


def world_fields() -> dict:
  """The ``WorldConfig`` fields of the flags, --renditions only when given
  (a benchmark preset sets it otherwise)."""
  fields = dict(
      seed=_SEED.value, test_share=_TEST_SHARE.value,
      num_frames=_FRAMES.value, pixel_noise=_NOISE.value,
      num_test_triplets=_TEST_TRIPLETS.value,
      num_train_triplets=_TRAIN_TRIPLETS.value,
      unmentioned_share=_UNMENTIONED.value,
      max_unmentioned=_MAX_UNMENTIONED.value, gallery_size=_GALLERY.value,
      scene_shared=_SCENE_SHARED.value,
      describe_layout=_DESCRIBE_LAYOUT.value)
  if not flags.FLAGS['renditions'].using_default_value:
    fields['renditions'] = _RENDITIONS.value
  return fields


def require_seven_attributes(entry: str, why: str) -> None:
  """Refuses ``--describe_layout`` for an entry point whose data or models
  know the seven attributes only (``why``), before any work starts."""
  if _DESCRIBE_LAYOUT.value:
    raise app.UsageError(f'{entry} does not take --describe_layout: {why}')
