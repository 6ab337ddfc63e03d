"""The paper's checkable claims as paired comparisons with verdicts.

A claim is a list of checks; a check is a quantity computed from
per-session statistics of finished runs (R@K, BRI, failure-mode and
rank-cap rates, active transitions), with its percentile 95% session
bootstrap interval (the same resampled sessions for every method and
setting of a run group, as in the paper's appendix A.3). A check's verdict:

* ``greater`` (the paper's side is ``> 0``): reproduced when the interval
  lies above zero, contradicted when it lies below, else inconclusive;
* ``at_least`` ("matches or exceeds", margin ``d``): reproduced when the
  interval lies above ``-d``, contradicted when below ``-d``;
* ``within`` ("similar", "stays within", "close"; margin ``d``):
  reproduced when the interval lies inside ``(-d, d)``, contradicted when
  it lies outside;
* ``marginal`` ("marginally ahead"; margin ``d``): reproduced when the
  point estimate is not negative and the interval lies inside ``(-d,
  d)``; contradicted when the interval lies below zero (a significant
  deficit) or above ``d`` (a lead that is not marginal);
* ``equal`` (the same on every session, "all methods share the same
  initialization"): reproduced when the difference is zero on every
  session, contradicted otherwise.

A property that holds by construction (a count that cannot be non-zero)
is not checked: its claim is untestable, with the reason.

A ``greater`` check whose two sides agree on every session (the difference
and its interval exactly zero: e.g. R@1 at turn 1 with and without State
Reflection, which only moves ranks below the top under the default
placement) is untestable in that run, not inconclusive.

A claim is contradicted when any check is; reproduced when every check is
(an untestable check is not reproduced: a claim "at every turn" with one
turn tied on every session is inconclusive, not reproduced without that
turn); untestable when this setting cannot test it (the reason is given)
or none of its checks can be decided; inconclusive otherwise. The margins are fixed here, before any result:
``MARGIN_POINTS`` is 1.5 times the expected half-width of a paired R@1
interval at 2,000 sessions, so an equivalence can be decided at that size.

Dimension legend: ``S`` sessions, ``T + 1`` turns, ``R`` resamples.
"""

import collections
import dataclasses
import json
import pathlib
from typing import Callable

import jax
import numpy as np

from recovr_jax import readers
from recovr_jax import trajectory_files
from recovr_jax.core import list_metrics
from recovr_jax.core import resampling

MARGIN_POINTS = 0.03   # R@K and rates: 3 points
MARGIN_BRI = 0.05      # BRI (log rank)
VERDICTS = ('reproduced', 'contradicted', 'inconclusive', 'untestable',
            'not run')
MODES = ('drift', 'stagnation', 'repeated_top1', 'improvement', 'recovery')


class MissingRows(ValueError):
  """A claim reads a run or method the evidence does not hold."""


@dataclasses.dataclass(frozen=True, eq=False)
class Run:
  """Per-session outcomes of one finished run.

  ``sessions``: ``[S]`` session ids, ascending; ``ranks``: method ->
  ``[S, T+1]`` int target ranks (``K + 1`` when absent); ``top1``: method ->
  ``[S, T+1]`` int codes of the displayed top-1 (equal codes, equal ids);
  ``fired``: method -> ``[S, T+1]`` bool rank-cap firing (rank-capping
  methods only).
  """
  sessions: np.ndarray
  ranks: dict
  top1: dict
  fired: dict


