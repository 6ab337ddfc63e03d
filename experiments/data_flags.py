"""absl flags shared by the real-data entry points."""

from absl import flags

CLIP_DIR = flags.DEFINE_string(
    'clip_dir', None,
    'A local FlaxCLIPModel directory (FlaxCLIPModel.save_pretrained plus its '
    'tokenizer); nothing is downloaded.')
