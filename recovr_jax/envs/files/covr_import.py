"""CoVR / CoVR-2 per-video feature files as our embeddings files.

CoVR stores one ``torch.save`` file per video, ``<dir>/<pth>.pth`` where
``<pth>`` is the CSV's ``pth1`` / ``pth2`` value (``<page_dir>/<videoid>``):
frame embeddings ``[F, D]``, or ``[F, 32, D]`` query tokens for BLIP-2.
``import_features`` reads them without torch (``torch_files``), pools each
video to one ``[D]`` row and returns what ``data.save_embeddings`` writes.

Pooling: every frame (and token) vector is made unit length first when
``unit_tokens`` (CoVR-2 scores the average of unit tokens by a plain dot
product), then averaged over tokens and over frames. Over frames
(``frame_pooling``), as CoVR's ``emb_pool``: ``query`` (CoVR's default) weighs
a target's frames by ``softmax(scores / 0.1)``, ``scores`` being the CSV's
per-frame list for that target (an empty list: equal weights); ``mean``
and ``middle`` (the middle frame) need no scores; ``auto`` is ``query`` when
the CSV has a ``scores`` column, else ``mean``. CoVR scores only targets, so
a video that is never a target is averaged. The rows are not normalised
again here; the loader's ``--normalize_rows`` decides that.
"""

import ast
import dataclasses
import math
import pathlib
import time

import numpy as np

from recovr_jax import readers
from recovr_jax.envs.files import data
from recovr_jax.envs.files import torch_files

MISSING = ('error', 'drop')
FRAME_POOLING = ('auto', 'query', 'mean', 'middle')
# CoVR's softmax temperature over a target's frame scores (emb_pool=query).
SCORE_TEMPERATURE = 0.1


@dataclasses.dataclass(frozen=True)
class Imported:
  ids: tuple[str, ...]              # [N] gallery ids, CSV order
  video: np.ndarray                 # [N, D] float32 pooled rows
  captions: tuple[str, ...]         # [N] txt1 / txt2 of the CSV
  reference_ids: tuple[str, ...]    # references outside the gallery
  reference_video: np.ndarray       # their pooled rows
  reference_captions: tuple[str, ...]
  dropped_rows: list[dict]          # CSV rows dropped, with their ids
  missing_ids: list[str]            # ids with no file
  frames: dict                      # summary: files read, frames pooled


def feature_path(root: pathlib.Path, video_id: str) -> pathlib.Path:
  """``<root>/<video_id>.pth``; an id may not leave ``root``."""
  path = (root / f'{video_id}.pth').resolve()
  if root.resolve() not in path.parents:
    raise ValueError(f'video id {video_id!r} points outside '
                     f'--embeddings_dir {root}')
  return path


def video_captions(ann) -> tuple[dict, dict]:
  """``(captions, first rows)`` of a WebVid-CoVR annotation table's
  videos: each video's first non-empty caption (``txt2`` of a target,
  ``txt1`` of a reference, in row order) and the first CSV row naming it."""
  caption, first_row = {}, {}
  for row, (r, t, tr, tt) in enumerate(zip(
      ann.reference, ann.target, ann.reference_caption, ann.target_caption),
                                       start=2):
    for vid, text in ((t, tt), (r, tr)):
      first_row.setdefault(vid, row)
      if text and not caption.get(vid):
        caption[vid] = text
  return caption, first_row


def read_frame_scores(path) -> dict | None:
  """The CSV's ``scores`` column as ``{target id: [F] scores}`` (None
  without the column; a target with an empty list is left out: its frames
  weigh alike). Each value is a Python list literal of finite numbers, as
  CoVR writes it; a target listed twice keeps its first row's scores."""
  table = readers.read_csv(path, ('pth2',), what='annotation CSV')
  if 'scores' not in table.header:
    return None
  out = {}
  for number, row in zip(table.numbers, table.rows):
    text = row['scores'] or '[]'
    try:
      value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
      raise ValueError(f"{path}: row {number}, column 'scores': not a list "
                       f'of numbers ({text[:60]!r})') from e
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and
        math.isfinite(v) for v in value):
      raise ValueError(f"{path}: row {number}, column 'scores': expected a "
                       f'list of finite numbers, got {text[:60]!r}')
    if value:
      out.setdefault(row['pth2'], np.asarray(value, np.float64))
  return out


