"""Per-turn metrics, failure modes, the bootstrap and the written report."""

import csv
import io
import json

import jax
import numpy as np

from recovr_jax.core import list_metrics
from recovr_jax.core import resampling

RECALL_KS = (1, 5, 10, 50)
HITS_KS = (1, 5, 10)   # cumulative Hits@K
# The metrics given a per-method 95% session-bootstrap interval per turn.
INTERVAL_KEYS = ('R@1', 'R@5', 'R@10', 'Hits@1', 'Hits@5', 'Hits@10', 'BRI')


def firing_table(displayed, targets, fired) -> dict:
  """Rank-cap firing rate and same-turn improvement when it fires."""
  ranks = list_metrics.target_ranks(displayed, targets)
  out = list_metrics.rank_cap_firing(ranks, fired)
  return {name: {'rate': float(r.rate), 'count': int(r.count),
                 'total': int(r.total)} for name, r in out._asdict().items()}


def method_metrics(displayed, targets) -> dict:
  """Per-turn R@K, BRI and stop rate of one method's displayed lists."""
  ranks = list_metrics.target_ranks(displayed, targets)
  out = {f'R@{k}': np.asarray(list_metrics.recall_at_k(ranks, k)).tolist()
         for k in RECALL_KS}
  out['BRI'] = np.asarray(list_metrics.bri(ranks)).tolist()
  for k in HITS_KS:
    out[f'Hits@{k}'] = np.asarray(list_metrics.cumulative_hits(ranks, k)).tolist()
  # Share of sessions whose target has been shown as top-1 by turn t.
  out['stop_rate'] = np.mean(np.minimum.accumulate(np.asarray(ranks), axis=1)
                             == 1, axis=0).tolist()
  return out


def session_bri(ranks) -> np.ndarray:
  """``[S, T+1]`` float32 BRI of each session alone (``list_metrics.bri``'s
  formula before the mean over sessions, which is linear: the mean of
  these rows is the run's BRI)."""
  log_best = np.log(np.minimum.accumulate(np.asarray(ranks), axis=1)
                    ).astype(np.float32)
  trapezoids = (log_best[:, :-1] + log_best[:, 1:]) / 2
  steps = np.arange(1, log_best.shape[1], dtype=np.float32)
  return np.concatenate([log_best[:, :1],
                         np.cumsum(trapezoids, axis=1) / steps], axis=1)


def intervals(displayed, targets, num_resamples: int, seed: int,
              queries=None) -> dict:
  """Per-turn 95% session-bootstrap intervals of ``INTERVAL_KEYS``:
  ``{key: {'lower': [T+1], 'upper': [T+1]}}``. Every method gets the same
  resamples (``seed``); ``queries`` ``[S]``: each session's query, whole
  queries resampled where they repeat (None: each session its own)."""
  ranks = np.asarray(list_metrics.target_ranks(displayed, targets))
  best = np.minimum.accumulate(ranks, axis=1)
  columns = []
  for key in INTERVAL_KEYS:
    if key == 'BRI':
      columns.append(session_bri(ranks))
      continue
    k = int(key.split('@')[1])
    columns.append((best if key.startswith('Hits') else ranks) <= k)
  values = np.concatenate(columns, axis=1).astype(np.float32)  # [S, 7(T+1)]
  out = resampling.bootstrap_mean(values, num_resamples,
                                  jax.random.key(seed + 1), clusters=queries)
  turns = ranks.shape[1]
  lower = np.asarray(out.lower).reshape(len(INTERVAL_KEYS), turns)
  upper = np.asarray(out.upper).reshape(len(INTERVAL_KEYS), turns)
  return {key: {'lower': lower[i].tolist(), 'upper': upper[i].tolist()}
          for i, key in enumerate(INTERVAL_KEYS)}


def video_id(video_ids, index) -> str | None:
  """The video id of gallery row ``index`` (its index as text where the
  source has no ids; None for ``-1``, no video)."""
  index = int(index)
  if index < 0:
    return None
  return str(index) if video_ids is None else str(video_ids[index])


