"""What a paper shows of a run: ``tables.tex`` (booktabs) and the plots.

Both print methods under their display names. A table's bold marks the
best value of its column, as a paper's reader reads bold; a dagger marks
the paired session bootstrap's verdict (docs/runner.md, "tables.tex").
"""

from recovr_jax.run.reporting import MARKS_SESSIONS
from recovr_jax.run.reporting import pct as _pct


def _tex(text: str) -> str:
  return text.replace('\\', r'\textbackslash{}').replace('_', r'\_').replace(
      '%', r'\%').replace('&', r'\&').replace('#', r'\#')


# The metrics of ``tables.tex``: (key, what a caption calls it, how a value
# is printed, whether higher is better).
_TEX_METRICS = (
    ('R@1', 'R@1 (\\%)', _pct, True),
    ('Hits@10', 'Cumulative Hits@10 (\\%: the target in the top 10 of any '
     'list so far)', _pct, True),
    ('BRI', 'BRI (best log-rank integral; lower is better)',
     lambda v: f'{v:.2f}', False),
)
DAGGER = '$^\\dagger$'


def column_best(per_method: dict, key: str) -> set:
  """The ``(method, turn)`` cells of metric ``key`` a table puts in bold:
  in each turn's column, the best value as printed (highest; lowest for
  BRI), every row that ties it; nothing for a table of one row."""
  _, _, text, higher = next(m for m in _TEX_METRICS if m[0] == key)
  if len(per_method) < 2:
    return set()
  turns = len(next(iter(per_method.values()))[key])
  out = set()
  for t in range(turns):
    values = {m: v[key][t] for m, v in per_method.items()}
    best = (max if higher else min)(values.values())
    out |= {(m, t) for m, v in values.items() if text(v) == text(best)}
  return out


# Below this many sessions a caption and the report say the intervals are
# rough.
FEW_SESSIONS = 50


def paired_marks(boot: dict | None) -> set:
  """The ``(method, turn)`` R@1 cells a table marks with a dagger: the paired
  session bootstrap's two methods (``bootstrap.json``: ``a`` minus ``b``),
  ``a`` at a turn where the interval of the difference lies above 0, ``b``
  where it lies below 0; nothing without a comparison."""
  if not boot:
    return set()
  out = set()
  for t, (lo, hi) in enumerate(zip(boot['lower'], boot['upper'])):
    if lo > 0:
      out.add((boot['a'], t))
    elif hi < 0:
      out.add((boot['b'], t))
  return out


def _latex_table(per_method: dict, key: str, label: str, caption: str,
                 names: dict, wide: bool, bold: set,
                 dagger: set) -> list[str]:
  """One booktabs table: a row of values per method (``bold`` and
  ``dagger``: the cells so marked) and, where the method has intervals, a
  small row of ``lower--upper`` below it; wider than the line, it is
  scaled down to the line (``graphicx``)."""
  _, _, text, _ = next(m for m in _TEX_METRICS if m[0] == key)
  turns = len(next(iter(per_method.values()))[key])
  env = 'table*' if wide else 'table'
  out = [f'\\begin{{{env}}}[t]', '\\centering',
         f'\\caption{{{caption}}}', f'\\label{{{label}}}',
         '\\small' if wide else '\\footnotesize',
         '\\setlength{\\tabcolsep}{4pt}' if wide else
         '\\setlength{\\tabcolsep}{3pt}',
         '\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}'
         '{!}{%', '\\begin{tabular}{l' + 'r' * turns + '}', '\\toprule',
         'Method & ' + ' & '.join(f'T{t}' for t in range(turns)) + ' \\\\',
         '\\midrule']
  size = '\\scriptsize'
  for method, m in per_method.items():
    cells = [(f'\\textbf{{{text(m[key][t])}}}' if (method, t) in bold
              else text(m[key][t])) +
             (DAGGER if (method, t) in dagger else '') for t in range(turns)]
    out.append(f'{_tex(names.get(method, method))} & ' + ' & '.join(cells) +
               ' \\\\')
    ci = m.get('intervals', {}).get(key)
    if ci is not None:
      out.append(' & ' + ' & '.join(
          f'{{{size} {text(ci["lower"][t])}--{text(ci["upper"][t])}}}'
          for t in range(turns)) + ' \\\\[2pt]')
  out += ['\\bottomrule', '\\end{tabular}}', f'\\end{{{env}}}', '']
  return out


