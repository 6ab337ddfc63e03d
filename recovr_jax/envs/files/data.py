"""Real data (docs/definitions.md §9): WebVid-CoVR-style annotations and
precomputed gallery embeddings.

Every check runs before any model work and names the file, row and column.
Rows are counted as in a spreadsheet: the header is row 1, the first data row
is row 2.
"""

import dataclasses
import json
import pathlib

import numpy as np

from recovr_jax import readers
from recovr_jax.envs.files import finecvr

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
  video: np.ndarray      # [N, D] float32 (rows L2-normalised unless
                         # loaded with normalize=False)
  captions: tuple[str, ...] | None  # [N] or None

  def index(self) -> dict[str, int]:
    return {v: i for i, v in enumerate(self.ids)}


def _read_csv(path, required, nonempty, id_columns, known, fix):
  """The ``required`` columns of an annotation CSV as lists of stripped
  strings (the whole file checked by ``readers.read_csv``: a duplicated
  column, a row with more or fewer fields than the header, an unclosed
  quote); ``nonempty`` columns may not be empty and ``id_columns`` must be
  in ``known`` (when given). Errors name the file, row and column; ``fix``
  says what to do about an unknown id (a dict: per column)."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'annotation file {path} does not exist')
  table = readers.read_csv(path, required, what='annotation file')
  columns = {c: [] for c in required}
  for row_number, row in zip(table.numbers, table.rows):
    for c in required:
      value = row[c]
      if c in nonempty and not value:
        raise ValueError(f'{path}: row {row_number}, column {c!r} is empty')
      if c in id_columns and known is not None and value not in known:
        raise ValueError(f'{path}: row {row_number}, column {c!r}: unknown '
                         f'video id {value!r} (in no embedding file; '
                         f'{fix[c] if isinstance(fix, dict) else fix})')
      columns[c].append(value)
  if not columns[required[0]]:
    raise ValueError(f'{path}: no data rows')
  return columns


# What to do about an unknown id of a CoVR-style CSV: a reference outside
# the gallery has its embedding in --reference_embeddings (the file
# ``experiments.data.import_covr --reference_output`` writes); dropping
# the rows is the last resort.
REFERENCE_FIX = dict(
    pth1=('a reference outside the gallery needs --reference_embeddings, '
          'e.g. the file experiments.data.import_covr --reference_output '
          'wrote; --missing_ids=drop leaves such rows out'),
    pth2='--missing_ids=drop leaves such rows out')


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
  known = None if video_ids is None else set(video_ids)
  columns = _read_csv(path, REQUIRED_COLUMNS, ('pth1', 'pth2', 'edit'),
                      ('pth1', 'pth2'), known, REFERENCE_FIX)
  for i, (r, t) in enumerate(zip(columns['pth1'], columns['pth2'])):
    if r == t:
      raise ValueError(f'{path}: row {i + 2}: the reference (pth1) and the '
                       f'target (pth2) are the same video {r!r}; the '
                       'reference is excluded from retrieval, so no method '
                       'could ever find it')
  return CovrAnnotations(
      reference=tuple(columns['pth1']), target=tuple(columns['pth2']),
      edit=tuple(columns['edit']), reference_caption=tuple(columns['txt1']),
      target_caption=tuple(columns['txt2']))


def is_json(path) -> bool:
  """Whether an annotation file is read as JSON (FashionIQ, AVSD) rather
  than as a CSV."""
  return pathlib.Path(path).suffix == '.json'


def row_label(path, index: int) -> tuple[str, int]:
  """How errors name the ``index``-th (0-based) annotation: ``('row', n)``
  counted as in a spreadsheet (header = row 1) for a CSV, ``('entry', n)``
  from 1 for a JSON file, ``('line', n)`` from 1 for FineCVR's ``.txt``."""
  if is_json(path):
    return ('entry', index + 1)
  if finecvr.is_finecvr(path):
    return ('line', index + 1)
  return ('row', index + 2)


def target_field(path) -> str:
  """How errors name the target's column of a composed annotation file."""
  if is_json(path):
    return '"target"'
  if finecvr.is_finecvr(path):
    return "field 'target'"
  return "column 'pth2'"


def load_triplets(path, video_ids=None) -> CovrAnnotations:
  """The composed triplets of ``path``: a ``.json`` file is read as
  FashionIQ's (``load_fashioniq_json``), a ``.txt`` file as FineCVR-1M's
  (``finecvr.load_triplets``: no captions), anything else as a WebVid-CoVR
  CSV (``load_covr_csv``)."""
  if is_json(path):
    return load_fashioniq_json(path, video_ids)
  if finecvr.is_finecvr(path):
    reference, target, edit = finecvr.load_triplets(path, video_ids)
    empty = ('',) * len(target)
    return CovrAnnotations(reference=reference, target=target, edit=edit,
                           reference_caption=empty, target_caption=empty)
  return load_covr_csv(path, video_ids)