def ranks_csv(displayed: dict, sessions, targets, video_ids=None,
              actions: dict | None = None, queries=None) -> str:
  """One row per method, session and turn: ``method, session, query_id,
  target_id, turn, rank, top1_id, action, stopped``.

  ``rank`` is the target's 1-based rank in the ``K`` videos shown at that
  turn, and ``K + 1`` when the target is not among them: censored there,
  not its rank in the gallery. Ids are video ids as in the TREC run files
  (gallery indices where the source has no ids). ``actions``:
  ``{(method, session): [action per turn]}`` from the trajectories
  (``''`` at turn 0); ``stopped`` is 1 where the session had already
  ended (the user found the target), its list carried over unchanged.
  ``query_id`` is ``q<query>``: ``queries[row]`` where queries repeat,
  else the session."""
  actions = actions or {}
  cell = _csv_cell()
  sessions = np.asarray(sessions)
  queries = sessions if queries is None else np.asarray(queries)
  targets = np.asarray(targets)
  lines = ['method,session,query_id,target_id,turn,rank,top1_id,action,'
           'stopped']
  # Column by column, each distinct value formatted once (as csv.writer
  # writes it), then joined a row at a time.
  session_text = [str(int(s)) for s in sessions.tolist()]
  query_text = [f'q{int(q)}' for q in queries.tolist()]

  def ids(rows):
    distinct, where = np.unique(np.asarray(rows), return_inverse=True)
    text = [cell(video_id(video_ids, i) or '') for i in distinct.tolist()]
    return [text[w] for w in np.ravel(where).tolist()]
  target_text = ids(targets)
  for method, d in displayed.items():
    d = np.asarray(d)
    width = d.shape[1]
    ranks = np.asarray(list_metrics.target_ranks(d, targets))
    rep = lambda per_session: [v for v in per_session for _ in range(width)]
    acts = []
    for s in sessions.tolist():
      got = actions.get((method, int(s)), ())
      acts.extend((got[t] if t < len(got) else None) or ''
                  for t in range(width))
    name = cell(method)
    lines.extend(map(','.join, zip(
        [name] * len(acts), rep(session_text), rep(query_text),
        rep(target_text), [str(t) for t in range(width)] * len(sessions),
        map(str, ranks.ravel().tolist()), ids(d[:, :, 0]),
        map(cell, acts), ['1' if a == 'stopped' else '0' for a in acts])))
  return '\n'.join(lines) + '\n'


def _csv_cell():
  """A function: a text as ``csv.writer`` writes it among other cells
  (quoted where it holds a comma, a quote or a line break), remembered."""
  made = {'': ''}

  def cell(text):
    if text not in made:
      buffer = io.StringIO()
      csv.writer(buffer, lineterminator='\n').writerow([text, ''])
      made[text] = buffer.getvalue()[:-2]
    return made[text]
  return cell


def failure_table(displayed, targets) -> dict:
  ranks = list_metrics.target_ranks(displayed, targets)
  modes = list_metrics.failure_modes(ranks, np.asarray(displayed)[:, :, 0])
  return {name: {'rate': float(r.rate), 'count': int(r.count),
                 'total': int(r.total)}
          for name, r in modes._asdict().items()}


def strongest_baseline(per_method: dict, baselines) -> str | None:
  """The baseline with the highest mean R@1 over feedback turns."""
  present = [b for b in baselines if b in per_method]
  if not present:
    return None
  return max(present, key=lambda b: np.mean(per_method[b]['R@1'][1:]))


