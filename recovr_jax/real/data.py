"""Real data (DESIGN section 9): WebVid-CoVR-style annotations and
precomputed gallery embeddings.

Every check runs before any model work and names the file, row and column.
Rows are counted as in a spreadsheet: the header is row 1, the first data row
is row 2.
"""

import csv
import dataclasses
import io
import json
import pathlib

import numpy as np

REQUIRED_COLUMNS = ('pth1', 'pth2', 'edit', 'txt1', 'txt2')


@dataclasses.dataclass(frozen=True)
class CovrAnnotations:
  """Composed-retrieval triplets from a WebVid-CoVR-style CSV."""
  reference: tuple[str, ...]  # pth1: reference video id
  target: tuple[str, ...]     # pth2: target video id
  edit: tuple[str, ...]       # modification text
  reference_caption: tuple[str, ...]  # txt1
  target_caption: tuple[str, ...]     # txt2


@dataclasses.dataclass(frozen=True)
class GalleryEmbeddings:
  """Precomputed video embeddings of a gallery."""
  ids: tuple[str, ...]   # [N] video ids
  video: np.ndarray      # [N, D] float32, rows L2-normalised on load
  captions: tuple[str, ...] | None  # [N] or None

  def index(self) -> dict[str, int]:
    return {v: i for i, v in enumerate(self.ids)}


