r"""FineCVR-1M's per-video feature files -> our gallery embeddings file.

    python -m experiments.data.import_finecvr \
        --features_dir=$FINECVR/embeddings/CLIP_RN50x4_high_8_640 \
        --annotations=$FINECVR/annotations/test_remaped.txt \
        --captions_json=captions.json --output=gallery.npz

reads ``<features_dir>/<name>.npy`` (``[8, 640]``: eight frames) of every
video in the split's ``id2vdoname_<split>.json`` (FDCA's test gallery is
the whole split), averages the frames and writes one row per video named
by its video name, as the annotation loader names the triplets' videos
(``recovr_jax/envs/files/finecvr.py``). FineCVR ships no per-video captions, and
the caption-based simulated user describes the target from its caption:
``--captions_json`` is a JSON object ``{"<video name>": "<caption>"}`` (e.g.
written by a video captioner); without it the file has no captions and a
run refuses it, naming the flag. Nothing is written when any input is bad.
Then:

    python -m experiments.run --flagfile=experiments/flagfiles/finecvr \
        --annotations=$FINECVR/annotations/test_remaped.txt \
        --gallery_embeddings=gallery.npz --text_encoder=my_clip:encode
"""

import json
import pathlib

from absl import app
from absl import flags

from experiments.common import cli
from experiments.common import data_flags
from recovr_jax.envs.files import data
from recovr_jax.envs.files import finecvr

_FEATURES = flags.DEFINE_string(
    'features_dir', None, "FineCVR's per-video feature folder "
    '(<name>.npy, [frames, D]).')
_CAPTIONS = flags.DEFINE_string(
    'captions_json', None, 'Optional JSON object {"<video name>": "<caption>"} '
    'for every video of the split (the caption user needs them).')
_ANNOTATIONS = data_flags.ANNOTATIONS
_OUTPUT = data_flags.OUTPUT
for _name in ('annotations', 'output'):  # in --helpshort
  flags.declare_key_flag(_name)


def _captions(path, names):
  try:
    given = json.loads(pathlib.Path(path).read_text(encoding='utf-8'))
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise app.UsageError(f'--captions_json {path}: not a readable JSON file '
                         f'({e})') from e
  if not isinstance(given, dict):
    raise app.UsageError(f'--captions_json {path}: expected a JSON object '
                         '{"<video name>": "<caption>"}')
  missing = [n for n in names if not isinstance(given.get(n), str)
             or not given[n].strip()]
  if missing:
    raise app.UsageError(f'--captions_json {path}: no caption for video '
                         f'{missing[0]!r} ({len(missing)} of {len(names)} '
                         'videos)')
  return [given[n].strip() for n in names]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  for flag in (_FEATURES, _ANNOTATIONS, _OUTPUT):
    if not flag.value:
      raise app.UsageError(f'--{flag.name} is required')
  out = pathlib.Path(_OUTPUT.value)
  if out.suffix not in ('.npz', '.safetensors'):
    raise app.UsageError(f'--output {out}: write .npz or .safetensors')
  try:
    ids = finecvr.load_names(_ANNOTATIONS.value)
    finecvr.load_triplets(_ANNOTATIONS.value, ids.values())  # checked
    names = [ids[k] for k in sorted(ids, key=int)]
    captions = (_captions(_CAPTIONS.value, names) if _CAPTIONS.value
                else None)
    video = finecvr.pooled_features(_FEATURES.value, names)
  except (ValueError, FileNotFoundError) as e:
    raise app.UsageError(str(e)) from e
  out.parent.mkdir(parents=True, exist_ok=True)
  data.save_embeddings(out, names, video, captions=captions)
  print(f'wrote {out}: {len(names)} videos x {video.shape[1]} (frames '
        'averaged)' + ('' if captions else '; no captions: give --captions_json '
                       'before a run, the caption user needs them'))


if __name__ == '__main__':
  cli.run(main)
