"""Per-turn metrics, failure modes, the bootstrap and the written report."""

import csv
import io
import json

import jax
import numpy as np

from recovr_jax.core import metrics

RECALL_KS = (1, 5, 10, 50)
HITS_KS = (1, 5, 10)   # cumulative Hits@K


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
  buffer = io.StringIO()
  writer = csv.writer(buffer)
  keys = ([f'R@{k}' for k in RECALL_KS] + ['BRI', 'stop_rate'] +
          [f'Hits@{k}' for k in HITS_KS])
  writer.writerow(['method', 'turn'] + keys)
  for method, m in per_method.items():
    for t in range(len(m['R@1'])):
      writer.writerow([method, t] + [f'{m[k][t]:.6f}' for k in keys])
  return buffer.getvalue()


def _pct(x):
  return f'{100 * x:.1f}'


def markdown(per_method: dict, failures: dict, boot: dict | None,
             header: str, firing: dict | None = None) -> str:
  """The Markdown report: per-turn R@1, R@5, cumulative Hits@10 and BRI,
  failure modes, rank-cap firing, bootstrap."""
  lines = [header, '']
  turns = len(next(iter(per_method.values()))['R@1'])
  cols = ' | '.join(f'T{t}' for t in range(turns))
  sep = '|'.join(['---'] + ['---:'] * turns)
  for key, fmt, title in (('R@1', _pct, 'R@1 (%) per turn'),
                          ('R@5', _pct, 'R@5 (%) per turn'),
                          ('Hits@10', _pct, 'Cumulative Hits@10 (%) per '
                           'turn: target in the top 10 of any list so far'),
                          ('BRI', lambda x: f'{x:.3f}',
                           'BRI per turn (lower is better; ranks censored at '
                           'K + 1)')):
    lines += [f'### {title}', '', f'| method | {cols} |', f'|{sep}|']
    for method, m in per_method.items():
      lines.append(f'| {method} | ' + ' | '.join(fmt(v) for v in m[key])
                   + ' |')
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


def plot(per_method: dict, path_prefix: str) -> list[str]:
  """PNG plots of R@1 and BRI against turns; [] without matplotlib."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return []
  written = []
  for key in ('R@1', 'BRI'):
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, m in per_method.items():
      ax.plot(range(len(m[key])), m[key], marker='o', label=method)
    ax.set_xlabel('turn')
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = f"{path_prefix}{key.replace('@', '')}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
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
