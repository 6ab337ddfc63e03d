"""FineCVR-1M's files (Wu et al., ICLR 2025; github.com/May2333/FDCA).

The annotations are the authors' ``annotations/{train,test}_remaped.txt``:
tab-separated lines without a header, fields ``idx, ref, target, cap,
source, class_id`` (read without quoting), where ``ref`` and ``target`` are
integer video ids that ``annotations/id2vdoname_{train,test}.json`` maps to
video names (FDCA's ``data_utils.py``, ``ComposedVideoDataset.__init__``,
lines 136-151). Each video's features are ``<name>.npy`` of shape ``[8, D]``
(eight frames of CLIP RN50x4, ``D = 640``; ``utils.extract_index_features``,
line 46); its test gallery is every video of the split's map. Gallery ids
here are the video names, so the features' rows and the triplets meet.
"""

import pathlib

import numpy as np

from recovr_jax import readers

FIELDS = ('idx', 'ref', 'target', 'cap', 'source', 'class_id')


def is_finecvr(path) -> bool:
  """Whether an annotation file is read as FineCVR's (``.txt``)."""
  return pathlib.Path(path).suffix == '.txt'


def names_file(path) -> pathlib.Path:
  """The id -> video name map beside ``path``: ``id2vdoname_<split>.json``
  for ``<split>_remaped.txt`` (``<split>``: the name's first ``_`` part)."""
  path = pathlib.Path(path)
  split = path.stem.split('_')[0]
  return path.with_name(f'id2vdoname_{split}.json')


def load_names(path) -> dict[str, str]:
  """FineCVR's ``id2vdoname_<split>.json`` of the annotation file ``path``:
  ``{"<integer id>": "<video name>"}``; errors name the file and key."""
  file = names_file(path)
  if not file.is_file():
    raise FileNotFoundError(
        f'{path}: FineCVR annotations need their video-name map {file} '
        f'(id2vdoname_<split>.json in the same directory)')
  names = readers.read_json(file, 'video-name map')
  if not isinstance(names, dict) or not names:
    raise ValueError(f'{file}: expected a non-empty JSON object '
                     '{"<id>": "<video name>"}')
  for key, name in names.items():
    if not key.strip().isdigit():
      raise ValueError(f'{file}: key {key!r} is not an integer video id')
    if not isinstance(name, str) or not name.strip():
      raise ValueError(f'{file}: key {key!r}: expected a video name, got '
                       f'{name!r}')
  return {k.strip(): v.strip() for k, v in names.items()}


def load_triplets(path, video_ids=None):
  """``(reference names, target names, modification texts)`` of a FineCVR
  annotation file. ``video_ids``: known video names (a name outside them
  is an error). Errors name the file, line and field."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'annotation file {path} does not exist')
  names = load_names(path)
  known = None if video_ids is None else set(video_ids)
  lines = readers.read_text(path, 'annotation file').splitlines()
  while lines and not lines[-1].strip():  # trailing blank lines
    lines.pop()
  out = ([], [], [])
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      raise ValueError(f'{path}: line {number} is empty (each line is one '
                       'triplet)')
    fields = line.split('\t')
    if len(fields) != len(FIELDS):
      raise ValueError(f'{path}: line {number} has {len(fields)} '
                       f'tab-separated fields; expected {len(FIELDS)} '
                       f'({", ".join(FIELDS)})')
    row = dict(zip(FIELDS, (f.strip() for f in fields)))
    videos = []
    for field in ('ref', 'target'):
      key = row[field]
      if key not in names:
        raise ValueError(f'{path}: line {number}, field {field!r}: video id '
                         f'{key!r} is not in {names_file(path).name}')
      name = names[key]
      if known is not None and name not in known:
        raise ValueError(f'{path}: line {number}, field {field!r}: unknown '
                         f'video {name!r} (id {key}; in no embedding file; '
                         '--missing_ids=drop leaves such lines out)')
      videos.append(name)
    if not row['cap']:
      raise ValueError(f'{path}: line {number}, field \'cap\' is empty')
    if videos[0] == videos[1]:
      raise ValueError(f'{path}: line {number}: the reference and the '
                       f'target are the same video {videos[0]!r}')
    for column, value in zip(out, (*videos, row['cap'])):
      column.append(value)
  if not out[0]:
    raise ValueError(f'{path}: no data lines')
  return tuple(tuple(c) for c in out)


def pooled_features(features_dir, names) -> np.ndarray:
  """``[N, D]`` float32: each video's ``<features_dir>/<name>.npy``
  (``[frames, D]``) averaged over its frames; errors name the file."""
  rows = []
  for name in names:
    file = pathlib.Path(features_dir) / f'{name}.npy'
    if not file.is_file():
      raise FileNotFoundError(f'{file}: no feature file for video {name!r}')
    try:
      x = np.load(file, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:  # EOFError: an empty file
      raise ValueError(f'{file}: not a readable NumPy array file ({e})') from e
    if x.ndim == 1:
      x = x[None]
    if x.ndim != 2 or not len(x):
      raise ValueError(f'{file}: shape {x.shape}; expected [frames, D]')
    if rows and x.shape[1] != rows[0].shape[0]:
      raise ValueError(f'{file}: dimension {x.shape[1]}; the first video '
                       f'has {rows[0].shape[0]}')
    if not np.isfinite(x).all():
      raise ValueError(f'{file}: NaN or inf values')
    rows.append(x.astype(np.float32).mean(axis=0))
  return np.stack(rows)