def bootstrap(displayed_a, displayed_b, targets, num_resamples: int,
              seed: int, queries=None) -> dict:
  """Paired bootstrap of the per-turn R@1 difference ``a - b``
  (``queries`` as ``intervals``)."""
  hits = lambda d: np.asarray(list_metrics.target_ranks(d, targets)) <= 1
  interval = resampling.paired_bootstrap(
      hits(displayed_a), hits(displayed_b), num_resamples,
      jax.random.key(seed), clusters=queries)
  return {k: np.asarray(v).tolist() for k, v in interval._asdict().items()}


def metrics_csv(per_method: dict) -> str:
  """One row per method and turn; ``<metric>_lower`` / ``_upper``: the 95%
  interval where the method has one."""
  buffer = io.StringIO()
  writer = csv.writer(buffer)
  keys = ([f'R@{k}' for k in RECALL_KS] + ['BRI', 'stop_rate'] +
          [f'Hits@{k}' for k in HITS_KS])
  bounds = [f'{k}_{b}' for k in INTERVAL_KEYS for b in ('lower', 'upper')]
  writer.writerow(['method', 'turn'] + keys + bounds)
  for method, m in per_method.items():
    ci = m.get('intervals', {})
    for t in range(len(m['R@1'])):
      writer.writerow(
          [method, t] + [f'{m[k][t]:.6f}' for k in keys] +
          [f'{ci[k][b][t]:.6f}' if k in ci else ''
           for k in INTERVAL_KEYS for b in ('lower', 'upper')])
  return buffer.getvalue()


def pct(x):
  return f'{100 * x:.1f}'


def _with_interval(m: dict, key: str, t: int) -> str:
  """``56.8 [52.4, 61.2]``: a percentage (BRI: a value to 3 decimals) with
  its interval when known."""
  text = (lambda v: f'{v:.3f}') if key == 'BRI' else pct
  ci = m.get('intervals', {}).get(key)
  value = text(m[key][t])
  if ci is None:
    return value
  return f"{value} [{text(ci['lower'][t])}, {text(ci['upper'][t])}]"


def method_cell(method: str, names: dict | None = None) -> str:
  """A method as the report's tables name it: its display name (as the
  plots and ``tables.tex`` print it) with the registry id that
  ``--methods`` takes, ``ReCoVR (`recovr`)``; the id alone when it has no
  other name."""
  shown = (names or {}).get(method, method)
  return method if shown == method else f'{shown} (`{method}`)'


def markdown(per_method: dict, failures: dict, boot: dict | None,
             header: str, firing: dict | None = None,
             names: dict | None = None, sessions: int | None = None) -> str:
  """The Markdown report: per-turn R@1, R@5, cumulative Hits@10 and BRI,
  failure modes, rank-cap firing, bootstrap; ``names``: each method's
  display name (``method_cell``); ``sessions``: see
  ``bootstrap_in_words``."""
  lines = [header, '']
  turns = len(next(iter(per_method.values()))['R@1'])
  cols = ' | '.join(f'T{t}' for t in range(turns))
  sep = '|'.join(['---'] + ['---:'] * turns)
  for key, title in (('R@1', 'R@1 (%) per turn'),
                     ('R@5', 'R@5 (%) per turn'),
                     ('Hits@10', 'Cumulative Hits@10 (%) per turn: target in '
                      'the top 10 of any list so far'),
                     ('BRI', 'BRI per turn (lower is better; ranks censored '
                      'at K + 1)')):
    note = (' [95% session-bootstrap interval]'
            if key in INTERVAL_KEYS and any(
                'intervals' in m for m in per_method.values()) else '')
    lines += [f'### {title}{note}', '', f'| method | {cols} |', f'|{sep}|']
    for method, m in per_method.items():
      cells = (_with_interval(m, key, t) for t in range(turns))
      lines.append(f'| {method_cell(method, names)} | ' + ' | '.join(cells)
                   + ' |')
    lines.append('')
  lines += ['### Failure modes over active transitions', '',
            '| method | drift | stagnation | repeated top-1 | improvement | '
            'recovery | transitions |', '|---|---:|---:|---:|---:|---:|---:|']
  for method, f in failures.items():
    cell = lambda n: (f"{pct(f[n]['rate'])} ({f[n]['count']}/"
                      f"{f[n]['total']})") if f[n]['total'] else 'n/a'
    lines.append(f'| {method_cell(method, names)} | ' + ' | '.join(
        cell(n) for n in ('drift', 'stagnation', 'repeated_top1',
                          'improvement', 'recovery'))
                 + f" | {f['drift']['total']} |")
  lines.append('')
  if firing:
    lines += ['### Rank-cap firing over active transitions (paper A.4)', '',
              '| method | fires | target rank improves when it fires |',
              '|---|---:|---:|']
    for method, f in firing.items():
      cell = lambda r: (f"{pct(r['rate'])} ({r['count']}/{r['total']})"
                        if r['total'] else 'n/a')
      lines.append(f"| {method_cell(method, names)} | {cell(f['fired'])} | "
                   f"{cell(f['improved'])} |")
    lines.append('')
  if boot:
    lines.append(bootstrap_markdown(boot, names, sessions))
  return '\n'.join(lines)