def load_covr_csv(path, video_ids=None) -> CovrAnnotations:
  """Reads a WebVid-CoVR-style annotation CSV.

  Args:
    path: the CSV file; columns ``pth1, pth2, edit, txt1, txt2`` are required,
      extra columns are ignored.
    video_ids: optional collection of known video ids; a ``pth1`` or ``pth2``
      outside it is an error.

  Raises:
    FileNotFoundError, ValueError: naming the file, row and column.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'annotation file {path} does not exist')
  known = None if video_ids is None else set(video_ids)
  columns = {c: [] for c in REQUIRED_COLUMNS}
  try:
    text = path.read_bytes().decode('utf-8-sig')  # a BOM is not a column
  except UnicodeDecodeError as e:
    line = path.read_bytes()[:e.start].count(b'\n') + 1
    raise ValueError(f'{path}: not UTF-8 text (line {line}, byte '
                     f'{e.start}: {e.reason}); save it as UTF-8') from e
  with io.StringIO(text, newline='') as f:
    reader = csv.DictReader(f)
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
      raise ValueError(f'{path}: missing column(s) {", ".join(missing)}; '
                       f'required: {", ".join(REQUIRED_COLUMNS)}; found: '
                       f'{", ".join(header) or "no header"}')
    for row_number, row in enumerate(reader, start=2):
      for c in REQUIRED_COLUMNS:
        value = row.get(c)
        if value is None:
          raise ValueError(f'{path}: row {row_number} has no value in column '
                           f'{c!r} (too few fields)')
        value = value.strip()
        if c in ('pth1', 'pth2', 'edit') and not value:
          raise ValueError(f'{path}: row {row_number}, column {c!r} is empty')
        if c in ('pth1', 'pth2') and known is not None and value not in known:
          raise ValueError(f'{path}: row {row_number}, column {c!r}: unknown '
                           f'video id {value!r} (not in the gallery)')
        columns[c].append(value)
      if columns['pth1'][-1] == columns['pth2'][-1]:
        raise ValueError(f'{path}: row {row_number}: the reference (pth1) '
                         f'and the target (pth2) are the same video '
                         f'{columns["pth1"][-1]!r}; the reference is excluded '
                         'from retrieval, so no method could ever find it')
  if not columns['pth1']:
    raise ValueError(f'{path}: no data rows')
  return CovrAnnotations(
      reference=tuple(columns['pth1']), target=tuple(columns['pth2']),
      edit=tuple(columns['edit']), reference_caption=tuple(columns['txt1']),
      target_caption=tuple(columns['txt2']))


def save_embeddings(path, ids, video, captions=None) -> None:
  """Writes ``.npz`` or ``.safetensors`` readable by ``load_embeddings``."""
  path = pathlib.Path(path)
  video = np.asarray(video, np.float32)
  if path.suffix == '.npz':
    extra = {} if captions is None else {'captions': np.array(captions, str)}
    np.savez(path, ids=np.array(ids, str), video=video, **extra)
  elif path.suffix == '.safetensors':
    from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
    metadata = {'ids': json.dumps(list(ids))}
    if captions is not None:
      metadata['captions'] = json.dumps(list(captions))
    save_file({'video': video}, str(path), metadata=metadata)
  else:
    raise ValueError(f'{path}: unknown embeddings format {path.suffix!r}; '
                     'use .npz or .safetensors')


def load_embeddings(path, dim: int | None = None) -> GalleryEmbeddings:
  """Reads precomputed gallery embeddings.

  ``.npz``: arrays ``ids`` (strings), ``video`` ``[N, D]``, optional
  ``captions``. ``.safetensors``: tensor ``video`` and metadata ``ids``
  (a JSON list of strings), optional metadata ``captions`` (JSON list).

  Args:
    path: the file.
    dim: the expected embedding size ``D``, or ``None`` to accept any.

  Raises:
    FileNotFoundError, ValueError: naming the file, row and column (field).
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'embeddings file {path} does not exist')
  if path.suffix == '.npz':
    try:
      with np.load(path, allow_pickle=False) as data:
        fields = dict(data.items())
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'{path}: not a readable .npz archive ({type(e).__name__}'
                       f': {e}); expected arrays ids, video and optional '
                       'captions') from e
    for key in ('ids', 'video'):
      if key not in fields:
        raise ValueError(f'{path}: missing array {key!r}; found '
                         f'{", ".join(sorted(fields))}')
    ids = [str(x) for x in np.asarray(fields['ids']).reshape(-1)]
    video = fields['video']
    captions = fields.get('captions')
    captions = None if captions is None else [str(c) for c in captions]
  elif path.suffix == '.safetensors':
    from safetensors import safe_open  # pylint: disable=g-import-not-at-top
    try:
      with safe_open(str(path), framework='numpy') as f:
        metadata = f.metadata() or {}
        keys = list(f.keys())
        video = f.get_tensor('video') if 'video' in keys else None
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'{path}: not a readable .safetensors file '
                       f'({type(e).__name__}: {e})') from e
    if video is None:
      raise ValueError(f'{path}: missing tensor \'video\'; found '
                       f'{", ".join(keys)}')
    try:
      json.loads(metadata.get('ids', '[]'))
      json.loads(metadata.get('captions', '[]'))
    except ValueError as e:
      raise ValueError(f"{path}: metadata 'ids' / 'captions' must be JSON "
                       f'lists ({e})') from e
    if 'ids' not in metadata:
      raise ValueError(f"{path}: missing metadata 'ids' (a JSON list of "
                       'video ids)')
    ids = [str(x) for x in json.loads(metadata['ids'])]
    captions = (None if 'captions' not in metadata else
                [str(c) for c in json.loads(metadata['captions'])])
  else:
    raise ValueError(f'{path}: unknown embeddings format {path.suffix!r}; '
                     'use .npz or .safetensors')

  video = np.asarray(video)
  if video.ndim != 2 or not np.issubdtype(video.dtype, np.floating):
    raise ValueError(f"{path}: 'video' must be a float [N, D] array, got "
                     f'{video.dtype} of shape {video.shape}')
  if len(ids) != video.shape[0]:
    raise ValueError(f"{path}: 'ids' has {len(ids)} entries but 'video' has "
                     f'{video.shape[0]} rows')
  if dim is not None and video.shape[1] != dim:
    raise ValueError(f"{path}: 'video' has dimension {video.shape[1]}, "
                     f'expected {dim}')
  bad = ~np.isfinite(video).all(axis=1)
  if bad.any():
    row = int(np.argmax(bad))
    raise ValueError(f"{path}: 'video' row {row} (id {ids[row]!r}) holds NaN "
                     'or inf')
  norms = np.linalg.norm(video, axis=1)
  if (norms == 0).any():
    row = int(np.argmax(norms == 0))
    raise ValueError(f"{path}: 'video' row {row} (id {ids[row]!r}) is all "
                     'zeros')
  seen = {}
  for row, i in enumerate(ids):
    if i in seen:
      raise ValueError(f"{path}: duplicate id {i!r} in 'ids' at rows "
                       f'{seen[i]} and {row}')
    seen[i] = row
  if captions is not None and len(captions) != len(ids):
    raise ValueError(f"{path}: 'captions' has {len(captions)} entries but "
                     f"'ids' has {len(ids)}")
  video = (video / norms[:, None]).astype(np.float32)
  return GalleryEmbeddings(ids=tuple(ids), video=video,
                           captions=None if captions is None else
                           tuple(captions))
