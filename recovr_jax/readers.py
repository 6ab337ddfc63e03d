"""Whole-file readers: every file the project reads goes through one of
these, and each validates the whole file before anything uses it.

* ``read_text``: the bytes are UTF-8 (an error names the line and byte).
* ``read_json`` / ``read_jsonl``: every document parses; a JSON Lines file
  written by the project ends with a newline (a last line without one was
  cut while it was written).
* ``read_csv``: the header has no duplicated and no missing required
  column; every row has as many fields as the header; quoting is strict;
  typed columns parse; a file the project wrote ends with a newline.
* ``read_npz``: the archive opens, holds the required arrays, and their
  ranks and kinds are the expected ones.
* ``require_finished``: a run directory is complete (no ``INCOMPLETE``
  marker, the named outputs present).

Every error is a ``FileError`` (a ``ValueError``) whose message starts with
the file and, where there is one, the line (counted from 1, as an editor
does) or a CSV's row (counted as a spreadsheet does: the header is row 1,
the first data row row 2) and the field.
"""

import csv
import dataclasses
import io
import json
import pathlib
import warnings
import zipfile

import numpy as np

INCOMPLETE = 'INCOMPLETE'


class FileError(ValueError):
  """A file that cannot be used as it is; the message names the file, the
  line and the field."""

  def __init__(self, path, message: str, line: int | None = None,
               field: str | None = None, unit: str = 'line'):
    where = str(path)
    if line is not None:
      where += f', {unit} {line}'
    if field is not None:
      where += f', column {field!r}'
    super().__init__(f'{where}: {message}')
    self.path, self.line, self.field = pathlib.Path(path), line, field


def _exists(path, what: str) -> pathlib.Path:
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'{what} {path} does not exist'
                            + (' (it is a directory)' if path.is_dir()
                               else ''))
  return path


def read_text(path, what: str = 'file') -> str:
  """The file as text: UTF-8 (a byte-order mark is dropped)."""
  path = _exists(path, what)
  data = path.read_bytes()
  try:
    return data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b'\n') + 1
    raise FileError(path, f'not UTF-8 text (byte {e.start}: {e.reason}); '
                    'save it as UTF-8', line) from e


def _truncated(path, text: str, written_by_us: bool):
  if written_by_us and text and not text.endswith('\n'):
    raise FileError(path, 'the last line has no newline: the file was cut '
                    'while it was written (rerun the command that writes '
                    'it)', text.count('\n') + 1)


def read_json(path, what: str = 'JSON file'):
  """One JSON document."""
  path = pathlib.Path(path)
  text = read_text(path, what)
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    cut = e.lineno >= text.rstrip().count('\n') + 1  # on the last line
    raise FileError(path, f'not valid JSON at column {e.colno}: {e.msg}'
                    + (' (the file ends early: cut while it was written?)'
                       if cut else ''), e.lineno) from e


def read_jsonl(path, what: str = 'JSON Lines file',
               written_by_us: bool = True) -> list:
  """One JSON document per line (blank lines are an error)."""
  path = pathlib.Path(path)
  text = read_text(path, what)
  _truncated(path, text, written_by_us)
  rows = []
  for n, line in enumerate(text.splitlines(), 1):
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError as e:
      raise FileError(path, f'not valid JSON at column {e.colno}: {e.msg}',
                      n) from e
  return rows


@dataclasses.dataclass(frozen=True)
class Table:
  """A CSV file read whole: its column names, its rows (dicts of the
  columns to stripped strings or typed values) and each row's number as a
  spreadsheet counts it (header = row 1; blank lines are counted, not
  kept)."""
  header: list
  rows: list
  numbers: list


