"""``tables.tex``: what it bolds, what it prints, and that it fits the page
(compiled with pdflatex where it is installed; CI installs it and sets
``RECOVR_REQUIRE_PDFLATEX=1``, under which a missing pdflatex fails)."""

import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from recovr_jax import methods
from recovr_jax.run import figures
from recovr_jax.run import reporting


def _metrics(names, turns=6, seed=0, half_width=0.05):
  rng = np.random.default_rng(seed)
  out = {}
  for m in names:
    v = rng.random(turns)
    out[m] = {key: (scale * v).tolist() for key, scale in
              (('R@1', 1.0), ('Hits@10', 1.0), ('BRI', 4.0))}
    out[m]['intervals'] = {
        key: {'lower': (np.asarray(out[m][key]) - half_width).tolist(),
              'upper': (np.asarray(out[m][key]) + half_width).tolist()}
        for key in ('R@1', 'Hits@10', 'BRI')}
  return out


def _tables(per_method, **kwargs):
  return figures.latex_tables(
      per_method, sessions=500, benchmark='the synthetic world (seed 0)',
      resamples=10_000,
      names={m: methods.display_name(m) for m in per_method},
      main=methods.MAIN, **kwargs)


def _rows(table: str) -> dict:
  """A table's value rows: the name printed -> its cells."""
  return {line.split(' & ')[0]: line.rstrip(' \\\\').split(' & ')[1:]
          for line in table.splitlines()
          if ' & ' in line and not line.startswith((' & ', 'Method'))}


