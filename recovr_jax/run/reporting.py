"""Per-turn metrics, failure modes, the bootstrap and the written report."""

import csv
import io
import json

import jax
import numpy as np

from recovr_jax.core import list_metrics as metrics

RECALL_KS = (1, 5, 10, 50)
HITS_KS = (1, 5, 10)   # cumulative Hits@K
# The metrics given a per-method 95% session-bootstrap interval per turn.
INTERVAL_KEYS = ('R@1', 'R@5', 'R@10', 'Hits@1', 'Hits@5', 'Hits@10')


def fired_matrix(records, num_turns: int) -> np.ndarray:
  """``[S, T+1]`` bool rank-cap firing from per-session turn records."""
  out = np.zeros((len(records), num_turns + 1), bool)
  for i, turns in enumerate(records):
    for t, rec in enumerate(turns[:num_turns + 1]):
      out[i, t] = bool(rec.get('rank_cap_fired', False))
  return out


def firing_table(displayed, targets, fired) -> dict:
  """Rank-cap firing rate and same-turn improvement when it fires."""
  ranks = metrics.target_ranks(displayed, targets)
  out = metrics.rank_cap_firing(ranks, fired)
  return {name: {'rate': float(r.rate), 'count': int(r.count),
                 'total': int(r.total)} for name, r in out._asdict().items()}


def method_metrics(displayed, targets) -> dict:
  """Per-turn R@K, BRI and stop rate of one method's displayed lists."""
  ranks = metrics.target_ranks(displayed, targets)
  out = {f'R@{k}': np.asarray(metrics.recall_at_k(ranks, k)).tolist()
         for k in RECALL_KS}
  out['BRI'] = np.asarray(metrics.bri(ranks)).tolist()
  for k in HITS_KS:
    out[f'Hits@{k}'] = np.asarray(metrics.cumulative_hits(ranks, k)).tolist()
  # Share of sessions whose target has been shown as top-1 by turn t.
  out['stop_rate'] = np.mean(np.minimum.accumulate(np.asarray(ranks), axis=1)
                             == 1, axis=0).tolist()
  return out


def intervals(displayed, targets, num_resamples: int, seed: int) -> dict:
  """Per-turn 95% session-bootstrap intervals of ``INTERVAL_KEYS``:
  ``{key: {'lower': [T+1], 'upper': [T+1]}}``. Every method gets the same
  resamples (``seed``)."""
  ranks = np.asarray(metrics.target_ranks(displayed, targets))
  best = np.minimum.accumulate(ranks, axis=1)
  columns = []
  for key in INTERVAL_KEYS:
    k = int(key.split('@')[1])
    columns.append((best if key.startswith('Hits') else ranks) <= k)
  values = np.concatenate(columns, axis=1).astype(np.float32)  # [S, 6(T+1)]
  out = metrics.bootstrap_mean(values, num_resamples,
                               jax.random.key(seed + 1))
  turns = ranks.shape[1]
  lower = np.asarray(out.lower).reshape(len(INTERVAL_KEYS), turns)
  upper = np.asarray(out.upper).reshape(len(INTERVAL_KEYS), turns)
  return {key: {'lower': lower[i].tolist(), 'upper': upper[i].tolist()}
          for i, key in enumerate(INTERVAL_KEYS)}


def ranks_csv(displayed: dict, sessions, targets, video_ids=None) -> str:
  """One row per method, session and turn: ``method, session, query_id,
  target_id, turn, rank, top1_id`` (``rank`` 1-based, ``K + 1`` when the
  target is absent from the list; ids as in the TREC run files)."""
  doc = (lambda i: str(int(i))) if video_ids is None else (
      lambda i: str(video_ids[int(i)]) if i >= 0 else '')
  buffer = io.StringIO()
  writer = csv.writer(buffer, lineterminator='\n')
  writer.writerow(['method', 'session', 'query_id', 'target_id', 'turn',
                   'rank', 'top1_id'])
  for method, d in displayed.items():
    d = np.asarray(d)
    ranks = np.asarray(metrics.target_ranks(d, targets))
    for row, (s, target) in enumerate(zip(sessions, targets)):
      for t in range(d.shape[1]):
        writer.writerow([method, int(s), f'q{int(s)}', doc(target), t,
                         int(ranks[row, t]), doc(d[row, t, 0])])
  return buffer.getvalue()


