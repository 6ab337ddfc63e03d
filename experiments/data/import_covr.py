r"""CoVR / CoVR-2 per-video feature files -> our embeddings files.

    python -m experiments.data.import_covr --embeddings_dir=/data/covr/blip-vid-embs \
        --annotations=webvid8m-covr_test.csv --output=gallery.npz \
        --reference_output=references.npz

reads ``<embeddings_dir>/<pth>.pth`` for every ``pth1`` / ``pth2`` of the
CSV (``<page_dir>/<videoid>``: WebVid's page directory and video id, the
feature file's path under --embeddings_dir without ``.pth``) without torch
(a restricted unpickler that rebuilds float tensors only), pools each
video's frames (and BLIP-2 query tokens) to one row (--frame_pooling: by
default CoVR's, the CSV's per-frame ``scores``), and writes
the gallery (``--gallery=targets``: CoVR's test gallery, the set of targets;
``all``: targets and references) with the CSV's captions; references outside
the gallery go to ``--reference_output`` (the runner's
``--reference_embeddings``). Nothing is written when any input is bad. With
``--missing_ids=drop`` the rows naming a video without a file are dropped and
listed in ``<output>.dropped.json``. Then:

    python -m experiments.run --data=files --annotations=... \
        --gallery_embeddings=gallery.npz --reference_embeddings=references.npz \
        --clip_dir=... [--normalize_rows=false] [--missing_ids=drop]
"""

import json
import os
import pathlib
import tempfile

from absl import app
from absl import flags
import numpy as np

from experiments.common import cli
from experiments.common import data_flags
from recovr_jax.envs.files import covr_import
from recovr_jax.envs.files import data

_DIR = flags.DEFINE_string('embeddings_dir', None,
                           'Root of the per-video .pth feature files.')
_ANNOTATIONS = data_flags.ANNOTATIONS
_OUTPUT = data_flags.OUTPUT
_REF_OUTPUT = flags.DEFINE_string(
    'reference_output', None,
    'Reference embeddings to write (the references outside the gallery); '
    'required when --gallery=targets leaves references out.')
_GALLERY = flags.DEFINE_enum(
    'gallery', 'targets', ['targets', 'all'],
    'targets: the gallery is the set of targets (CoVR\'s test protocol); '
    'all: targets and references.')
_MISSING = data_flags.MISSING_IDS
for _name in ('annotations', 'output', 'missing_ids'):  # in --helpshort
  flags.declare_key_flag(_name)
_UNIT = flags.DEFINE_bool(
    'unit_tokens', True, 'Make every frame / token vector unit length '
    'before averaging (CoVR-2 averages unit tokens).')
_WEIGHTS = flags.DEFINE_string(
    'frame_weights', None, 'Optional .npz of per-frame weights, one array '
    'per video id (weighted mean over frames instead of the mean).')
_POOLING = flags.DEFINE_enum(
    'frame_pooling', 'auto', list(covr_import.FRAME_POOLING),
    "How a video's frames become one row, as CoVR's emb_pool. query "
    "(CoVR's default): a target's frames weighted by softmax(scores / 0.1) "
    "from the CSV's per-frame 'scores' column (videos that are never a "
    'target: the mean); mean; middle: the middle frame; auto: query when '
    'the CSV has a scores column, else mean.')


def _write_atomic(path: pathlib.Path, write):
  """``write(tmp_path)`` then rename onto ``path`` (same suffix)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=path.suffix, dir=path.parent)
  os.close(fd)
  try:
    write(pathlib.Path(tmp))
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  for flag in (_DIR, _ANNOTATIONS, _OUTPUT):
    if not flag.value:
      raise app.UsageError(f'--{flag.name} is required')
  outputs = [pathlib.Path(_OUTPUT.value)] + (
      [pathlib.Path(_REF_OUTPUT.value)] if _REF_OUTPUT.value else [])
  for out in outputs:
    if out.suffix not in ('.npz', '.safetensors'):
      raise app.UsageError(f'{out}: write .npz or .safetensors')
  weights = None
  if _WEIGHTS.value:
    try:
      with np.load(_WEIGHTS.value, allow_pickle=False) as f:
        weights = {k: f[k] for k in f.files}
    except Exception as e:  # pylint: disable=broad-except
      raise app.UsageError(f'--frame_weights {_WEIGHTS.value}: not a '
                           f'readable .npz ({e})') from e
  try:
    got = covr_import.import_features(
        _DIR.value, _ANNOTATIONS.value, gallery=_GALLERY.value,
        missing_ids=_MISSING.value, unit_tokens=_UNIT.value,
        frame_weights=weights, frame_pooling=_POOLING.value,
        progress=lambda s: print(s, flush=True))
  except (ValueError, FileNotFoundError) as e:
    raise app.UsageError(str(e)) from e
  if got.reference_ids and not _REF_OUTPUT.value:
    raise app.UsageError(
        f'{len(got.reference_ids)} references are not targets (first: '
        f'{got.reference_ids[0]!r}) and --gallery=targets leaves them out: '
        'give --reference_output (or --gallery=all)')
  out = outputs[0]
  _write_atomic(out, lambda p: data.save_embeddings(
      p, got.ids, got.video, captions=got.captions))
  if _REF_OUTPUT.value:
    _write_atomic(outputs[1], lambda p: data.save_embeddings(
        p, got.reference_ids, got.reference_video,
        captions=got.reference_captions))
  report = {'gallery': len(got.ids), 'references_outside': len(
      got.reference_ids), 'dropped_rows': got.dropped_rows,
            'missing_ids': got.missing_ids, **got.frames}
  if _MISSING.value == 'drop':
    dropped = out.with_name(out.name + '.dropped.json')
    dropped.write_text(json.dumps(report, indent=2) + '\n')
  print(f'wrote {out}: {len(got.ids)} gallery videos x '
        f'{got.video.shape[1]}' + (
            f'; {outputs[1]}: {len(got.reference_ids)} references'
            if _REF_OUTPUT.value else '') +
        f'; read {got.frames["videos_read"]} files (shapes '
        f'{got.frames["shapes"]}; frames pooled by '
        f'{got.frames["frame_pooling"]}, {got.frames["scored_targets"]} '
        f'targets by their scores), {len(got.missing_ids)} ids missing, '
        f'{len(got.dropped_rows)} CSV rows dropped' +
        (f' (listed in {dropped})' if _MISSING.value == 'drop' else ''))


if __name__ == '__main__':
  cli.run(main)