class MarksTest(absltest.TestCase):

  def test_bold_is_the_best_in_its_column_and_the_dagger_the_paired_test(self):
    boot = {'a': 'recovr', 'b': 'umivr', 'num_resamples': 100,
            'mean': [0.0, 0.1, 0.02, -0.1], 'lower': [0.0, 0.05, -0.01, -0.2],
            'upper': [0.0, 0.15, 0.05, -0.01]}
    self.assertEqual(figures.paired_marks(boot),
                     {('recovr', 1), ('umivr', 3)})
    self.assertEqual(figures.paired_marks(None), set())
    per = _metrics(('recovr', 'umivr', 'ivr'), turns=4)
    # A column where a baseline is best (as the similarity-sum variant
    # beats ReCoVR in a run's wide table): bold goes to it, not to ReCoVR.
    per['ivr']['R@1'][2] = 1.5
    per['umivr']['BRI'][1] = -1.0
    tex = _tables(per, boot=boot)
    self.assertIn('In bold: the best value of each column', tex)
    self.assertIn(figures.DAGGER + ': ReCoVR or UMIVR at a turn where the '
                  'paired', tex)
    names = {'ReCoVR': 'recovr', 'UMIVR': 'umivr', 'IVR': 'ivr'}
    tables = tex.split('\\begin{table*}')
    for key, table in zip(('R@1', 'Hits@10', 'BRI'), tables[1:]):
      best = figures.column_best(per, key)
      for name, cells in _rows(table).items():
        for t, cell in enumerate(cells):
          cell_of = (names[name], t)
          self.assertEqual('\\textbf' in cell, cell_of in best,
                           (key, name, t))
          self.assertEqual(figures.DAGGER in cell, key == 'R@1' and
                           cell_of in figures.paired_marks(boot),
                           (key, name, t))
    self.assertIn(('ivr', 2), figures.column_best(per, 'R@1'))
    self.assertNotIn(('recovr', 2), figures.column_best(per, 'R@1'))
    self.assertIn(('umivr', 1), figures.column_best(per, 'BRI'))  # lowest
    self.assertIn('No dagger: no paired comparison', _tables(per))

  def test_ties_are_all_bold_and_one_row_is_not(self):
    per = _metrics(('recovr', 'ivr'), turns=2)
    per['ivr']['R@1'] = list(per['recovr']['R@1'])
    self.assertEqual(figures.column_best(per, 'R@1'),
                     {(m, t) for m in per for t in range(2)})
    self.assertEqual(figures.column_best({'recovr': per['recovr']}, 'R@1'),
                     set())

  def test_below_twenty_sessions_nothing_is_marked(self):
    boot = {'a': 'recovr', 'b': 'umivr', 'num_resamples': 100,
            'mean': [0.0, 0.3], 'lower': [0.0, 0.2], 'upper': [0.0, 0.4]}
    per = _metrics(('recovr', 'umivr'), turns=2)
    for sessions, marked in ((reporting.MARKS_SESSIONS - 1, False),
                             (reporting.MARKS_SESSIONS, True)):
      tex = figures.latex_tables(per, sessions=sessions, benchmark='w',
                                 resamples=100, boot=boot)
      self.assertEqual('\\textbf' in tex, marked, sessions)
      # (in a cell and in the caption that defines it)
      self.assertEqual(figures.DAGGER in tex, marked, sessions)
      self.assertEqual('No cell is marked' in tex, not marked, sessions)
      words = reporting.bootstrap_in_words(boot, sessions=sessions)
      self.assertEqual('is ahead of' in words, marked, words)
    self.assertIn('fewer than 20', reporting.bootstrap_in_words(
        boot, sessions=12))

  def test_one_query_repeated_has_no_interval_and_no_mark(self):
    # 50 sessions of one query (--query_repeats): the intervals resample
    # queries, so there is no interval, mark or "ahead"; 3 distinct
    # queries: intervals, counted as queries, and still no marks.
    boot = {'a': 'recovr', 'b': 'umivr', 'num_resamples': 100,
            'mean': [0.0, 0.3], 'lower': [0.0, 0.2], 'upper': [0.0, 0.4]}
    per = _metrics(('recovr', 'umivr'), turns=2)
    one = figures.latex_tables(per, sessions=50, clusters=1, benchmark='w',
                               resamples=100, boot=boot)
    self.assertIn('No intervals: every session repeats one query', one)
    self.assertNotIn('\\scriptsize', one)   # no interval row
    self.assertNotIn('\\textbf', one)
    self.assertNotIn(figures.DAGGER, one)
    self.assertIn('1 distinct query (50 sessions)', one)
    few = figures.latex_tables(per, sessions=50, clusters=3, benchmark='w',
                               resamples=100, boot=boot)
    self.assertIn('\\scriptsize', few)
    self.assertIn('Only 3 distinct queries (50 sessions): the intervals '
                  'are rough', few)
    self.assertNotIn('\\textbf', few)
    words = reporting.bootstrap_in_words(boot, sessions=1)
    self.assertNotIn('ahead of', words)
    self.assertIn('over 1 distinct query', words)
    self.assertIn('none (one query)',
                  reporting.bootstrap_markdown(boot, sessions=1))
    self.assertNotIn('none (one query)',
                     reporting.bootstrap_markdown(boot, sessions=20))

  def test_few_sessions_are_flagged_and_intervals_readable(self):
    per = _metrics(('recovr', 'umivr'), turns=3)
    tex = figures.latex_tables(per, sessions=10, benchmark='w',
                               resamples=100)
    self.assertIn('Only 10 sessions: the intervals are rough', tex)
    self.assertNotIn('\\tiny', tex)
    self.assertNotIn('Only 500 sessions', _tables(per))

  def test_the_readme_describes_the_marks_as_the_captions_do(self):
    readme = (pathlib.Path(__file__).resolve().parents[2] /
              'README.md').read_text()
    row = next(line for line in readme.splitlines()
               if line.startswith('| `tables.tex` |'))
    tex = _tables(_metrics(('recovr', 'umivr'), turns=2), boot={
        'a': 'recovr', 'b': 'umivr', 'num_resamples': 100, 'mean': [0, 0],
        'lower': [0, 0], 'upper': [0, 0]})
    for readme_says, caption_says in (
        ('bold the best value of its column', 'In bold: the best value of '
         'each column'),
        ('a dagger where the paired bootstrap', 'paired session bootstrap'),
        (f'neither below {reporting.MARKS_SESSIONS} sessions',
         f'fewer than {reporting.MARKS_SESSIONS}')):
      self.assertIn(readme_says, row)
      if 'fewer' in caption_says:
        tex = figures.latex_tables(_metrics(('recovr', 'umivr'), turns=2),
                                   sessions=5, benchmark='w', resamples=10)
      self.assertIn(caption_says, tex)