def counted(sessions: int, clusters: int) -> str:
  """``sessions`` in words, with the distinct queries they repeat when
  fewer ("12 sessions" / "2 distinct queries (50 sessions)")."""
  if clusters == sessions:
    return f'{sessions} sessions'
  return (f'{clusters} distinct {"query" if clusters == 1 else "queries"} '
          f'({sessions} sessions)')


def latex_tables(per_method: dict, *, sessions: int, benchmark: str,
                 resamples: int, names: dict | None = None,
                 main: tuple = (), boot: dict | None = None,
                 clusters: int | None = None) -> str:
  """``tables.tex`` (booktabs and graphicx): a compact R@1 table of the
  ``main`` methods present for one column (``table``), then R@1, cumulative
  Hits@10 and BRI per turn of every method across the page (``table*``).
  Each value has its 95% session-bootstrap interval in a small row below
  it. Bold marks the best value of its column among the table's rows
  (``column_best``); in the R@1 tables a dagger marks
  ``paired_marks(boot)`` (the paired bootstrap's verdict,
  ``bootstrap.json``); below ``MARKS_SESSIONS`` distinct queries
  (``clusters``, default ``sessions``: what the intervals resample) there
  are neither, and the captions say why; below 2 no intervals either.
  ``names`` maps a method to the name printed (``methods.display_name``)."""
  names = names or {}
  clusters = sessions if clusters is None else clusters
  turns = len(next(iter(per_method.values()))['R@1'])
  has_ci = any('intervals' in m for m in per_method.values())
  if has_ci and clusters < 2:
    per_method = {m: {k: v for k, v in r.items() if k != 'intervals'}
                  for m, r in per_method.items()}
    below = ('No intervals: every session repeats one query, and a '
             'bootstrap over one query has nothing to resample.')
  else:
    below = (f'Below each value, its 95\\% session-bootstrap percentile '
             f'interval ({resamples:,} resamples).' if has_ci
             else 'No intervals were computed.')
  if 2 <= clusters < FEW_SESSIONS:
    below += (f' Only {counted(sessions, clusters)}: the intervals are '
              f'rough (at least {FEW_SESSIONS} are advised).')
  marked = clusters >= MARKS_SESSIONS
  dagger = paired_marks(boot) if marked else set()
  best = (' In bold: the best value of each column among these rows '
          '(the highest; for BRI the lowest).')
  if not marked:
    best = (f' No cell is marked: with {counted(sessions, clusters)} '
            f'(fewer than {MARKS_SESSIONS} distinct queries) neither the '
            'best value nor the paired test would mean much.')
    paired = ''
  elif boot:
    paired = (f' {DAGGER}: {_tex(names.get(boot["a"], boot["a"]))} or '
              f'{_tex(names.get(boot["b"], boot["b"]))} at a turn where the '
              'paired session bootstrap of their R@1 difference '
              f'({boot["num_resamples"]:,} resamples, 95\\%; bootstrap.json) '
              'excludes 0, on the side of the one ahead.')
  else:
    paired = ' No dagger: no paired comparison was computed.'
  over = (f'turns 0--{turns - 1} (turn 0: the composed query before any '
          f'feedback) over {sessions:,} sessions of {_tex(benchmark)}. ')
  out = ['% recovr_jax run tables; \\usepackage{booktabs,graphicx}', '']

  def bold(rows, key):
    return column_best(rows, key) if marked else set()

  shown = {m: per_method[m] for m in main if m in per_method}
  if len(shown) >= 2:
    out += _latex_table(shown, 'R@1', 'tab:recovr-r1-main',
                        'R@1 (\\%) of ReCoVR and the adapted baselines at '
                        + over + below + best + paired, names, wide=False,
                        bold=bold(shown, 'R@1'), dagger=dagger)
  for key, title, _, _ in _TEX_METRICS:
    label = 'tab:recovr-' + key.lower().replace('@', '')
    r1 = key == 'R@1'
    out += _latex_table(per_method, key, label, f'{title} at ' + over + below
                        + best + (paired if r1 else ''), names, wide=True,
                        bold=bold(per_method, key),
                        dagger=dagger if r1 else set())
  return '\n'.join(out)


_MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', 'h', '*', 'p')
_LINES = ('-', '--', '-.', ':')


def _style(i: int) -> dict:
  """A distinct colour, marker and line for the ``i``-th method, for any
  number of methods (10 colours x 12 markers x 4 line styles)."""
  return {'color': f'C{i % 10}', 'marker': _MARKERS[i % len(_MARKERS)],
          'linestyle': _LINES[(i // 10) % len(_LINES)]}


def _dodge(i: int, n: int) -> float:
  """The sideways shift of the ``i``-th of ``n`` curves (at most 0.15 of a
  turn either way), so that curves with equal values stay visible."""
  return 0.0 if n < 2 else (i - (n - 1) / 2) * min(0.06, 0.3 / (n - 1))


def plot(per_method: dict, path_prefix: str, boot: dict | None = None,
         title: str = '', names: dict | None = None, main: tuple = ()
         ) -> list[str]:
  """PNG and PDF plots of R@1 (%, with its 95% interval as a band) and BRI
  (with its band) against turns, and with ``boot`` the paired difference
  (ReCoVR minus the bootstrap baseline, points, with its band); [] without
  matplotlib. Each curve has its own colour, marker and line, its points
  dodged sideways (``_dodge``) so that equal curves do not hide each other.
  With more than six methods, ``plot_R1`` / ``plot_BRI`` show the ``main``
  ones present and ``plot_R1_all`` / ``plot_BRI_all`` every method.
  ``title``: e.g. the sessions and the benchmark; ``names``: printed
  names."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return []
  names = names or {}
  written = []

  def save(fig, name):
    fig.tight_layout()
    for ext in ('png', 'pdf'):
      path = f'{path_prefix}{name}.{ext}'
      fig.savefig(path, dpi=100)
      written.append(path)
    plt.close(fig)

  shown = [m for m in main if m in per_method]
  groups = {'': list(per_method)}
  if len(per_method) > 6 and len(shown) >= 2:
    groups = {'': shown, '_all': list(per_method)}
  for key in ('R@1', 'BRI'):
    for suffix, chosen in groups.items():
      fig, ax = plt.subplots(figsize=(6.5, 4.2))
      scale = 100.0 if key != 'BRI' else 1.0
      for i, method in enumerate(chosen):
        m = per_method[method]
        turns = [t + _dodge(i, len(chosen)) for t in range(len(m[key]))]
        style = _style(i)
        ax.plot(turns, [scale * v for v in m[key]],
                label=names.get(method, method), markersize=4,
                linewidth=1.2, **style)
        ci = m.get('intervals', {}).get(key)
        if ci is not None:
          ax.fill_between(turns, [scale * v for v in ci['lower']],
                          [scale * v for v in ci['upper']],
                          color=style['color'], alpha=0.12, linewidth=0)
      ax.set_xticks(range(len(next(iter(per_method.values()))[key])))
      ax.set_xlabel('turn')
      ax.set_ylabel(f'{key} (%)' if key != 'BRI' else
                    'BRI (lower is better)')
      if title:
        ax.set_title(title, fontsize=8)
      ax.grid(alpha=0.3)
      ax.legend(fontsize=6 if len(chosen) > 6 else 7,
                ncol=2 if len(chosen) > 6 else 1)
      save(fig, key.replace('@', '') + suffix)
  if boot:
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    turns = range(len(boot['mean']))
    ax.plot(turns, [100 * v for v in boot['mean']], marker='o', color='C0',
            label=f"{names.get(boot['a'], boot['a'])} - "
            f"{names.get(boot['b'], boot['b'])}")
    ax.fill_between(turns, [100 * v for v in boot['lower']],
                    [100 * v for v in boot['upper']], color='C0', alpha=0.2,
                    linewidth=0, label='95% paired bootstrap interval')
    ax.axhline(0.0, color='k', linewidth=0.8)
    ax.set_xlabel('turn')
    ax.set_ylabel('R@1 difference (points)')
    if title:
      ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, 'R1_difference')
  return written