def load(directory) -> Run:
  """The ``Run`` of a finished run directory (``ranks.csv``, and
  ``trajectories.jsonl`` for rank-cap firing)."""
  d = readers.require_finished(
      directory, ('ranks.csv', trajectory_files.path(directory).name))
  rows = collections.defaultdict(dict)  # method -> (session, turn) -> row
  codes = {}
  # Read whole and checked (readers): a file cut mid-row or edited is an
  # error naming the row, not a shorter or shifted value.
  table = readers.read_csv(d / 'ranks.csv',
                           ('method', 'session', 'turn', 'rank', 'top1_id'),
                           types={'session': int, 'turn': int, 'rank': int},
                           written_by_us=True)
  for line, row in zip(table.numbers, table.rows):
    if None in (row['session'], row['turn'], row['rank']):
      raise readers.FileError(d / 'ranks.csv', 'expected integer session, '
                              'turn and rank', line, unit='row')
    top1 = codes.setdefault(row['top1_id'], len(codes))
    rows[row['method']][(row['session'], row['turn'])] = (row['rank'], top1)
  if not rows:
    raise ValueError(f'{d / "ranks.csv"} holds no rows')
  sessions = None
  ranks, top1 = {}, {}
  for method, cells in rows.items():
    ids = np.array(sorted({s for s, _ in cells}))
    turns = 1 + max(t for _, t in cells)
    if sessions is None:
      sessions = ids
    elif not np.array_equal(ids, sessions):
      raise ValueError(f'{d / "ranks.csv"}: method {method} has other '
                       'sessions than the first method')
    if len(cells) != len(ids) * turns:
      raise ValueError(f'{d / "ranks.csv"}: method {method} lacks rows '
                       f'({len(cells)} of {len(ids) * turns})')
    grid = np.array([[cells[(s, t)] for t in range(turns)] for s in ids])
    ranks[method], top1[method] = grid[..., 0], grid[..., 1]
  position = {int(s): i for i, s in enumerate(sessions)}
  fired = {}
  for rec in trajectory_files.read(d):
    method = rec['method']
    if method not in ranks:
      continue
    out = fired.setdefault(method, np.zeros(ranks[method].shape, bool))
    for t, turn in enumerate(rec['turns'][:out.shape[1]]):
      out[position[rec['session']], t] = bool(turn.get('rank_cap_fired'))
  return Run(sessions=sessions, ranks=ranks, top1=top1, fired=fired)


def save_groups(path, groups: dict, meta: dict | None = None) -> None:
  """Writes ``groups`` (group -> run name -> ``Run``) to one compressed
  ``.npz``: the per-session outcomes the claims read, so a family member
  can be evaluated again (and committed) without its run directories.
  ``meta``: JSON-able provenance kept beside them (e.g. the runs' configs)."""
  arrays = {'meta': np.asarray(json.dumps(meta or {}, sort_keys=True))}
  for group, runs in groups.items():
    for name, run in runs.items():
      for part in ('/', ' '):
        if part in group + name:
          raise ValueError(f'group {group!r} / run {name!r}: names may not '
                           f'hold {part!r}')
      prefix = f'{group}/{name}/'
      arrays[prefix + 'sessions'] = np.asarray(run.sessions, np.int64)
      for field in ('ranks', 'top1', 'fired'):
        for method, x in getattr(run, field).items():
          arrays[f'{prefix}{field}/{method}'] = np.asarray(x)
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + '.tmp.npz')
  np.savez_compressed(tmp, **arrays)
  tmp.replace(path)