def _read_json(path: pathlib.Path):
  """An annotation file's JSON; errors name the file."""
  return readers.read_json(path, 'annotation file')


def load_fashioniq_json(path, video_ids=None) -> CovrAnnotations:
  """Reads a FashionIQ caption file (``captions/cap.<category>.<split>.json``
  of ``XiaoxiaoGuo/fashion-iq``): a list of ``{"target", "candidate",
  "captions": [two relative captions]}``. The candidate is the reference,
  the two captions joined by " and " the modification text (as the start
  kit joins them with an ``<and>`` token). The test split has no targets
  and is refused.

  Raises:
    FileNotFoundError, ValueError: naming the file, the entry (1-based)
      and the key.
  """
  path = pathlib.Path(path)
  rows = _read_json(path)
  if not isinstance(rows, list) or not rows:
    raise ValueError(f'{path}: expected a non-empty JSON list of '
                     '{"target", "candidate", "captions"} entries')
  known = None if video_ids is None else set(video_ids)
  columns = {'pth1': [], 'pth2': [], 'edit': []}
  for n, row in enumerate(rows, start=1):
    where = f'{path}: entry {n}'
    if not isinstance(row, dict):
      raise ValueError(f'{where} is not an object')
    if 'target' not in row:
      raise ValueError(f'{where} has no "target" (FashionIQ\'s test split '
                       'has none; use its val split)')
    for key in ('candidate', 'target'):
      value = row.get(key)
      if not isinstance(value, str) or not value.strip():
        raise ValueError(f'{where}, "{key}": expected an image id, got '
                         f'{value!r}')
      if known is not None and value.strip() not in known:
        raise ValueError(f'{where}, "{key}": unknown image id {value!r} (in '
                         'no embedding file; --missing_ids=drop leaves such '
                         'entries out)')
    captions = row.get('captions')
    if not (isinstance(captions, list) and captions and all(
        isinstance(c, str) for c in captions)) or not any(
            c.strip() for c in captions):
      raise ValueError(f'{where}, "captions": expected a list of relative '
                       f'captions, got {captions!r}')
    if row['candidate'].strip() == row['target'].strip():
      raise ValueError(f'{where}: the candidate and the target are the same '
                       f'image {row["target"]!r}')
    columns['pth1'].append(row['candidate'].strip())
    columns['pth2'].append(row['target'].strip())
    columns['edit'].append(' and '.join(c.strip() for c in captions
                                        if c.strip()))
  empty = ('',) * len(rows)
  return CovrAnnotations(reference=tuple(columns['pth1']),
                         target=tuple(columns['pth2']),
                         edit=tuple(columns['edit']),
                         reference_caption=empty, target_caption=empty)


TEXT_COLUMNS = ('video_id', 'sentence')


@dataclasses.dataclass(frozen=True)
class TextQueries:
  """Text-to-video queries: a sentence describing each target video."""
  target: tuple[str, ...]    # video_id
  text: tuple[str, ...]      # sentence


def load_text_queries(path, video_ids=None) -> TextQueries:
  """Reads text-to-video test queries in MSR-VTT-1kA's layout (the
  JSFusion split's ``MSRVTT_JSFUSION_test.csv``: ``key, vid_key, video_id,
  sentence``; ``video_id`` and ``sentence`` are what CLIP4Clip's loader
  reads, ``ArrowLuo/CLIP4Clip`` ``dataloaders/dataloader_msrvtt_retrieval.py``).
  Extra columns are ignored. A ``.json`` file is read as AVSD's dialogs
  (``load_avsd_json``).

  Args:
    path: the CSV file.
    video_ids: optional known ids; a ``video_id`` outside it is an error.

  Raises:
    FileNotFoundError, ValueError: naming the file, row and column.
  """
  if is_json(path):
    return load_avsd_json(path, video_ids)
  known = None if video_ids is None else set(video_ids)
  columns = _read_csv(path, TEXT_COLUMNS, TEXT_COLUMNS, ('video_id',),
                      known, '--missing_ids=drop leaves such rows out')
  return TextQueries(target=tuple(columns['video_id']),
                     text=tuple(columns['sentence']))


