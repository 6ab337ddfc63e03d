"""absl flags shared by the real-data entry points."""

from absl import flags

CLIP_DIR = flags.DEFINE_string(
    'clip_dir', None,
    'A local FlaxCLIPModel directory (FlaxCLIPModel.save_pretrained plus its '
    'tokenizer); nothing is downloaded.')

ANNOTATIONS = flags.DEFINE_string(
    'annotations', None,
    'A WebVid-CoVR-style CSV with columns pth1 (reference id), pth2 (target '
    'id), edit, txt1, txt2 (their captions).')
OUTPUT = flags.DEFINE_string(
    'output', None, 'The embeddings file to write, .npz or .safetensors '
    '(embed_videos: default gallery.npz).')
MISSING_IDS = flags.DEFINE_enum(
    'missing_ids', 'error', ['error', 'drop'],
    'An annotation id found in no embedding file. error: stop, naming the '
    'CSV row and column (or the file tried). drop: leave its rows out and '
    'list them (run: <output_dir>/dropped_rows.json, counted in '
    'metrics.json and report.md; import_covr: <output>.dropped.json).')
