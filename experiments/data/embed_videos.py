r"""Embeds a folder of videos, given as frame images, with a local Flax CLIP.

    python -m experiments.data.embed_videos --clip_dir=/path/to/flax_clip \
        --videos_dir=/path/to/videos --output=gallery.npz

``videos_dir`` holds one folder per video, at any depth, with its frames as
``.png`` / ``.jpg`` files in name order; a video's id is its folder's path
under ``videos_dir`` (``page0/1234``, as WebVid-CoVR names its videos). With
``--annotations`` (a WebVid-CoVR CSV), each video's caption is its ``txt2``
(or ``txt1``), as ``import_covr`` writes it. The output (``.npz`` or
``.safetensors``) is what ``--gallery_embeddings`` of the runner reads.
"""

import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from experiments.common import cli
from experiments.common import data_flags
from recovr_jax import readers
from recovr_jax.envs.files import clip_encoder
from recovr_jax.envs.files import data

_CLIP_DIR = data_flags.CLIP_DIR
_VIDEOS_DIR = flags.DEFINE_string('videos_dir', None,
                                  'One sub-folder of frame images per video.')
_OUTPUT = data_flags.OUTPUT
for _name in ('clip_dir', 'output', 'annotations'):  # shown by --helpshort
  flags.declare_key_flag(_name)
# The runner's --annotations (a WebVid-CoVR CSV): here, each video's
# caption from it (the caption user reads them; without, the runner refuses
# the gallery); a video it does not name is an error.
_ANNOTATIONS = data_flags.ANNOTATIONS
_MAX_FRAMES = flags.DEFINE_integer('max_frames', 8,
                                   'Frames per video, evenly spaced.')
_EXTENSIONS = ('.png', '.jpg', '.jpeg')


def video_folders(videos_dir) -> list[pathlib.Path]:
  """The video folders (those holding frames, at any depth; a folder with
  neither frames nor sub-folders is an error), checked before any model is
  loaded."""
  root = pathlib.Path(videos_dir)
  if not root.is_dir():
    raise FileNotFoundError(f'--videos_dir {root} is not a directory')
  folders, pending = [], sorted(p for p in root.iterdir() if p.is_dir())
  if not pending:
    raise ValueError(f'--videos_dir {root} has no video sub-folders')
  while pending:
    folder = pending.pop(0)
    entries = list(folder.iterdir())
    if any(f.suffix.lower() in _EXTENSIONS and f.is_file() for f in entries):
      folders.append(folder)
      continue
    below = sorted(p for p in entries if p.is_dir())
    if not below:
      raise ValueError(f'video folder {folder} has no '
                       f'{"/".join(_EXTENSIONS)} frames')
    pending = below + pending
  return sorted(folders)


def video_id(root, folder: pathlib.Path) -> str:
  """A video's id: its folder's path under ``root``, with ``/``."""
  return folder.relative_to(root).as_posix()


def captions_for(annotations, ids) -> list[str]:
  """Each video's caption from a WebVid-CoVR CSV (``import_covr``'s);
  a video the CSV does not name is an error naming it."""
  from recovr_jax.envs.files import covr_import  # pylint: disable=g-import-not-at-top
  caption, named = covr_import.video_captions(data.load_covr_csv(annotations))
  absent = [v for v in ids if v not in named]
  if absent:
    raise ValueError(f'--annotations {annotations} names no video '
                     f'{absent[0]!r} ({len(absent)} of {len(ids)} videos are '
                     'absent; ids are folder paths under --videos_dir)')
  return [caption.get(v, '') for v in ids]


def read_frames(folder: pathlib.Path, max_frames: int) -> np.ndarray:
  """``[F, H, W, 3]`` uint8 frames, evenly spaced, at most ``max_frames``."""
  files = sorted(f for f in folder.iterdir()
                 if f.suffix.lower() in _EXTENSIONS)
  pick = np.unique(np.linspace(0, len(files) - 1, min(max_frames, len(files))
                               ).round().astype(int))
  frames = [readers.read_image(files[i]) for i in pick]
  sizes = {f.shape for f in frames}
  if len(sizes) != 1:
    raise ValueError(f'video folder {folder}: frames differ in size {sizes}')
  return np.stack(frames)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  for flag in (_CLIP_DIR, _VIDEOS_DIR):
    if not flag.value:
      raise app.UsageError(f'--{flag.name} is required')
  if _MAX_FRAMES.value < 1:
    raise app.UsageError('--max_frames must be >= 1')
  output = _OUTPUT.value or 'gallery.npz'
  if pathlib.Path(output).suffix not in ('.npz', '.safetensors'):
    raise app.UsageError('--output must end in .npz or .safetensors')
  try:  # the cheap checks first, then the model
    clip_encoder.check_clip_dir(_CLIP_DIR.value)
    folders = video_folders(_VIDEOS_DIR.value)
    ids = [video_id(_VIDEOS_DIR.value, f) for f in folders]
    captions = (captions_for(_ANNOTATIONS.value, ids) if _ANNOTATIONS.value
                else None)
    encoder = clip_encoder.ClipEncoder(_CLIP_DIR.value)
  except (OSError, ValueError) as e:
    raise app.UsageError(str(e)) from e
  start = time.time()
  last = start
  embeddings = []
  for i, folder in enumerate(folders):
    try:
      frames = read_frames(folder, _MAX_FRAMES.value)
    except (OSError, ValueError) as e:  # PIL: an unreadable image
      raise app.UsageError(f'video folder {folder}: {e}; nothing was '
                           'written') from e
    embeddings.append(encoder.encode_video(frames))
    if time.time() - last > 10 or i + 1 == len(folders):
      last = time.time()
      rate = (i + 1) / max(last - start, 1e-9)
      print(f'{i + 1}/{len(folders)} videos, {rate:.1f}/s, '
            f'{(len(folders) - i - 1) / rate:.0f}s left')
  data.save_embeddings(output, ids, np.stack(embeddings), captions)
  print(f'wrote {output}: {len(folders)} videos x {encoder.dim}')


if __name__ == '__main__':
  cli.run(main)