def failure_table(displayed, targets) -> dict:
  ranks = metrics.target_ranks(displayed, targets)
  modes = metrics.failure_modes(ranks, np.asarray(displayed)[:, :, 0])
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
              seed: int) -> dict:
  """Paired bootstrap of the per-turn R@1 difference ``a - b``."""
  hits = lambda d: np.asarray(metrics.target_ranks(d, targets)) <= 1
  interval = metrics.paired_bootstrap(hits(displayed_a), hits(displayed_b),
                                      num_resamples, jax.random.key(seed))
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


def _pct(x):
  return f'{100 * x:.1f}'


def _with_interval(m: dict, key: str, t: int) -> str:
  """``56.8 [52.4, 61.2]``: a percentage with its interval when known."""
  ci = m.get('intervals', {}).get(key)
  value = _pct(m[key][t])
  if ci is None:
    return value
  return f"{value} [{_pct(ci['lower'][t])}, {_pct(ci['upper'][t])}]"


def markdown(per_method: dict, failures: dict, boot: dict | None,
             header: str, firing: dict | None = None) -> str:
  """The Markdown report: per-turn R@1, R@5, cumulative Hits@10 and BRI,
  failure modes, rank-cap firing, bootstrap."""
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
      cells = (f'{v:.3f}' for v in m[key]) if key == 'BRI' else (
          _with_interval(m, key, t) for t in range(turns))
      lines.append(f'| {method} | ' + ' | '.join(cells) + ' |')
    lines.append('')
  lines += ['### Failure modes over active transitions', '',
            '| method | drift | stagnation | repeated top-1 | improvement | '
            'recovery | transitions |', '|---|---:|---:|---:|---:|---:|---:|']
  for method, f in failures.items():
    cell = lambda n: (f"{_pct(f[n]['rate'])} ({f[n]['count']}/"
                      f"{f[n]['total']})") if f[n]['total'] else 'n/a'
    lines.append(f'| {method} | ' + ' | '.join(
        cell(n) for n in ('drift', 'stagnation', 'repeated_top1',
                          'improvement', 'recovery'))
                 + f" | {f['drift']['total']} |")
  lines.append('')
  if firing:
    lines += ['### Rank-cap firing over active transitions (paper A.4)', '',
              '| method | fires | target rank improves when it fires |',
              '|---|---:|---:|']
    for method, f in firing.items():
      cell = lambda r: (f"{_pct(r['rate'])} ({r['count']}/{r['total']})"
                        if r['total'] else 'n/a')
      lines.append(f"| {method} | {cell(f['fired'])} | "
                   f"{cell(f['improved'])} |")
    lines.append('')
  if boot:
    lines.append(bootstrap_markdown(boot))
  return '\n'.join(lines)


def _tex(text: str) -> str:
  return text.replace('\\', r'\textbackslash{}').replace('_', r'\_').replace(
      '%', r'\%').replace('&', r'\&').replace('#', r'\#')


def latex_tables(per_method: dict, caption: str = '') -> str:
  """``tables.tex``: booktabs tables of R@1, cumulative Hits@10 (%, with
  the 95% interval below each value when known) and BRI per turn, the best
  method per turn in bold (highest; lowest for BRI). Needs ``booktabs``."""
  turns = len(next(iter(per_method.values()))['R@1'])
  out = ['% recovr_jax run tables; \\usepackage{booktabs}', '']
  for key, title, better in (('R@1', 'R@1 (\\%) per turn', max),
                             ('Hits@10', 'Cumulative Hits@10 (\\%) per turn',
                              max),
                             ('BRI', 'BRI per turn (lower is better)', min)):
    best = [better(m[key][t] for m in per_method.values())
            for t in range(turns)]
    out += ['\\begin{table}[t]', '\\centering', '\\small',
            f'\\caption{{{title}{". " + _tex(caption) if caption else ""}}}',
            '\\begin{tabular}{l' + 'r' * turns + '}', '\\toprule',
            'Method & ' + ' & '.join(f'T{t}' for t in range(turns)) +
            ' \\\\', '\\midrule']
    for method, m in per_method.items():
      cells = []
      for t in range(turns):
        v = m[key][t]
        text = f'{v:.3f}' if key == 'BRI' else _pct(v)
        if v == best[t]:
          text = f'\\textbf{{{text}}}'
        ci = m.get('intervals', {}).get(key)
        if ci is not None:
          text += (f' {{\\scriptsize[{_pct(ci["lower"][t])}, '
                   f'{_pct(ci["upper"][t])}]}}')
        cells.append(text)
      out.append(f'{_tex(method)} & ' + ' & '.join(cells) + ' \\\\')
    out += ['\\bottomrule', '\\end{tabular}', '\\end{table}', '']
  return '\n'.join(out)