def load_groups(path) -> tuple[dict, dict]:
  """``(groups, meta)`` of a file ``save_groups`` wrote."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'{path} does not exist')
  try:
    data = np.load(path, allow_pickle=False)
    keys = list(data.keys())
  except (OSError, ValueError) as e:
    raise ValueError(f'{path}: not a file of claims.save_groups ({e})') from e
  if 'meta' not in keys:
    raise ValueError(f'{path}: no "meta" entry; not a file of '
                     'claims.save_groups')
  parts = collections.defaultdict(lambda: collections.defaultdict(dict))
  for key in keys:
    if key == 'meta':
      continue
    bits = key.split('/')
    if len(bits) == 3 and bits[2] == 'sessions':
      parts[(bits[0], bits[1])]['sessions'] = data[key]
    elif len(bits) == 4 and bits[2] in ('ranks', 'top1', 'fired'):
      parts[(bits[0], bits[1])][bits[2]][bits[3]] = data[key]
    else:
      raise ValueError(f'{path}: unexpected entry {key!r}')
  groups = collections.defaultdict(dict)
  for (group, name), fields in sorted(parts.items()):
    if 'sessions' not in fields:
      raise ValueError(f'{path}: run {group}/{name} has no sessions')
    groups[group][name] = Run(
        sessions=fields['sessions'], ranks=dict(fields['ranks']),
        top1=dict(fields['top1']), fired=dict(fields['fired']))
  return dict(groups), json.loads(str(data['meta']))


def transitions(ranks, top1) -> dict:
  """Per-session failure-mode counts: mode -> ``(count [S], total [S])``
  over active transitions, as ``list_metrics.failure_modes`` pools them."""
  ranks, top1 = np.asarray(ranks), np.asarray(top1)
  active = np.asarray(list_metrics.default_active(ranks))
  prev, cur = ranks[:, :-1], ranks[:, 1:]
  moving = active[:, 1:]
  stagnated = cur >= prev
  events = {
      'drift': (cur > prev, moving),
      'stagnation': (stagnated, moving),
      'repeated_top1': (top1[:, 1:] == top1[:, :-1], moving),
      'improvement': (cur < prev, moving),
      'recovery': (cur[:, 1:] < cur[:, :-1],
                   moving[:, :-1] & stagnated[:, :-1] & moving[:, 1:]),
  }
  return {mode: ((event & mask).sum(1), mask.sum(1))
          for mode, (event, mask) in events.items()}


def session_bri(ranks) -> np.ndarray:
  """``[S, T+1]`` per-session BRI; its mean over sessions is
  ``list_metrics.bri`` (BRI is linear in the per-session log best rank)."""
  log_best = np.log(np.minimum.accumulate(np.asarray(ranks, np.float64),
                                          axis=1))
  trapezoids = (log_best[:, :-1] + log_best[:, 1:]) / 2
  steps = np.arange(1, log_best.shape[1])
  return np.concatenate([log_best[:, :1],
                         np.cumsum(trapezoids, axis=1) / steps], axis=1)


@dataclasses.dataclass(frozen=True)
class Quantity:
  """``const + sum(coef * statistic)``; a statistic is a ratio of sums of
  per-session values (a mean when its denominator is one per session)."""
  terms: tuple = ()     # ((coef, statistic key), ...)
  const: float = 0.0
  unit: str = 'points'  # 'points' (shares, shown x100), 'bri', 'turns'

  def _combine(self, other, sign):
    if isinstance(other, Quantity):
      return Quantity(self.terms + tuple((sign * c, k) for c, k in
                                         other.terms),
                      self.const + sign * other.const, self.unit)
    return Quantity(self.terms, self.const + sign * float(other), self.unit)

  def __add__(self, other):
    return self._combine(other, 1.0)

  def __sub__(self, other):
    return self._combine(other, -1.0)

  def __rsub__(self, other):
    return (-self) + other

  def __neg__(self):
    return Quantity(tuple((-c, k) for c, k in self.terms), -self.const,
                    self.unit)


@dataclasses.dataclass(frozen=True)
class Check:
  """One comparison of a claim; see the module docstring for ``kind``."""
  label: str
  quantity: Quantity
  kind: str = 'greater'
  margin: float = 0.0


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim of the paper: where it is, the sentence, the paper's number,
  and its checks (``checks(view) -> [Check]``) or why it is untestable."""
  key: str
  where: str
  quote: str
  paper: str
  checks: Callable | None = None
  untestable: str = ''
  note: str = ''          # how the sentence was encoded
  readings: bool = False  # also under the paper's reading of no-reflection
  group: str = 'main'     # the run group it reads
  # Runs of its group beyond those every member has: a member without
  # them does not run the claim (``not run``, naming them).
  runs: tuple = ()


