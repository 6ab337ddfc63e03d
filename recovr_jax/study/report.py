"""Table 4 from study logs: R@1 per turn under human feedback beside the
simulated user's on the same instances (and IVR's with simulated feedback),
with bootstrap intervals and feedback length statistics.

An instance counts once it has ended ("Found it" or "Not found" after the
last turn); unfinished instances are counted and left out. After an
instance ends its last list stays shown, as for a simulated session that
stopped: a "Found it" on the target counts as a hit at every later turn, one
on another video as a miss.
"""

import dataclasses
import pathlib
import statistics

import jax
import numpy as np

from recovr_jax.core import resampling
from recovr_jax.study import log

LIST = 10   # the logs keep each turn's top 10


@dataclasses.dataclass(frozen=True)
class HumanRuns:
  """The finished instances of every log in a directory."""
  header: dict                 # the logs' shared header (no participant)
  rows: list[dict]             # [S] one per finished instance, in log order
  displayed: np.ndarray        # [S, T+1, 10] int32 top 10 per turn
  targets: np.ndarray          # [S] int
  sessions: np.ndarray         # [S] int composed-query indices
  unfinished: int              # instances begun and not ended
  errors: int                  # turns whose reasoning raised (retried)
  damaged: tuple = ()          # 'path: why' of logs left out (unreadable)


def _instances(path, head, events):
  """``(finished instances, unfinished count, error count)`` of one log;
  ``LogError`` naming the line when its turns are out of order."""
  turns, ended, errors, rows, unfinished = {}, {}, 0, [], 0
  for number, e in enumerate(events, 2):
    kind = e.get('event')
    if kind == 'turn':
      expect = len(turns.setdefault(e['instance'], []))
      if e['turn'] != expect:
        raise log.LogError(f'{path}, line {number}: turn {e["turn"]} '
                               f'of instance {e["instance"]}, expected '
                               f'turn {expect}')
      turns[e['instance']].append(e)
    elif kind == 'end':
      ended[e['instance']] = e
    elif kind == 'error':
      errors += 1
  for k, ts in sorted(turns.items()):
    if head.get('flow') and k == 0:
      continue  # the practice instance is not the study's
    if k not in ended:
      unfinished += 1
      continue
    rows.append({'participant': head['participant'], 'instance': k,
                 'session': ts[0]['session'], 'target': ts[0]['target'],
                 'reference': ts[0]['reference'], 'turns': ts,
                 'found': ended[k]['found']})
  return rows, unfinished, errors


def load(log_dir) -> HumanRuns:
  """Reads ``<log_dir>/*.jsonl`` (the study's logs)."""
  paths = sorted(pathlib.Path(log_dir).glob('*.jsonl'))
  if not paths:
    raise FileNotFoundError(f'no study logs (*.jsonl) in {log_dir}')
  header, rows, unfinished, errors, damaged = None, [], 0, 0, []
  for path in paths:
    try:  # a damaged log is left out of the table and listed
      head, events = log.read_events(path)
      shared = {k: v for k, v in head.items()
                if k not in ('participant', 'event', 'queue')}
      if header is not None and shared != header:
        raise log.LogError(f'{path}: written under another study '
                               f'configuration than the logs before it')
      done, open_, failed = _instances(path, head, events)
    except (log.LogError, KeyError, TypeError) as e:
      damaged.append(str(e) if isinstance(e, log.LogError) else
                     f'{path}: a line lacks a field ({type(e).__name__}: '
                     f'{e})')
      continue
    header = shared if header is None else header
    rows += done
    unfinished += open_
    errors += failed
  if header is None:
    raise log.LogError(f'no readable study log in {log_dir}: ' +
                           '; '.join(damaged))
  t = header['num_turns']
  displayed = np.full((len(rows), t + 1, LIST), -1, np.int32)
  for i, row in enumerate(rows):
    for j in range(t + 1):
      top = row['turns'][min(j, len(row['turns']) - 1)]['top10']
      displayed[i, j, :len(top)] = top
  return HumanRuns(
      header=header, rows=rows, displayed=displayed,
      targets=np.array([r['target'] for r in rows], np.int64),
      sessions=np.array([r['session'] for r in rows], np.int64),
      unfinished=unfinished, errors=errors, damaged=tuple(damaged))


def hits(displayed, targets) -> np.ndarray:
  """``[S, T+1]`` float32: the target is the displayed top 1."""
  return (np.asarray(displayed)[:, :, 0] ==
          np.asarray(targets)[:, None]).astype(np.float32)


def interval(values, num_resamples: int, seed: int) -> dict:
  """Mean and percentile 95% bootstrap interval per turn of ``[S, T+1]``
  per-instance values (the paired bootstrap against zeros)."""
  values = np.asarray(values, np.float32)
  out = resampling.paired_bootstrap(values, np.zeros_like(values),
                                 num_resamples, jax.random.key(seed))
  return {k: np.asarray(v).tolist() for k, v in out._asdict().items()}


