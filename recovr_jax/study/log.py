"""A participant's study log: one JSON line per event, durable on return.

The first line is a header (the participant and the configuration the log
was written under); then ``turn`` lines (the runner's trajectory record of
the turn, plus the raw feedback and timings), ``error`` lines (a turn whose
reasoning raised; the participant was asked to retry) and ``end`` lines (an
instance finished: found or out of turns). ``append`` returns only after the
line is on disk (flush + fsync), and the app answers the participant only
after ``append`` returns: what was acknowledged survives a crash; a failed
write (a full disk) is cut back off the file and raises, so the log and the
participant stay where they were.

A damaged line (an edit, a bad sector) is recovered up to the last good
line: the rest of the file is moved aside to ``<log>.damaged-<n>`` and
reported (``self.recovered``); the participant continues from the good
part, never discarded.
"""

import json
import os
import pathlib

from absl import logging


class LogError(ValueError):
  """A log that cannot be continued; the message names the file and line."""


def _fsync_dir(path: pathlib.Path):
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


class ParticipantLog:
  """``<log_dir>/<participant>.jsonl``.

  Opening an existing log checks its header against ``header`` (a log
  written under another configuration is refused: its lists would not
  replay) and reads its events. A last line without its newline is a write
  the crash interrupted, never acknowledged: it is cut off with a warning
  (``self.torn`` holds it). An unreadable line and everything after it are
  moved aside (``self.recovered``: where, from which line); an unreadable
  header is an error.
  """

  def __init__(self, path: pathlib.Path, header: dict):
    self.path = pathlib.Path(path)
    self.events: list[dict] = []
    self.torn = None
    self.recovered = None
    if self.path.exists() and self.path.stat().st_size:
      self._read(header)
    else:
      self.path.parent.mkdir(parents=True, exist_ok=True)
      self._write_line(dict(header, event='header'), create=True)
      _fsync_dir(self.path.parent)

  def _read(self, header):
    raw = self.path.read_bytes()
    lines = raw.split(b'\n')
    if lines[-1]:  # no final newline: an interrupted append
      self.torn = lines[-1].decode('utf-8', 'replace')
      logging.warning('%s: cutting off an interrupted last line (%d bytes, '
                      'never acknowledged): %r', self.path, len(lines[-1]),
                      self.torn[:200])
      with self.path.open('r+b') as f:
        f.truncate(len(raw) - len(lines[-1]))
        f.flush()
        os.fsync(f.fileno())
    rows, bad = _parse_good(self.path, lines[:-1])
    if bad is not None:
      self._set_aside(lines[:-1], bad)
    old = {k: v for k, v in rows[0].items() if k != 'event'}
    if old != header:
      changed = sorted(k for k in set(old) | set(header)
                       if old.get(k) != header.get(k))
      raise LogError(
          f'{self.path} was written by another study configuration '
          f'(differs in: {", ".join(changed)}); its lists would not replay. '
          'Start the study with the flags it was written under, or give '
          'another --output_dir.')
    self.events = rows[1:]

  def _set_aside(self, lines, bad: int):
    """Moves lines ``bad``.. (1-based) to ``<log>.damaged-<n>`` and keeps
    the good part in place."""
    n = 1
    while self.path.with_name(f'{self.path.name}.damaged-{n}').exists():
      n += 1
    aside = self.path.with_name(f'{self.path.name}.damaged-{n}')
    aside.write_bytes(b'\n'.join(lines[bad - 1:]) + b'\n')
    good = b''.join(line + b'\n' for line in lines[:bad - 1])
    tmp = self.path.with_suffix('.tmp')
    tmp.write_bytes(good)
    with tmp.open('rb') as f:
      os.fsync(f.fileno())
    tmp.replace(self.path)
    _fsync_dir(self.path.parent)
    self.recovered = {'from_line': bad, 'lines': len(lines) - bad + 1,
                      'kept_aside': str(aside)}
    logging.warning('%s: line %d is damaged; kept lines 1-%d, moved %d '
                    'line(s) to %s', self.path, bad, bad - 1,
                    len(lines) - bad + 1, aside)

  def _write_line(self, row: dict, create=False):
    line = (json.dumps(row, sort_keys=True) + '\n').encode()
    with self.path.open('xb' if create else 'ab') as f:
      f.write(line)
      f.flush()
      os.fsync(f.fileno())

  def append(self, row: dict):
    """Writes ``row`` (with an ``event`` key) durably; on a failed write
    the file is cut back to what it held and the error raised."""
    size = self.path.stat().st_size
    try:
      self._write_line(row)
    except OSError:
      try:
        with self.path.open('r+b') as f:
          f.truncate(size)
      except OSError:
        pass  # a torn line is cut off when the log is next opened
      raise
    self.events.append(row)


def _row(path, number: int, line: bytes) -> dict:
  try:
    row = json.loads(line)
    if not isinstance(row, dict) or 'event' not in row:
      raise ValueError('not an event object')
  except ValueError as e:
    raise LogError(f'{path}, line {number}: unreadable ({e}); the log was '
                   'edited or damaged') from e
  return row


def _parse(path, lines) -> list[dict]:
  rows = [_row(path, number, line) for number, line in enumerate(lines, 1)]
  if not rows or rows[0]['event'] != 'header':
    raise LogError(f'{path}, line 1: expected the header line')
  return rows


def _parse_good(path, lines) -> tuple[list[dict], int | None]:
  """The rows up to the first unreadable line, and that line's number
  (``None`` when every line reads); an unreadable header raises."""
  rows = []
  for number, line in enumerate(lines, 1):
    try:
      rows.append(_row(path, number, line))
    except LogError as e:
      if number == 1:
        raise LogError(f'{e}; the header cannot be recovered: move the log '
                       'aside to start this participant again') from e
      return _parse(path, lines[:number - 1]), number
  return _parse(path, lines), None


def read_events(path) -> tuple[dict, list[dict]]:
  """``(header, events)`` of a log file, for reports (a torn last line is
  left out with a warning, as when the study reopens it)."""
  path = pathlib.Path(path)
  lines = path.read_bytes().split(b'\n')
  if lines[-1]:
    logging.warning('%s: leaving out an interrupted last line', path)
  rows = _parse(path, lines[:-1])
  return rows[0], rows[1:]