def read_csv(path, required=(), types=None, what: str = 'CSV file',
             written_by_us: bool = False) -> Table:
  """The whole CSV file as a ``Table``: each row a dict of the header's
  columns to stripped strings, or to ``types[column](value)`` for a typed
  column (an empty value of a typed column is ``None``).

  Refused (``FileError``): a file that is not UTF-8, an empty or duplicated
  column name, a missing ``required`` column, a row with more or fewer
  fields than the header, an unclosed quote, a typed value that does not
  parse, and (``written_by_us``: the project's own outputs, which always
  end with a newline) a last line without a newline.
  """
  path = pathlib.Path(path)
  text = read_text(path, what)
  _truncated(path, text, written_by_us)
  reader = csv.reader(io.StringIO(text, newline=''), strict=True)
  def error(message, row, field=None):
    return FileError(path, message, row, field, unit='row')

  try:
    header = next(reader, None)
  except csv.Error as e:
    raise error(f'the header: {e}', 1) from e
  if not header:
    raise error('empty: no header row', 1)
  header = [h.strip() for h in header]
  seen = set()
  for h in header:
    if not h:
      raise error(f'the header has an empty column name (columns: '
                  f'{", ".join(header)})', 1)
    if h in seen:
      raise error(f'the column {h!r} appears twice in the header; name '
                  'each column once', 1)
    seen.add(h)
  missing = [c for c in required if c not in seen]
  if missing:
    raise error(f'missing column(s) {", ".join(missing)}; required: '
                f'{", ".join(required)}; found: {", ".join(header)}', 1)
  types = types or {}
  rows, numbers = [], []
  number = 1  # the header's row
  while True:
    number += 1
    try:
      fields = next(reader)
    except StopIteration:
      break
    except csv.Error as e:
      raise error(f'{e}; an unclosed quote (") would join every later row '
                  'into one field', number) from e
    if not fields:
      continue  # a blank line
    if len(fields) != len(header):
      hint = ('an unquoted comma?' if len(fields) > len(header)
              else 'a row cut short?')
      raise error(f'{len(fields)} fields, the header has {len(header)} '
                  f'({hint})', number)
    row = {}
    for name, value in zip(header, fields):
      value = value.strip()
      kind = types.get(name)
      if kind is not None:
        if value == '':
          value = None
        else:
          try:
            value = kind(value)
          except ValueError as e:
            raise error(f'{value!r} is not a valid {kind.__name__}',
                        number, name) from e
      row[name] = value
    rows.append(row)
    numbers.append(number)
  return Table(header, rows, numbers)


def read_npz(path, arrays: dict, what: str = 'NPZ file',
             optional: dict | None = None) -> dict:
  """``{name: array}`` of the ``arrays`` named (``{name: (ndim, kinds)}``,
  ``kinds`` a string of NumPy kind codes such as ``'f'`` or ``'iu'``; None
  for any) and of those of ``optional`` (same form) the archive holds, all
  of them read (a damaged archive fails here, not later)."""
  path = _exists(path, what)
  optional = optional or {}
  try:
    with np.load(path, allow_pickle=False) as data:
      names = set(data.files)
      missing = [n for n in arrays if n not in names]
      if missing:
        raise FileError(path, f'no array named {", ".join(missing)} (it '
                        f'holds {", ".join(sorted(names)) or "none"})')
      out = {}
      wanted = {**arrays, **{n: s for n, s in optional.items() if n in names}}
      for name, spec in wanted.items():
        x = data[name]
        if spec is not None:
          ndim, kinds = spec
          if ndim is not None and x.ndim != ndim:
            raise FileError(path, f'array {name!r} has shape {x.shape}; '
                            f'expected {ndim} dimensions')
          if kinds and x.dtype.kind not in kinds:
            raise FileError(path, f'array {name!r} has dtype {x.dtype}; '
                            f'expected kind {kinds!r}')
        out[name] = x
      return out
  except (zipfile.BadZipFile, EOFError, OSError) as e:
    raise FileError(path, f'not a readable .npz archive ({e}); it may have '
                    'been cut while it was written') from e
  except ValueError as e:
    if isinstance(e, FileError):
      raise
    raise FileError(path, f'not a readable .npz archive ({e})') from e


def require_finished(directory, outputs=()) -> pathlib.Path:
  """``directory`` as a finished run's: no ``INCOMPLETE`` marker (the run
  was stopped or failed; rerunning its command resumes it) and each of
  ``outputs`` present."""
  d = pathlib.Path(directory)
  if not d.is_dir():
    raise FileNotFoundError(f'{d} does not exist or is not a directory')
  if (d / INCOMPLETE).exists():
    raise FileNotFoundError(f'{d}: its run has not finished ({d / INCOMPLETE}'
                            ': it was stopped or failed); rerun its command '
                            'to resume it')
  for name in outputs:
    if not (d / name).is_file():
      raise FileNotFoundError(f'{d / name} does not exist: not a finished '
                              'run directory (python -m experiments.run '
                              'writes it)')
  return d


# A video frame larger than this (8192 x 6104) is refused before it is
# decoded: 4K frames are 8.3 M pixels; a forged header can claim billions.
MAX_IMAGE_PIXELS = 50_000_000


def read_image(path, max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
  """``[H, W, 3]`` uint8 RGB pixels of an image file, its dimensions read
  from the header and checked against ``max_pixels`` before it is
  decoded."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  path = _exists(path, 'image')
  too_big = (f'an image over {max_pixels:,} pixels (a video frame is '
             'rarely over 8.3 M, 4K); resize it or leave it out')
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', Image.DecompressionBombWarning)
      with Image.open(path) as image:
        width, height = image.size
        if width * height > max_pixels:
          raise FileError(path, f'{width} x {height} pixels: {too_big}')
        return np.asarray(image.convert('RGB'))
  except Image.DecompressionBombError as e:
    raise FileError(path, f'{e}: {too_big}') from e
  except (OSError, SyntaxError, ValueError) as e:
    if isinstance(e, FileError):
      raise
    raise FileError(path, f'not a readable image ({e})') from e
