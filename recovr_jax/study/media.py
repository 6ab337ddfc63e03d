"""What the study page shows for a gallery video: a small looping animation
(frames a data source renders itself, e.g. the embedded world's, upscaled;
on real data a folder of frame images per video id) or, without frames,
its caption.

Media are addressed by gallery index only (``0 <= index < N``), never by a
path from the request, so the app can serve nothing but the benchmark's
videos.
"""

import functools
import io
import pathlib

import numpy as np

_FRAME_SUFFIXES = ('.png', '.jpg', '.jpeg')
MAX_FRAMES = 8


def gif(frames: np.ndarray, size: int, frame_ms: int = 250) -> bytes:
  """``[F, H, W, 3]`` frames (uint8, or float in [0, 1]) as a looping GIF
  whose longer side is ``size`` pixels (nearest-neighbour upscaling)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  frames = np.asarray(frames)
  if frames.dtype != np.uint8:
    frames = np.round(np.clip(frames, 0.0, 1.0) * 255).astype(np.uint8)
  h, w = frames.shape[1:3]
  scale = size / max(h, w)
  shape = (max(1, round(w * scale)), max(1, round(h * scale)))
  images = [Image.fromarray(f).resize(shape, Image.NEAREST) for f in frames]
  out = io.BytesIO()
  images[0].save(out, format='GIF', save_all=True, append_images=images[1:],
                 duration=frame_ms, loop=0)
  return out.getvalue()


class Media:
  """Animations of gallery videos, cached after the first request."""

  def __init__(self, num_videos: int, frames_of=None, size: int = 192,
               has_frames=None):
    """``frames_of(index) -> [F, H, W, 3] or None``; None: captions only.
    ``has_frames(index) -> bool``: whether ``frames_of`` gives frames,
    found without reading them (None: whenever there is ``frames_of``)."""
    self.num_videos = num_videos
    self.size = size
    self._frames_of = frames_of
    self._has = has_frames
    self._gif = functools.lru_cache(maxsize=512)(self._make_gif)

  def has(self, index: int) -> bool:
    """Whether gallery video ``index`` has an animation (a page links one
    only then, and shows the caption alone otherwise)."""
    if self._frames_of is None:
      return False
    return True if self._has is None else bool(self._has(self.check(index)))

  def check(self, index: int) -> int:
    if not 0 <= index < self.num_videos:
      raise KeyError(f'no video {index} (gallery has {self.num_videos})')
    return index

  def animation(self, index: int) -> bytes | None:
    """The GIF of gallery video ``index`` or None (no frames for it)."""
    return self._gif(self.check(index))

  def _make_gif(self, index):
    if self._frames_of is None:
      return None
    frames = self._frames_of(index)
    return None if frames is None else gif(frames, self.size)


def folder_media(frames_dir, video_ids, size: int = 192) -> Media:
  """Real data: ``<frames_dir>/<video id>/`` (an id may hold ``/``: a
  nested folder) holds each video's frames as
  ``.png`` / ``.jpg`` files in name order (the layout
  ``experiments/data/embed_videos.py`` reads); a video without a folder is shown
  by its caption. Ids are looked up in ``video_ids``, never taken from a
  request."""
  root = pathlib.Path(frames_dir).resolve()
  if not root.is_dir():
    raise ValueError(f'--frames_dir {frames_dir} is not a directory')

  def files_of(index):
    # An id may name a nested folder (WebVid's 000/100), never one outside
    # the root.
    folder = (root / video_ids[index]).resolve()
    if (folder == root or not folder.is_relative_to(root) or
        not folder.is_dir()):
      return []
    return sorted(p for p in folder.iterdir()
                  if p.suffix.lower() in _FRAME_SUFFIXES)

  def frames_of(index):
    from PIL import Image  # pylint: disable=g-import-not-at-top
    files = files_of(index)
    if not files:
      return None
    pick = np.unique(np.linspace(0, len(files) - 1,
                                 min(MAX_FRAMES, len(files))).round())
    images = [Image.open(files[int(i)]).convert('RGB') for i in pick]
    first = images[0].size
    return np.stack([np.asarray(im.resize(first)) for im in images])

  return Media(len(video_ids), frames_of, size,
               has_frames=functools.lru_cache(maxsize=None)(
                   lambda i: bool(files_of(i))))


def of_run(source, built, frames_dir=None, size: int = 192) -> Media | None:
  """What a page shows of a built run's videos: the source's own rendering
  (``protocol.data_source.OwnMedia``, the world's), else the frame folders of
  ``frames_dir`` (real data), else None (captions only)."""
  from recovr_jax.protocol import data_source  # pylint: disable=g-import-not-at-top
  env = built.env
  if isinstance(source, data_source.OwnMedia):
    return Media(len(env.gallery), source.frames(built), size)
  if frames_dir:
    return folder_media(frames_dir, env.video_ids, size)
  return None