def load_avsd_json(path, video_ids=None) -> TextQueries:
  """Reads AVSD's dialog file (DSTC7's ``valid_set4DSTC7-AVSD.json`` and
  the like: ``{"dialogs": [{"image_id", "caption", "dialog": [...]}]}``,
  as ``dialogtekgeek/AudioVisualSceneAwareDialog``
  ``code/data_handler.py`` reads it). Each dialog's video is a target and
  its ``caption`` the first query; the recorded question-answer turns are
  not read (the simulated user answers instead).

  Raises:
    FileNotFoundError, ValueError: naming the file, the dialog (1-based)
      and the key.
  """
  path = pathlib.Path(path)
  content = _read_json(path)
  dialogs = content.get('dialogs') if isinstance(content, dict) else None
  if not isinstance(dialogs, list) or not dialogs:
    raise ValueError(f'{path}: expected {{"dialogs": [...]}} with at least '
                     'one dialog (AVSD\'s layout)')
  known = None if video_ids is None else set(video_ids)
  target, text = [], []
  for n, dialog in enumerate(dialogs, start=1):
    where = f'{path}: dialog {n}'
    if not isinstance(dialog, dict):
      raise ValueError(f'{where} is not an object')
    for key in ('image_id', 'caption'):
      value = dialog.get(key)
      if not isinstance(value, str) or not value.strip():
        raise ValueError(f'{where}, "{key}": expected a non-empty string, '
                         f'got {value!r}')
    vid = dialog['image_id'].strip()
    if known is not None and vid not in known:
      raise ValueError(f'{where}, "image_id": unknown video id {vid!r} (in '
                       'no embedding file; --missing_ids=drop leaves such '
                       'dialogs out)')
    target.append(vid)
    text.append(dialog['caption'].strip())
  return TextQueries(target=tuple(target), text=tuple(text))


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


def load_embeddings(path, dim: int | None = None,
                    normalize: bool = True) -> GalleryEmbeddings:
  """Reads precomputed gallery embeddings.

  ``.npz``: arrays ``ids`` (strings), ``video`` ``[N, D]``, optional
  ``captions``. ``.safetensors``: tensor ``video`` and metadata ``ids``
  (a JSON list of strings), optional metadata ``captions`` (JSON list).

  Args:
    path: the file.
    dim: the expected embedding size ``D``, or ``None`` to accept any.
    normalize: L2-normalise the rows (cosine scores); False keeps them as
      stored (CoVR-2 scores averaged unit tokens by a plain dot product).

  Raises:
    FileNotFoundError, ValueError: naming the file, row and column (field).
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'embeddings file {path} does not exist')
  if path.suffix == '.npz':
    fields = readers.read_npz(path, {'ids': None, 'video': None},
                              'embeddings file', optional={'captions': None})
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
  if normalize:
    video = video / norms[:, None]
  video = video.astype(np.float32)
  return GalleryEmbeddings(ids=tuple(ids), video=video,
                           captions=None if captions is None else
                           tuple(captions))


def load_query_embeddings(path, annotations: CovrAnnotations, dim: int,
                          normalize: bool = True) -> np.ndarray:
  """Precomputed turn-0 composed queries, one row per CSV data row.

  ``.npz`` with ``query`` ``[R, D]`` and optionally ``pth1`` / ``pth2``
  (``[R]`` strings), which must then equal the CSV's row by row.

  Raises:
    FileNotFoundError, ValueError: naming the file and row.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'query embeddings file {path} does not exist')
  if path.suffix != '.npz':
    raise ValueError(f'{path}: query embeddings are an .npz with array '
                     "'query' [rows, D] (and optional 'pth1', 'pth2')")
  fields = readers.read_npz(path, {'query': None}, 'query embeddings file',
                            optional={'pth1': None, 'pth2': None})
  query = np.asarray(fields['query'])
  rows = len(annotations.reference)
  if query.ndim != 2 or not np.issubdtype(query.dtype, np.floating):
    raise ValueError(f"{path}: 'query' must be a float [rows, D] array, got "
                     f'{query.dtype} of shape {query.shape}')
  if query.shape[0] != rows:
    raise ValueError(f"{path}: 'query' has {query.shape[0]} rows but the "
                     f'annotation CSV has {rows} data rows (one query per '
                     'row, in the CSV\'s order)')
  if query.shape[1] != dim:
    raise ValueError(f"{path}: 'query' has dimension {query.shape[1]}, the "
                     f'gallery {dim}')
  for column, values in (('pth1', annotations.reference),
                         ('pth2', annotations.target)):
    if column in fields:
      stored = [str(x) for x in np.asarray(fields[column]).reshape(-1)]
      bad = [i for i, (a, b) in enumerate(zip(stored, values)) if a != b]
      if len(stored) != rows or bad:
        i = bad[0] if bad else min(len(stored), rows)
        raise ValueError(
            f"{path}: '{column}' row {i} is "
            f'{stored[i] if i < len(stored) else "(missing)"!r} but the CSV '
            f'row {i + 2} has {values[i] if i < rows else "(none)"!r}: the '
            'queries are not in the CSV\'s row order')
  norms = np.linalg.norm(query, axis=1)
  bad = ~np.isfinite(query).all(axis=1) | (norms == 0)
  if bad.any():
    i = int(np.argmax(bad))
    raise ValueError(f"{path}: 'query' row {i} (CSV row {i + 2}) is all "
                     'zeros or holds NaN/inf')
  if normalize:
    query = query / norms[:, None]
  return query.astype(np.float32)