class Evidence:
  """The runs a family member's claims read, in groups of runs over the
  same sessions (``groups``: group -> run name -> ``Run``), each group
  bootstrapped with one set of ``num_resamples`` resampled sessions."""

  def __init__(self, groups: dict, num_resamples: int = 10_000,
               seed: int = 0):
    self._runs, self._index, self._group, self._turns = {}, {}, {}, {}
    for g, (group, runs) in enumerate(sorted(groups.items())):
      first = None
      for name, run in runs.items():
        if name in self._runs:
          raise ValueError(f'run {name!r} is in two groups')
        if first is None:
          first = run
        elif not np.array_equal(run.sessions, first.sessions):
          raise ValueError(f'run {name!r} of group {group!r} has other '
                           'sessions than the group\'s first run: paired '
                           'comparisons need the same sessions')
        self._runs[name], self._group[name] = run, group
      if first is not None:
        s = len(first.sessions)
        index = np.asarray(resampling.bootstrap_indices(
            jax.random.key(seed + g), num_resamples, s))
        # Resample r's statistic is (counts[r] @ num) / (counts[r] @ den):
        # one matrix-vector product per statistic instead of a gather.
        flat = (index + s * np.arange(num_resamples)[:, None]).ravel()
        self._index[group] = np.bincount(
            flat, minlength=num_resamples * s).reshape(
                num_resamples, s).astype(np.float32)
        shapes = {x.shape[1] for r in runs.values() for x in r.ranks.values()}
        if len(shapes) > 1:
          raise ValueError(f'the runs of group {group!r} have different '
                           f'numbers of turns: {sorted(shapes)}')
        self._turns[group] = shapes.pop() - 1 if shapes else 0
    self._cache = {}

  @property
  def groups(self) -> tuple:
    return tuple(self._turns)

  def runs(self, group: str) -> dict:
    """Run name -> ``Run`` of ``group``."""
    return {n: r for n, r in self._runs.items() if self._group[n] == group}

  def num_turns(self, group: str) -> int:
    return self._turns[group]

  def run(self, name: str) -> Run:
    if name not in self._runs:
      raise MissingRows(f'no run {name!r} (have: {", ".join(self._runs)})')
    return self._runs[name]

  def method(self, run: str, method: str):
    r = self.run(run)
    if method not in r.ranks:
      raise MissingRows(f'run {run!r} has no method {method!r}')
    return r

  def _per_session(self, key):
    """``(num [S], den [S] or None)`` of a statistic key."""
    kind, run, method = key[:3]
    r = self.method(run, method)
    ranks = r.ranks[method]
    if kind == 'R':
      k, t = key[3:]
      return (ranks[:, t] <= k).astype(np.float64), None
    if kind == 'BRI':
      return session_bri(ranks)[:, key[3]], None
    if kind == 'rank':  # the target's rank at a turn (censored at K + 1)
      return ranks[:, key[3]].astype(np.float64), None
    if kind == 'mode':
      return transitions(ranks, r.top1[method])[key[3]]
    if kind == 'fired':  # of the firing transitions, the same-turn improved
      if method not in r.fired:
        raise MissingRows(f'run {run!r} has no rank-cap firing for {method!r}')
      moving = np.asarray(list_metrics.default_active(ranks))[:, 1:]
      firing = r.fired[method][:, 1:] & moving
      improved = firing & (ranks[:, 1:] < ranks[:, :-1])
      return improved.sum(1), firing.sum(1)
    if kind == 'transitions':
      return np.asarray(list_metrics.default_active(ranks))[:, 1:].sum(1), None
    raise ValueError(f'unknown statistic {kind!r}')

  def statistic(self, key):
    """``(value, [R] bootstrap values)`` of a statistic key."""
    if key not in self._cache:
      num, den = self._per_session(key)
      num = np.asarray(num, np.float64)
      counts = self._index[self._group[key[1]]]
      den = np.ones_like(num) if den is None else np.asarray(den, np.float64)
      with np.errstate(invalid='ignore', divide='ignore'):
        value = num.sum() / den.sum()
        boot = (counts @ num.astype(np.float32)).astype(np.float64) / (
            counts @ den.astype(np.float32))
      self._cache[key] = (float(value), boot)
    return self._cache[key]

  def evaluate(self, q: Quantity):
    """``(value, lower, upper)`` of a quantity (95% percentile interval)."""
    value, boot = q.const, q.const
    for coef, key in q.terms:
      v, b = self.statistic(key)
      value, boot = value + coef * v, boot + coef * b
    lower, upper = np.nanpercentile(boot, [2.5, 97.5])
    return float(value), float(lower), float(upper)


