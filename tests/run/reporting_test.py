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


class BoldTest(absltest.TestCase):

  def test_bold_is_the_paired_bootstraps_verdict(self):
    boot = {'a': 'recovr', 'b': 'umivr', 'num_resamples': 100,
            'mean': [0.0, 0.1, 0.02, -0.1], 'lower': [0.0, 0.05, -0.01, -0.2],
            'upper': [0.0, 0.15, 0.05, -0.01]}
    self.assertEqual(figures.paired_bold(boot),
                     {('recovr', 1), ('umivr', 3)})
    self.assertEqual(figures.paired_bold(None), set())
    per = _metrics(('recovr', 'umivr', 'ivr'), turns=4)
    tex = _tables(per, boot=boot)
    self.assertIn('In bold: ReCoVR or UMIVR at a turn where the paired', tex)
    r1 = tex.split('\\begin{table*}')[1]
    rows = {line.split(' & ')[0]: line.split(' & ')[1:]
            for line in r1.splitlines()
            if ' & ' in line and not line.startswith((' & ', 'Method'))}
    for name, method in (('ReCoVR', 'recovr'), ('UMIVR', 'umivr'),
                         ('IVR', 'ivr')):
      for t, cell in enumerate(rows[name]):
        self.assertEqual('\\textbf' in cell,
                         (method, t) in figures.paired_bold(boot),
                         (name, t))
    # Hits@10 and BRI have no paired test: nothing bold there.
    self.assertNotIn('\\textbf', ''.join(tex.split('\\begin{table*}')[2:]))
    self.assertIn('No cell is bold', _tables(per))

  def test_few_sessions_are_flagged_and_intervals_readable(self):
    per = _metrics(('recovr', 'umivr'), turns=3)
    tex = figures.latex_tables(per, sessions=10, benchmark='w',
                               resamples=100)
    self.assertIn('Only 10 sessions: the intervals are rough', tex)
    self.assertNotIn('\\tiny', tex)
    self.assertNotIn('Only 500 sessions', _tables(per))


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

  def test_without_intervals_the_caption_says_so_and_nothing_is_bold(self):
    per = _metrics(['recovr', 'ivr'], half_width=0.0)
    for m in per.values():
      del m['intervals']
    tex = _tables(per)
    self.assertIn('No intervals were computed.', tex)
    self.assertNotIn('\\textbf', tex)
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