def bootstrap_markdown(boot: dict, names: dict | None = None,
                       sessions: int | None = None) -> str:
  """One paired-bootstrap table (``bootstrap`` plus ``a``, ``b`` and
  ``num_resamples``; ``names`` as ``markdown``'s; ``sessions``: see
  ``bootstrap_in_words``)."""
  turns = len(boot['mean'])
  cols = ' | '.join(f'T{t}' for t in range(turns))
  sep = '|'.join(['---'] + ['---:'] * turns)
  return '\n'.join([
      f"### Paired bootstrap: {method_cell(boot['a'], names)} - "
      f"{method_cell(boot['b'], names)}, R@1 "
      f"({boot['num_resamples']:,} resamples, 95% percentile interval, "
      'points)', '', f'| | {cols} |', f'|{sep}|',
      '| difference | ' + ' | '.join(pct(v) for v in boot['mean']) + ' |',
      '| interval | ' + ' | '.join(
          'none (one query)' if sessions is not None and sessions < 2
          else f'[{pct(lo)}, {pct(hi)}]'
          for lo, hi in zip(boot['lower'], boot['upper'])) + ' |', '',
      bootstrap_in_words(boot, names, sessions), ''])


# Below this many sessions neither a table's marks (bold, dagger) nor the
# report's "ahead" sentences are printed: the paired interval says little.
MARKS_SESSIONS = 20


def _turns(ts) -> str:
  return ('turn ' if len(ts) == 1 else 'turns ') + ', '.join(map(str, ts))


def bootstrap_in_words(boot: dict, names: dict | None = None,
                       sessions: int | None = None) -> str:
  """What a paired interval says, turn by turn: where it excludes 0 (one
  method ahead), where the two are the same on every session (the interval
  is exactly 0; at turn 0 by construction: every method shows the same
  first list) and where it holds 0 (the difference is within noise). Over
  fewer than ``MARKS_SESSIONS`` ``sessions`` (distinct queries: what the
  interval resamples), only that it says little."""
  a = (names or {}).get(boot['a'], boot['a'])
  b = (names or {}).get(boot['b'], boot['b'])
  if sessions is not None and sessions < MARKS_SESSIONS:
    return (f'In words: over {sessions} distinct '
            f'{"query" if sessions == 1 else "queries"} (fewer than '
            f'{MARKS_SESSIONS}) the interval says little; neither {a} nor '
            f'{b} is called ahead.')
  bounds = list(zip(boot['lower'], boot['upper']))
  ahead = [t for t, (lo, _) in enumerate(bounds) if lo > 0]
  behind = [t for t, (_, hi) in enumerate(bounds) if hi < 0]
  same = [t for t, (lo, hi) in enumerate(bounds) if lo == 0 == hi]
  holds = [t for t, (lo, hi) in enumerate(bounds)
           if lo <= 0 <= hi and t not in same]
  parts = []
  if ahead:
    parts.append(f'{a} is ahead of {b} at {_turns(ahead)} (the interval '
                 'excludes 0)')
  if behind:
    parts.append(f'{a} is behind {b} at {_turns(behind)} (the interval '
                 'excludes 0)')
  if same:
    parts.append(f'the two score the same on every session at '
                 f'{_turns(same)}' + (' (turn 0 by construction: every '
                                      'method shows the same first list)'
                                      if 0 in same else ''))
  if holds:
    parts.append(f'the interval holds 0 at {_turns(holds)}: there the '
                 'difference is within noise')
  return 'In words: ' + '; '.join(parts) + '.'