class View:
  """What a claim's checks read: quantities by method, turn and run.
  ``swap``: method -> run read for it instead of ``'main'`` (the paper's
  reading of the no-reflection ablation)."""

  def __init__(self, evidence: Evidence, group: str = 'main',
               swap: dict | None = None):
    self.evidence, self.swap = evidence, swap or {}
    self.num_turns = evidence.num_turns(group)
    self.read = set()  # (run, method) pairs the checks read

  def _key(self, kind, method, run, *rest):
    run = run or self.swap.get(method, 'main')
    self.evidence.method(run, method)
    self.read.add((run, method))
    return (kind, run, method) + rest

  def r(self, method, k, t, run=None) -> Quantity:
    """R@k at turn t (a share)."""
    return Quantity(((1.0, self._key('R', method, run, k, t)),))

  def bri(self, method, t, run=None) -> Quantity:
    return Quantity(((1.0, self._key('BRI', method, run, t)),), unit='bri')

  def mean_rank(self, method, t, run=None) -> Quantity:
    """The target's mean rank at turn t (censored at K + 1)."""
    return Quantity(((1.0, self._key('rank', method, run, t)),),
                    unit='rank')

  def rate(self, method, mode, run=None) -> Quantity:
    """A failure-mode rate over the method's own active transitions."""
    return Quantity(((1.0, self._key('mode', method, run, mode)),))

  def improved_when_fired(self, method, run=None) -> Quantity:
    return Quantity(((1.0, self._key('fired', method, run)),))

  def transitions(self, method, run=None) -> Quantity:
    """Active feedback transitions per session."""
    return Quantity(((1.0, self._key('transitions', method, run)),),
                    unit='turns')

  @property
  def feedback_turns(self):
    return range(1, self.num_turns + 1)


def _check_verdict(check: Check, value, lower, upper) -> str:
  d = check.margin
  if check.kind == 'greater':
    if value == lower == upper == 0:  # the same value on every session
      return 'untestable'
    return ('reproduced' if lower > 0 else 'contradicted' if upper < 0
            else 'inconclusive')
  if check.kind == 'at_least':
    return ('reproduced' if lower > -d else 'contradicted' if upper < -d
            else 'inconclusive')
  if check.kind == 'within':
    if -d < lower and upper < d:
      return 'reproduced'
    return 'contradicted' if lower > d or upper < -d else 'inconclusive'
  if check.kind == 'marginal':
    if value >= 0 and -d < lower and upper < d:
      return 'reproduced'
    return 'contradicted' if upper < 0 or lower > d else 'inconclusive'
  if check.kind == 'equal':
    return 'reproduced' if value == lower == upper == 0 else 'contradicted'
  raise ValueError(f'unknown check kind {check.kind!r}')


def combine(verdicts) -> str:
  """A claim's verdict from its checks' verdicts."""
  verdicts = list(verdicts)
  if not verdicts:
    raise ValueError('a claim needs at least one check')
  if all(v == 'untestable' for v in verdicts):
    return 'untestable'
  if 'contradicted' in verdicts:
    return 'contradicted'
  if all(v == 'reproduced' for v in verdicts):
    return 'reproduced'
  return 'inconclusive'


# The reading of a claim with ReCoVR's rank-cap where the paper's method
# text puts it (``evaluate``'s ``placement_run``).
PLACEMENT_READING = "rank-cap on the current turn (the paper's text)"