def score_weights(scores: np.ndarray) -> np.ndarray:
  """CoVR's frame weights: ``softmax(scores / 0.1)``."""
  scores = np.asarray(scores, np.float64)
  with np.errstate(over='ignore'):
    z = scores / SCORE_TEMPERATURE
    if not np.isfinite(z).all():
      # Scores near float64's limit: shifted by the largest first, so any
      # finite scores give finite weights (a difference beyond float64 is
      # -inf: weight 0).
      z = (scores - scores.max()) / SCORE_TEMPERATURE
  w = np.exp(z - z.max())
  return w / w.sum()


def pool(array: np.ndarray, path, unit_tokens: bool = True,
         weights: np.ndarray | None = None,
         middle: bool = False) -> np.ndarray:
  """``[F, D]`` or ``[F, T, D]`` (or ``[D]``) -> ``[D]`` float32: the mean
  over frames, weighted by ``weights``, or the middle frame."""
  x = np.asarray(array, np.float32)
  if x.ndim == 1:
    x = x[None]
  if x.ndim not in (2, 3) or x.shape[0] == 0 or x.shape[-1] == 0:
    raise ValueError(f'{path}: expected frame embeddings [F, D] or '
                     f'[F, T, D], got shape {x.shape}')
  if not np.isfinite(x).all():
    raise ValueError(f'{path}: holds NaN or inf')
  if unit_tokens:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    if (norms == 0).any():
      raise ValueError(f'{path}: a frame/token vector is all zeros')
    x = x / norms
  if x.ndim == 3:
    x = x.mean(axis=1)
  if middle:
    return x[len(x) // 2]
  if weights is None:
    return x.mean(axis=0)
  w = np.asarray(weights, np.float32).reshape(-1)
  if w.shape[0] != x.shape[0] or (w < 0).any() or w.sum() <= 0:
    raise ValueError(f'{path}: frame weights must be {x.shape[0]} '
                     f'non-negative values with a positive sum, got {w}')
  return (w[:, None] * x).sum(axis=0) / w.sum()


def import_features(embeddings_dir, annotations, *, gallery: str = 'targets',
                    missing_ids: str = 'error', unit_tokens: bool = True,
                    frame_weights: dict | None = None,
                    frame_pooling: str = 'auto',
                    progress=print) -> Imported:
  """Reads the features of every video the CSV names.

  Args:
    embeddings_dir: the root of the ``.pth`` files.
    annotations: the WebVid-CoVR CSV (``data.load_covr_csv``).
    gallery: ``targets`` (CoVR's test gallery: the set of targets;
      references come separately) or ``all`` (targets and references).
    missing_ids: ``error`` (a missing file stops the import, naming the CSV
      row and the path tried) or ``drop`` (rows naming a missing video are
      dropped and reported).
    unit_tokens: make every frame/token vector unit length before pooling.
    frame_weights: optional ``{video id: [F] weights}`` (with
      ``frame_pooling`` ``auto`` or ``mean``).
    frame_pooling: ``FRAME_POOLING`` (module docstring).
    progress: called with a line at least every 10 s.

  Raises:
    ValueError: naming the file (and CSV row) of any bad input.
  """
  if gallery not in ('targets', 'all'):
    raise ValueError(f'--gallery must be targets or all, got {gallery!r}')
  if missing_ids not in MISSING:
    raise ValueError(f'--missing_ids must be error or drop, got '
                     f'{missing_ids!r}')
  if frame_pooling not in FRAME_POOLING:
    raise ValueError(f'--frame_pooling must be one of '
                     f'{", ".join(FRAME_POOLING)}, got {frame_pooling!r}')
  root = pathlib.Path(embeddings_dir)
  if not root.is_dir():
    raise ValueError(f'--embeddings_dir {root} is not a directory')
  ann = data.load_covr_csv(annotations)
  scores = read_frame_scores(annotations)
  if frame_pooling == 'auto':
    frame_pooling = 'mean' if scores is None or frame_weights else 'query'
  if frame_pooling == 'query' and scores is None:
    raise ValueError(f'{annotations}: --frame_pooling=query needs a '
                     "'scores' column (CoVR's per-frame scores); use "
                     '--frame_pooling=mean or middle')
  if frame_weights is not None and frame_pooling != 'mean':
    raise ValueError('--frame_weights gives the frame weights itself: use '
                     f'it with --frame_pooling=auto or mean, not '
                     f'{frame_pooling}')
  caption, first_row = video_captions(ann)
  wanted = list(dict.fromkeys(ann.target + ann.reference))
  pooled, missing, dim_of = {}, [], None
  shapes = {}
  start = last = time.time()
  for n, vid in enumerate(wanted, 1):
    path = feature_path(root, vid)
    if not path.is_file():
      if missing_ids == 'error':
        raise ValueError(
            f'{annotations}: row {first_row[vid]} names video {vid!r} but '
            f'{path} does not exist (--missing_ids=drop drops such rows and '
            'reports them)')
      missing.append(vid)
      continue
    array = torch_files.load(path)
    if not isinstance(array, np.ndarray):
      raise ValueError(f'{path}: expected one tensor, got a '
                       f'{type(array).__name__}')
    weights = None if frame_weights is None else frame_weights.get(vid)
    if frame_weights is not None and weights is None:
      raise ValueError(f'--frame_weights has no weights for {vid!r} ({path})')
    if frame_pooling == 'query' and vid in scores:
      frames = np.shape(array)[0] if np.ndim(array) > 1 else 1
      if len(scores[vid]) != frames:
        raise ValueError(
            f"{annotations}: the 'scores' of target {vid!r} list "
            f'{len(scores[vid])} frames, but {path} holds {frames}')
      weights = score_weights(scores[vid])
    row = pool(array, path, unit_tokens, weights,
               middle=frame_pooling == 'middle')
    if dim_of is None:
      dim_of = (row.shape[0], path)
    elif row.shape[0] != dim_of[0]:
      raise ValueError(f'{path}: embedding size {row.shape[0]}, but '
                       f'{dim_of[1]} has {dim_of[0]} (mixed feature files)')
    pooled[vid] = row
    shapes[array.shape] = shapes.get(array.shape, 0) + 1
    now = time.time()
    if now - last >= 10 or n == len(wanted):
      last = now
      progress(f'[import] {n}/{len(wanted)} videos, {len(missing)} missing, '
               f'{n / max(now - start, 1e-9):.0f}/s')
  dropped = []
  missing_set = set(missing)
  keep_rows = []
  for i, (r, t) in enumerate(zip(ann.reference, ann.target)):
    gone = [v for v in (r, t) if v in missing_set]
    if gone:
      dropped.append({'row': i + 2, 'pth1': r, 'pth2': t, 'missing': gone})
    else:
      keep_rows.append(i)
  if not keep_rows:
    raise ValueError(f'{annotations}: every row names a missing video; '
                     'nothing to import')
  targets = list(dict.fromkeys(ann.target[i] for i in keep_rows))
  refs = list(dict.fromkeys(ann.reference[i] for i in keep_rows))
  ids = targets + ([v for v in refs if v not in set(targets)]
                   if gallery == 'all' else [])
  outside = [v for v in refs if v not in set(ids)]
  stack = lambda vs: (np.stack([pooled[v] for v in vs]).astype(np.float32)
                      if vs else np.zeros((0, dim_of[0]), np.float32))
  return Imported(
      ids=tuple(ids), video=stack(ids),
      captions=tuple(caption.get(v, '') for v in ids),
      reference_ids=tuple(outside), reference_video=stack(outside),
      reference_captions=tuple(caption.get(v, '') for v in outside),
      dropped_rows=dropped, missing_ids=sorted(missing_set),
      frames={'videos_read': len(pooled), 'missing': len(missing),
              'frame_pooling': frame_pooling,
              'scored_targets': (0 if frame_pooling != 'query' else
                                 sum(v in scores for v in pooled)),
              'shapes': {str(list(k)): v for k, v in shapes.items()}})