_COUNTS = ('calls', 'first_pass_valid', 'retry_valid', 'fallback')


def validity_counts(before: dict, after: dict) -> dict:
  """The reasoning counts of the calls between two ``validity()``
  snapshots of one backend: per module, calls, first-pass valid outputs,
  valid retries and fallbacks (integers; ``validity()`` gives a rate)."""
  def counts(v):
    return {'calls': v['calls'],
            'first_pass_valid': round(v['first_pass_valid'] * v['calls']),
            'retry_valid': v['retry_valid'], 'fallback': v['fallback']}
  out = {}
  for module, v in after.items():
    now = counts(v)
    was = counts(before[module]) if module in before else dict.fromkeys(
        _COUNTS, 0)
    delta = {k: now[k] - was[k] for k in _COUNTS}
    if delta['calls']:
      out[module] = delta
  return out


def add_counts(a: dict, b: dict) -> dict:
  """Sum of two ``validity_counts`` results."""
  out = {m: dict(v) for m, v in a.items()}
  for module, v in b.items():
    row = out.setdefault(module, dict.fromkeys(_COUNTS, 0))
    for k in _COUNTS:
      row[k] += v[k]
  return out


def validity_markdown(counts_by_method: dict,
                      names: dict | None = None) -> str:
  """Per method and module: calls, first-pass validity, retries and
  fallbacks over every batch of the run (resumed ones included); methods
  that made no reasoning call are left out."""
  lines = ['### Reasoning validity (every batch, resumed ones included)', '',
           '| method | module | calls | first-pass valid | valid retries | '
           'fallbacks |', '|---|---|---:|---:|---:|---:|']
  for method, modules in counts_by_method.items():
    for module, c in sorted(modules.items()):
      lines.append(f"| {method_cell(method, names)} | {module} | "
                   f"{c['calls']} | "
                   f"{pct(c['first_pass_valid'] / c['calls'])} | "
                   f"{c['retry_valid']} | {c['fallback']} |")
  return '\n'.join(lines) + '\n'


def errors_markdown(raised: dict, num_sessions: int,
                    names: dict | None = None) -> str:
  """Sessions that raised per method (each counted as a miss)."""
  lines = ['### Sessions that raised (counted as misses)', '',
           '| method | sessions that raised | of |', '|---|---:|---:|']
  for method, n in raised.items():
    lines.append(f'| {method_cell(method, names)} | {n} | {num_sessions} |')
  return '\n'.join(lines) + '\n'


# Decimals a metric file keeps: the values are float32 means, exact to about
# 7 significant digits; past 6 decimals they print float32 noise
# (0.56199997...).
METRIC_DECIMALS = 6


def rounded(obj, digits: int = METRIC_DECIMALS):
  """``obj`` with every float rounded to ``digits`` decimals (NaN kept)."""
  if isinstance(obj, float):
    return obj if obj != obj else round(obj, digits)
  if isinstance(obj, dict):
    return {k: rounded(v, digits) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [rounded(v, digits) for v in obj]
  return obj


def dumps(obj, digits: int | None = None) -> str:
  """Sorted, indented JSON; with ``digits``, floats rounded (``rounded``)."""
  return json.dumps(obj if digits is None else rounded(obj, digits),
                    indent=2, sort_keys=True)