def _checked(row, claim, view, evidence):
  """``row`` with ``claim``'s checks on ``view`` and their verdict."""
  row.pop('why', None)
  for check in claim.checks(view):
    value, lower, upper = evidence.evaluate(check.quantity)
    row['checks'].append(dict(
        label=check.label, value=value, lower=lower, upper=upper,
        unit=check.quantity.unit, kind=check.kind, margin=check.margin,
        verdict=_check_verdict(check, value, lower, upper)))
  row['verdict'] = combine(c['verdict'] for c in row['checks'])
  if row['verdict'] == 'untestable':
    row['why'] = 'the compared sides agree on every session'
  return row


def evaluate(claims, evidence: Evidence, stagnation_run: str | None = None,
             not_run: dict | None = None, placement_run: str | None = None,
             placement_free=()):
  """One row per claim (and per reading of the no-reflection ablation for
  claims that read it, when ``stagnation_run`` names its run): ``key,
  where, quote, paper, note, reading, verdict, checks`` (each ``label,
  value, lower, upper, unit, kind, margin, verdict``). ``not_run``: claim
  key -> why this member does not run it (its verdict ``not run``).
  ``placement_run``: the main group's run of ReCoVR under the paper's
  rank-cap placement; each claim whose checks read ReCoVR's main run, and
  of the main run otherwise only ``placement_free`` methods (whose lists
  no placement changes: the single-list baselines), gets a second row
  reading that run instead (``reading`` ``PLACEMENT_READING``,
  ``placement`` True; not counted by ``summary``). A claim that compares
  ReCoVR with its own variants gets none: they ran under the default
  placement, and a comparison across placements would be another claim."""
  not_run = not_run or {}
  rows = []
  for claim in claims:
    readings = [('', None)]
    if claim.readings and stagnation_run is not None:
      readings.append(('only stagnation demotes without reflection',
                       {'no_reflection': stagnation_run}))
    for reading, swap in readings:
      row = dict(key=claim.key, where=claim.where, quote=claim.quote,
                 paper=claim.paper, note=claim.note, reading=reading,
                 checks=[])
      if claim.checks is None:
        row.update(verdict='untestable', why=claim.untestable)
        rows.append(row)
        continue
      if claim.key in not_run:
        row.update(verdict='not run', why=not_run[claim.key])
        rows.append(row)
        continue
      if claim.group not in evidence.groups:
        row.update(verdict='not run', why=f'no {claim.group} runs given')
        rows.append(row)
        continue
      lacking = [r for r in claim.runs
                 if r not in evidence.runs(claim.group)]
      if lacking:
        row.update(verdict='not run', why=(
            f'no {", ".join(lacking)} run in its {claim.group} group (the '
            'fidelity suite makes it)'))
        rows.append(row)
        continue
      view = View(evidence, claim.group, swap)
      rows.append(_checked(row, claim, view, evidence))
      others = {m for r, m in view.read if r == 'main'} - {'recovr'}
      if (reading or placement_run is None or
          placement_run not in evidence.runs(claim.group) or
          ('main', 'recovr') not in view.read or
          not others <= set(placement_free)):
        continue
      rows.append(_checked(
          dict(row, reading=PLACEMENT_READING, placement=True, checks=[]),
          claim, View(evidence, claim.group, {'recovr': placement_run}),
          evidence))
  return rows


def summary(rows) -> dict:
  """Verdict -> number of rows."""
  counts = dict.fromkeys(VERDICTS, 0)
  for row in rows:
    if not row.get('placement'):  # the other placement's rows apart
      counts[row['verdict']] += 1
  return counts


def _fmt(check) -> str:
  if check['verdict'] == 'untestable':
    return f"{check['label']}: tied on every session"
  scale, digits = ((100, 1) if check['unit'] == 'points' else (1, 3))
  v, lo, hi = (scale * check[k] for k in ('value', 'lower', 'upper'))
  return f"{check['label']}: {v:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _ours(row) -> str:
  if row['verdict'] in ('untestable', 'not run'):
    return row['why']
  shown = row['checks']
  # A claim over many turns and baselines: its decisive checks first.
  order = {'contradicted': 0, 'inconclusive': 1, 'untestable': 2,
           'reproduced': 3}
  shown = sorted(shown, key=lambda c: order[c['verdict']])
  text = '; '.join(_fmt(c) for c in shown[:3])
  if len(shown) > 3:
    counts = {v: sum(c['verdict'] == v for c in shown) for v in order}
    text += (f' (+{len(shown) - 3} more; of {len(shown)}: '
             + ', '.join(f'{n} {v}' for v, n in counts.items() if n) + ')')
  return text