class ReportTest(absltest.TestCase):

  def test_the_paired_interval_in_words(self):
    boot = {'a': 'recovr', 'b': 'ivr', 'num_resamples': 100,
            'mean': [0.0, 0.1, 0.02, -0.1], 'lower': [0.0, 0.05, -0.01, -0.2],
            'upper': [0.0, 0.15, 0.05, -0.01]}
    self.assertEqual(
        reporting.bootstrap_in_words(boot),
        'In words: recovr is ahead of ivr at turn 1 (the interval excludes '
        '0); recovr is behind ivr at turn 3 (the interval excludes 0); the '
        'two score the same on every session at turn 0 (turn 0 by '
        'construction: every method shows the same first list); the '
        'interval holds 0 at turn 2: there the difference is within noise.')
    self.assertIn(reporting.bootstrap_in_words(boot),
                  reporting.bootstrap_markdown(boot))
    # With display names (as the runner writes report.md): the names the
    # plots and tables.tex print, each with the id --methods takes.
    names = {'recovr': 'ReCoVR', 'ivr': 'IVR'}
    table = reporting.bootstrap_markdown(boot, names)
    self.assertIn('### Paired bootstrap: ReCoVR (`recovr`) - IVR (`ivr`), R@1',
                  table)
    self.assertIn('In words: ReCoVR is ahead of IVR at turn 1', table)
    self.assertEqual(reporting.method_cell('custom', names), 'custom')

  def test_metric_files_keep_six_decimals(self):
    value = float(np.float32(0.562))  # 0.5619999766...
    self.assertNotEqual(value, 0.562)
    got = reporting.rounded({'a': [value, 3, float('nan')], 'b': True})
    self.assertEqual(got['a'][:2], [0.562, 3])
    self.assertTrue(np.isnan(got['a'][2]))
    self.assertIs(got['b'], True)
    self.assertIn('0.562\n', reporting.dumps([value], 6))
    self.assertIn(repr(value), reporting.dumps([value]))

  def test_session_bri_averages_to_the_runs_bri(self):
    from recovr_jax.core import list_metrics  # pylint: disable=g-import-not-at-top
    ranks = np.random.default_rng(0).integers(1, 102, size=(50, 6))
    np.testing.assert_allclose(reporting.session_bri(ranks).mean(0),
                               list_metrics.bri(ranks), rtol=1e-5)