def bootstrap_markdown(boot: dict) -> str:
  """One paired-bootstrap table (``bootstrap`` plus ``a``, ``b`` and
  ``num_resamples``)."""
  turns = len(boot['mean'])
  cols = ' | '.join(f'T{t}' for t in range(turns))
  sep = '|'.join(['---'] + ['---:'] * turns)
  return '\n'.join([
      f"### Paired bootstrap: {boot['a']} - {boot['b']}, R@1 "
      f"({boot['num_resamples']:,} resamples, 95% percentile interval, "
      'points)', '', f'| | {cols} |', f'|{sep}|',
      '| difference | ' + ' | '.join(_pct(v) for v in boot['mean']) + ' |',
      '| interval | ' + ' | '.join(
          f'[{_pct(lo)}, {_pct(hi)}]'
          for lo, hi in zip(boot['lower'], boot['upper'])) + ' |', ''])


_MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', 'h', '*', 'p')
_LINES = ('-', '--', '-.', ':')


def _style(i: int) -> dict:
  """A distinct colour, marker and line for the ``i``-th method, for any
  number of methods (10 colours x 12 markers x 4 line styles)."""
  return {'color': f'C{i % 10}', 'marker': _MARKERS[i % len(_MARKERS)],
          'linestyle': _LINES[(i // 10) % len(_LINES)]}


def plot(per_method: dict, path_prefix: str, boot: dict | None = None
         ) -> list[str]:
  """PNG and PDF plots of R@1 (%, with its 95% interval as a band) and BRI
  against turns, and with ``boot`` the paired difference (ReCoVR minus the
  bootstrap baseline, points, with its band); [] without matplotlib."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return []
  written = []

  def save(fig, name):
    fig.tight_layout()
    for ext in ('png', 'pdf'):
      path = f'{path_prefix}{name}.{ext}'
      fig.savefig(path, dpi=100)
      written.append(path)
    plt.close(fig)

  for key in ('R@1', 'BRI'):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    scale = 100.0 if key != 'BRI' else 1.0
    for i, (method, m) in enumerate(per_method.items()):
      turns = range(len(m[key]))
      style = _style(i)
      ax.plot(turns, [scale * v for v in m[key]], label=method,
              markersize=4, linewidth=1.2, **style)
      ci = m.get('intervals', {}).get(key)
      if ci is not None:
        ax.fill_between(turns, [scale * v for v in ci['lower']],
                        [scale * v for v in ci['upper']],
                        color=style['color'], alpha=0.12, linewidth=0)
    ax.set_xlabel('turn')
    ax.set_ylabel(f'{key} (%)' if key != 'BRI' else 'BRI (lower is better)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    save(fig, key.replace('@', ''))
  if boot:
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    turns = range(len(boot['mean']))
    ax.plot(turns, [100 * v for v in boot['mean']], marker='o', color='C0',
            label=f"{boot['a']} - {boot['b']}")
    ax.fill_between(turns, [100 * v for v in boot['lower']],
                    [100 * v for v in boot['upper']], color='C0', alpha=0.2,
                    linewidth=0, label='95% paired bootstrap interval')
    ax.axhline(0.0, color='k', linewidth=0.8)
    ax.set_xlabel('turn')
    ax.set_ylabel('R@1 difference (points)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, 'R1_difference')
  return written


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


def validity_markdown(counts_by_method: dict) -> str:
  """Per method and module: calls, first-pass validity, retries and
  fallbacks over every batch of the run (resumed ones included); methods
  that made no reasoning call are left out."""
  lines = ['### Reasoning validity (every batch, resumed ones included)', '',
           '| method | module | calls | first-pass valid | valid retries | '
           'fallbacks |', '|---|---|---:|---:|---:|---:|']
  for method, modules in counts_by_method.items():
    for module, c in sorted(modules.items()):
      lines.append(f"| {method} | {module} | {c['calls']} | "
                   f"{_pct(c['first_pass_valid'] / c['calls'])} | "
                   f"{c['retry_valid']} | {c['fallback']} |")
  return '\n'.join(lines) + '\n'


def errors_markdown(raised: dict, num_sessions: int) -> str:
  """Sessions that raised per method (each counted as a miss)."""
  lines = ['### Sessions that raised (counted as misses)', '',
           '| method | sessions that raised | of |', '|---|---:|---:|']
  for method, n in raised.items():
    lines.append(f'| {method} | {n} | {num_sessions} |')
  return '\n'.join(lines) + '\n'


def dumps(obj) -> str:
  return json.dumps(obj, indent=2, sort_keys=True)
