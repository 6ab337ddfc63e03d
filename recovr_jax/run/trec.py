"""TREC run files and qrels of a run, for ranx, ir_measures and trec_eval.

A run file line is ``qid Q0 docid rank score tag``. Each displayed list
becomes one query's lines with ``score = K + 1 - rank``, so a tool that
re-sorts by score keeps the displayed order; padding ids (``-1``) are left
out and a repeated id is an error. ``qid`` is ``q<session>`` (the session
index of ``trajectories.jsonl``), ``docid`` the video id (the gallery index
when the environment has no ids). The qrels give each query its one target
with relevance 1.

A TREC line is split on whitespace, so a video id holding a space, tab or
other whitespace (or ``%``) is written percent-encoded (``a b`` ->
``a%20b``, ``%`` -> ``%25``), the same in the run files and the qrels:
every tool scores it as one id, and ``decode_id`` gives the id back.
"""

import pathlib
import re
import urllib.parse

import numpy as np

_UNSAFE = re.compile(r'[\s%]')


def encode_id(video_id) -> str:
  """``video_id`` as one whitespace-free TREC field (``decode_id`` undoes
  it)."""
  return _UNSAFE.sub(lambda m: ''.join(
      f'%{b:02X}' for b in m.group().encode()), str(video_id))


def decode_id(field: str) -> str:
  return urllib.parse.unquote(field)


def _doc(video_ids, i: int) -> str:
  return str(i) if video_ids is None else encode_id(video_ids[i])


def run_lines(displayed, sessions, video_ids, tag: str) -> list[str]:
  """``displayed [S, K]`` lists of sessions ``[S]`` as run-file lines."""
  displayed = np.asarray(displayed)
  k = displayed.shape[1]
  lines = []
  for s, row in zip(sessions, displayed):
    ids = [int(i) for i in row if i >= 0]
    if len(set(ids)) != len(ids):
      raise ValueError(f'session {s}: the displayed list repeats an id; a '
                       'TREC run may not')
    lines += [f'q{int(s)} Q0 {_doc(video_ids, i)} {rank} {k + 1 - rank} {tag}'
              for rank, i in enumerate(ids, 1)]
  return lines


def qrels_lines(sessions, targets, video_ids) -> list[str]:
  return [f'q{int(s)} 0 {_doc(video_ids, int(t))} 1'
          for s, t in zip(sessions, targets)]


def write(directory, displayed: dict, sessions, targets, video_ids=None):
  """``<directory>/<method>.turn<t>.run`` for every method and turn of
  ``displayed`` (``{method: [S, T+1, K]}``) and ``qrels.txt``; returns the
  paths written."""
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  paths = [directory / 'qrels.txt']
  paths[0].write_text('\n'.join(qrels_lines(sessions, targets, video_ids)) +
                      '\n')
  for method, lists in displayed.items():
    for t in range(np.asarray(lists).shape[1]):
      path = directory / f'{method}.turn{t}.run'
      path.write_text('\n'.join(run_lines(
          np.asarray(lists)[:, t], sessions, video_ids,
          f'{method}_turn{t}')) + '\n')
      paths.append(path)
  return paths


def read_run(path) -> dict:
  """``{qid: [(docid, rank, score)]}`` of a run file (a plain parser)."""
  out = {}
  for number, line in enumerate(pathlib.Path(path).read_text().splitlines(),
                                1):
    parts = line.split()
    if len(parts) != 6 or parts[1] != 'Q0':
      raise ValueError(f'{path}, line {number}: expected "qid Q0 docid rank '
                       f'score tag", got {line!r}')
    out.setdefault(parts[0], []).append(
        (parts[2], int(parts[3]), float(parts[4])))
  return out