class LatexTest(absltest.TestCase):

  def test_display_names_captions_and_interval_rows(self):
    per = _metrics(['recovr', 'ivr', 'no_rankcap'])
    tex = _tables(per)
    self.assertIn('ReCoVR & ', tex)
    self.assertIn('w/o rank-cap & ', tex)
    self.assertNotIn('no\\_rankcap', tex)
    # The compact table holds the main methods only; the wide ones all.
    compact, *wide = re.findall(r'\\begin\{(table\*?)\}(.*?)\\end\{\1\}', tex,
                                flags=re.S)
    self.assertEqual(compact[0], 'table')
    self.assertNotIn('w/o rank-cap', compact[1])
    self.assertEqual([w[0] for w in wide], ['table*'] * 3)
    self.assertIn('lower is better', wide[2][1])
    for _, body in [compact] + wide:
      self.assertIn('500 sessions of the synthetic world', body)
      self.assertIn('10,000 resamples', body)
      lines = body.splitlines()
      values = [l for l in lines if ' & ' in l and not l.startswith(
          (' & ', 'Method'))]
      below = [l for l in lines if l.startswith(' & ')]
      self.assertLen(below, len(values))  # an interval row under each
    # Every interval printed is the one in the metrics.
    lo, hi = per['ivr']['intervals']['R@1']['lower'][3], per['ivr'][
        'intervals']['R@1']['upper'][3]
    self.assertIn(f'{100 * lo:.1f}--{100 * hi:.1f}', compact[1])

  def test_without_intervals_the_caption_says_so(self):
    per = _metrics(['recovr', 'ivr'], half_width=0.0)
    for m in per.values():
      del m['intervals']
    tex = _tables(per)
    self.assertIn('No intervals were computed.', tex)
    self.assertNotIn('--', re.sub(r'turns 0--\d', '', tex))

  def test_a_run_without_two_main_methods_has_no_compact_table(self):
    tex = _tables(_metrics(['recovr', 'no_keep']))
    self.assertNotIn('\\begin{table}', tex)
    self.assertEqual(tex.count('\\begin{table*}'), 3)

  def test_compiles_without_overfull_boxes(self):
    pdflatex = shutil.which('pdflatex')
    if not pdflatex:
      if os.environ.get('RECOVR_REQUIRE_PDFLATEX') == '1':
        self.fail('pdflatex is required (apt-get install texlive-latex-base '
                  'texlive-latex-recommended)')
      self.skipTest('no pdflatex on this machine')
    # Every registered method at the default 5 feedback turns, and a long
    # run of 10 (scaled down to the line rather than running off it).
    cases = {'all': _tables(_metrics(methods.names())),
             'long': _tables(_metrics(methods.MAIN + ('no_keep',), 11))}
    for name, tex in cases.items():
      for option in ('', 'twocolumn'):
        with self.subTest(case=name, option=option or 'onecolumn'), \
            tempfile.TemporaryDirectory() as tmp:
          tmp = pathlib.Path(tmp)
          (tmp / 'tables.tex').write_text(tex)
          (tmp / 'paper.tex').write_text(
              f'\\documentclass[{option}]{{article}}\n'
              '\\usepackage{booktabs,graphicx}\n\\begin{document}\n'
              '\\input{tables}\n\\end{document}\n')
          done = subprocess.run(
              [pdflatex, '-interaction=nonstopmode', '-halt-on-error',
               'paper.tex'], cwd=tmp, capture_output=True, text=True,
              timeout=120, check=False)
          log = (tmp / 'paper.log').read_text(errors='replace')
          self.assertEqual(done.returncode, 0, log[-2000:])
          self.assertNotIn('Overfull', log)
          self.assertTrue((tmp / 'paper.pdf').exists())


class PlotTest(absltest.TestCase):

  def test_main_methods_apart_from_all_with_names_titles_and_dodging(self):
    try:
      import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      self.skipTest('matplotlib is not installed (the plots extra)')
    per = _metrics(methods.names()[:8] + methods.MAIN[1:], turns=4)
    with tempfile.TemporaryDirectory() as tmp:
      written = figures.plot(per, f'{tmp}/plot_', title='500 sessions',
                             names={m: methods.display_name(m) for m in per},
                             main=methods.MAIN)
      self.assertEqual(
          sorted(pathlib.Path(p).name for p in written),
          sorted(f'plot_{n}.{e}' for n in ('R1', 'R1_all', 'BRI', 'BRI_all')
                 for e in ('png', 'pdf')))
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    with mock.patch.object(plt, 'close'):   # keep the figures to read them
      before = set(plt.get_fignums())
      with tempfile.TemporaryDirectory() as tmp:
        figures.plot(per, f'{tmp}/plot_', title='500 sessions',
                     names={m: methods.display_name(m) for m in per},
                     main=methods.MAIN)
      figs = [plt.figure(n) for n in plt.get_fignums() if n not in before]
    main_r1 = figs[0].axes[0]
    self.assertEqual(main_r1.get_title(), '500 sessions')
    self.assertEqual([t.get_text() for t in main_r1.get_legend().get_texts()],
                     [methods.display_name(m) for m in methods.MAIN])
    xs = [tuple(line.get_xdata()) for line in main_r1.get_lines()]
    self.assertLen(set(xs), len(methods.MAIN))   # no two curves share x
    for x in xs:
      np.testing.assert_allclose(x, np.arange(4), atol=0.15)
    plt.close('all')


if __name__ == '__main__':
  absltest.main()
