"""A participant's study log: one JSON line per event, durable on return.

The first line is a header (the participant and the configuration the log
was written under); then ``turn`` lines (the runner's trajectory record of
the turn, plus the raw feedback and timings), ``error`` lines (a turn whose
reasoning raised; the participant was asked to retry) and ``end`` lines (an
instance finished: found or out of turns). ``append`` returns only after the
line is on disk (flush + fsync), and the app answers the participant only
after ``append`` returns: what was acknowledged survives a crash.
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
  (``self.torn`` holds it). Any other unreadable line is an error.
  """

  def __init__(self, path: pathlib.Path, header: dict):
    self.path = pathlib.Path(path)
    self.events: list[dict] = []
    self.torn = None
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
    rows = _parse(self.path, lines[:-1])
    old = {k: v for k, v in rows[0].items() if k != 'event'}
    if old != header:
      changed = sorted(k for k in set(old) | set(header)
                       if old.get(k) != header.get(k))
      raise LogError(
          f'{self.path} was written by another study configuration '
          f'(differs in: {", ".join(changed)}); its lists would not replay. '
          'Start the study with the flags it was written under, or give '
          'another --log_dir.')
    self.events = rows[1:]

  def _write_line(self, row: dict, create=False):
    line = (json.dumps(row, sort_keys=True) + '\n').encode()
    with self.path.open('xb' if create else 'ab') as f:
      f.write(line)
      f.flush()
      os.fsync(f.fileno())

  def append(self, row: dict):
    """Writes ``row`` (with an ``event`` key) durably."""
    self._write_line(row)
    self.events.append(row)


def _parse(path, lines) -> list[dict]:
  rows = []
  for number, line in enumerate(lines, 1):
    try:
      row = json.loads(line)
      if not isinstance(row, dict) or 'event' not in row:
        raise ValueError('not an event object')
    except ValueError as e:
      raise LogError(f'{path}, line {number}: unreadable ({e}); the log was '
                     'edited or damaged. Move it aside to start this '
                     'participant again.') from e
    rows.append(row)
  if not rows or rows[0]['event'] != 'header':
    raise LogError(f'{path}, line 1: expected the header line')
  return rows


def read_events(path) -> tuple[dict, list[dict]]:
  """``(header, events)`` of a log file, for reports (a torn last line is
  left out with a warning, as when the study reopens it)."""
  path = pathlib.Path(path)
  lines = path.read_bytes().split(b'\n')
  if lines[-1]:
    logging.warning('%s: leaving out an interrupted last line', path)
  rows = _parse(path, lines[:-1])
  return rows[0], rows[1:]