def lengths(texts) -> dict:
  """Words and characters per feedback utterance."""
  words = [len(t.split()) for t in texts]
  chars = [len(t) for t in texts]
  if not texts:
    return {'utterances': 0}
  return {'utterances': len(texts),
          'mean_words': statistics.fmean(words),
          'median_words': statistics.median(words),
          'max_words': max(words),
          'mean_chars': statistics.fmean(chars),
          'distinct_share': len(set(texts)) / len(texts)}


def human_feedback(runs: HumanRuns) -> list[str]:
  return [t['raw_feedback'] for r in runs.rows for t in r['turns'][1:]]


def waits(runs: HumanRuns) -> dict:
  """Seconds the system took per feedback turn (what a participant waits)."""
  s = [t['seconds_system'] for r in runs.rows for t in r['turns'][1:]]
  if not s:
    return {'turns': 0}
  return {'turns': len(s), 'median_s': statistics.median(s),
          'max_s': max(s), 'mean_s': statistics.fmean(s)}


def table(columns: dict, targets, num_resamples: int, seed: int) -> dict:
  """``columns``: name -> ``[S, T+1, K]`` displayed lists of the same
  instances. R@1 per turn with intervals, and the paired differences of the
  first column against each other one."""
  h = {name: hits(d, targets) for name, d in columns.items()}
  out = {'r_at_1': {n: interval(v, num_resamples, seed)
                    for n, v in h.items()}}
  first, *others = list(h)
  out['paired'] = {}
  for name in others:
    d = resampling.paired_bootstrap(h[first], h[name], num_resamples,
                                 jax.random.key(seed))
    out['paired'][f'{first} - {name}'] = {
        k: np.asarray(v).tolist() for k, v in d._asdict().items()}
  return out


def _pct(x):
  return f'{100 * x:.1f}'


def markdown(result: dict, num_instances: int, stats: dict) -> str:
  """Table 4 as Markdown (R@1 in %, 95% bootstrap intervals)."""
  cols = result['r_at_1']
  turns = len(next(iter(cols.values()))['mean'])
  lines = [f'# Table 4: human versus simulated feedback\n\n{num_instances} '
           'finished instances; R@1 (%) per turn with 95% bootstrap '
           'intervals.\n',
           '| Feedback | ' + ' | '.join(f'Turn {t}' for t in range(turns)) +
           ' |', '|---' * (turns + 1) + '|']
  for name, v in cols.items():
    lines.append(f'| {name} | ' + ' | '.join(
        f'{_pct(m)} [{_pct(lo)}, {_pct(hi)}]'
        for m, lo, hi in zip(v['mean'], v['lower'], v['upper'])) + ' |')
  if result['paired']:
    lines.append('\nPaired differences (points, 95% interval):\n')
    for name, v in result['paired'].items():
      lines.append(f'* {name}: ' + '; '.join(
          f'T{t} {_pct(m)} [{_pct(lo)}, {_pct(hi)}]'
          for t, (m, lo, hi) in enumerate(zip(v['mean'], v['lower'],
                                              v['upper']))))
  lines.append('\nFeedback length:\n')
  lines.append('| Feedback | utterances | mean words | median words | max '
               'words | mean chars | distinct |')
  lines.append('|---|---|---|---|---|---|---|')
  for name, s in stats['lengths'].items():
    if not s['utterances']:
      lines.append(f'| {name} | 0 | | | | | |')
      continue
    lines.append(f'| {name} | {s["utterances"]} | {s["mean_words"]:.1f} | '
                 f'{s["median_words"]:g} | {s["max_words"]} | '
                 f'{s["mean_chars"]:.1f} | {100 * s["distinct_share"]:.0f}% |')
  w = stats['waits']
  if w['turns']:
    lines.append(f'\nSystem time per feedback turn (what a participant '
                 f'waits): median {w["median_s"]:.2f} s, worst '
                 f'{w["max_s"]:.2f} s over {w["turns"]} turns.')
  lines.append(f'\nUnfinished instances left out: {stats["unfinished"]}; '
               f'turns that raised and were retried: {stats["errors"]}.')
  return '\n'.join(lines) + '\n'


def trajectories(runs: HumanRuns) -> list[dict]:
  """The finished instances in the runner's ``trajectories.jsonl`` format
  (plus the participant, the study's timings and raw feedback)."""
  keep = ('event', 'instance', 'method', 'session', 'reference', 'target',
          'time')
  out = []
  for r in runs.rows:
    out.append({'method': r['turns'][0]['method'], 'session': r['session'],
                'reference': r['reference'], 'target': r['target'],
                'participant': r['participant'], 'found': r['found'],
                'error': None,
                'turns': [{k: v for k, v in t.items() if k not in keep}
                          for t in r['turns']]})
  return out