def markdown(results: dict, title: str = "The paper's claims") -> str:
  """``results``: member -> rows (``evaluate``). A summary, then one table
  per member."""
  lines = [f'# {title}', '',
           '95% paired session-bootstrap intervals; differences in points '
           '(R@K, rates), log rank (BRI) or turns. Verdicts: reproduced (the '
           'interval on the paper\'s side of its boundary), contradicted (on '
           'the other side), inconclusive (holds it). Margins: '
           f'{100 * MARGIN_POINTS:g} points, BRI '
           f'{MARGIN_BRI:g}.', '',
           '| setting | ' + ' | '.join(VERDICTS) + ' |',
           '|---|' + '---:|' * len(VERDICTS)]
  for member, rows in results.items():
    counts = summary(rows)
    lines.append(f'| {member} | ' + ' | '.join(
        str(counts[v]) for v in VERDICTS) + ' |')
  name = lambda r: r['key'] + (f" ({r['reading']})" if r['reading'] else '')
  keys = [name(r) for r in next(iter(results.values()))
          if not r.get('placement')]
  verdicts = {m: {name(r): r['verdict'] for r in rows
                  if not r.get('placement')}
              for m, rows in results.items()}
  # Both placements: the claims whose verdict changes when ReCoVR's
  # rank-cap acts where the paper's text puts it.
  placed = {m: {r['key']: r['verdict'] for r in rows if r.get('placement')}
            for m, rows in results.items()}
  moved = [k for k in dict.fromkeys(k for v in placed.values() for k in v)
           if any(k in placed[m] and placed[m][k] != verdicts[m].get(k)
                  for m in results)]
  changed = [k for k in keys
             if len({verdicts[m].get(k) for m in results}) > 1]
  if len(results) > 1:
    lines += ['', f'Claims whose verdict changes across the family: '
              f'{len(changed)}.']
    if changed:
      lines += ['', '| claim | ' + ' | '.join(results) + ' |',
                '|---|' + '---|' * len(results)]
      lines += [f'| {k} | ' + ' | '.join(verdicts[m].get(k, '')
                                         for m in results) + ' |'
                for k in changed]
  if any(placed.values()):
    lines += ['', 'Claims whose verdict changes with the rank-cap placement '
              f'(ReCoVR\'s default, all, -> {PLACEMENT_READING}): '
              f'{len(moved)}; the rows above count the default placement '
              'only.']
    if moved:
      lines += ['', '| claim | ' + ' | '.join(results) + ' |',
                '|---|' + '---|' * len(results)]
      lines += [f'| {k} | ' + ' | '.join(
          f'{verdicts[m].get(k, "")} -> {placed[m][k]}' if k in placed[m]
          else verdicts[m].get(k, '') for m in results) + ' |' for k in moved]
  for member, rows in results.items():
    lines += ['', f'## {member}', '',
              '| claim | where | the paper says | paper | this run | verdict |',
              '|---|---|---|---|---|---|']
    for r in rows:
      if r.get('placement') and r['verdict'] == verdicts[member].get(
          r['key']):
        continue  # the other placement, shown where its verdict differs
      quote = r['quote'] + (f' (reading: {r["reading"]})' if r['reading']
                            else '') + (f' *[{r["note"]}]*' if r['note']
                                        else '')
      lines.append(f"| {r['key']} | {r['where']} | {quote} | {r['paper']} | "
                   f"{_ours(r)} | **{r['verdict']}** |")
  return '\n'.join(lines) + '\n'
