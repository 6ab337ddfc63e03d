"""absl flags shared by the real-data entry points: the real source's own
settings they read (declared once, on ``FilesData``) and --output."""

from absl import flags

from experiments.common import config_flags
from recovr_jax.envs.files import files_source

config_flags.define(files_source.FilesData, __name__,
                    only=('annotations', 'clip_dir', 'missing_ids'))
CLIP_DIR = flags.FLAGS['clip_dir']
ANNOTATIONS = flags.FLAGS['annotations']
MISSING_IDS = flags.FLAGS['missing_ids']
OUTPUT = flags.DEFINE_string(
    'output', None, 'The embeddings file to write, .npz or .safetensors '
    '(embed_videos: default gallery.npz).')
