"""Smoke and invariant tests of the runner on a tiny world."""

import dataclasses
import json
import pathlib
import shutil
import tempfile

from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np

from experiments.common import run_flags
from recovr_jax.core import demotion
from recovr_jax.envs.files import files_source
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.models import training
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world import world_environment
from recovr_jax.envs.world import world_source
from recovr_jax import methods
from recovr_jax.protocol import ranking
from recovr_jax.reasoning import registry
from recovr_jax.reasoning import rules
from recovr_jax.run import resources
from recovr_jax.run import run_config
from recovr_jax.run import runner
from tests.helpers import runs
from tests.helpers import toy_world

# The tiny run's sessions (two batches of five).
SESSIONS = runs.TINY['num_sessions']


def _host_only(settings):
  """A method without a jitted form (IVR's host steps only)."""
  method = methods.ivr.IVR(settings)
  method.name, method.jax_form = 'host_only', None
  return method


class RunnerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    flags.FLAGS.mark_as_parsed()
    runs.smoke_run(cls)

  def test_plots_are_written_unless_turned_off(self):
    self.assertEmpty(list(self.out.glob('plot_*')))   # TINY: --noplots
    out = self.root / 'plotted'
    runs.run_tiny(out, methods=['recovr', 'ivr'], plots=True)
    self.assertCountEqual(
        [p.name for p in out.glob('plot_*.png')],
        ['plot_R1.png', 'plot_BRI.png', 'plot_R1_difference.png'])
    self.assertEqual((out / 'metrics.json').read_bytes(),
                     (self.out / 'metrics.json').read_bytes())

  def test_the_free_space_asked_for_is_within_twice_what_is_written(self):
    def written(directory):
      return sum(p.stat().st_size for p in directory.rglob('*')
                 if p.is_file())
    out = self.root / 'plotted'
    if not out.exists():
      runs.run_tiny(out, methods=['recovr', 'ivr'], plots=True)
    for directory, plots in ((self.out, False), (out, True)):
      asked = resources.output_bytes(
          SESSIONS, 2, runs.TINY['num_turns'], 100, False, plots)
      size = written(directory)
      self.assertBetween(asked / size, 1.0, 2.0, (directory, asked, size))

  def test_main_returns_none_so_the_process_exits_0(self):
    # absl's app.run exits with main's return value: anything but None is a
    # failing exit status.
    self.assertIsNone(self.returned)

  def test_outputs(self):
    for name in ('flags.txt', 'resolved_config.json', 'trajectories.jsonl',
                 'metrics.json', 'metrics.csv', 'failure_modes.json',
                 'rank_cap_firing.json', 'bootstrap.json', 'report.md'):
      self.assertTrue((self.out / name).is_file(), name)
    metrics = json.loads((self.out / 'metrics.json').read_text())
    self.assertEqual(set(metrics), {'recovr', 'ivr'})
    for m in metrics.values():
      self.assertLen(m['R@1'], 4)
      self.assertEqual(set(m), {'R@1', 'R@5', 'R@10', 'R@50', 'BRI',
                                'stop_rate', 'Hits@1', 'Hits@5', 'Hits@10',
                                'sessions_raised', 'intervals', 'asking'})
      self.assertEqual(m['asking']['decisions'],
                       m['asking']['should_ask'] + m['asking']['decisions']
                       - m['asking']['should_ask'])
      np.testing.assert_allclose(m['Hits@1'], m['stop_rate'], rtol=1e-6)
      self.assertEqual(m['sessions_raised'], 0)
    # Turn 0 is shared by every method.
    self.assertEqual(metrics['recovr']['R@1'][0], metrics['ivr']['R@1'][0])
    boot = json.loads((self.out / 'bootstrap.json').read_text())
    self.assertEqual((boot['a'], boot['b']), ('recovr', 'ivr'))
    report = (self.out / 'report.md').read_text()
    self.assertIn('### R@1 (%) per turn', report)
    # Display names as the plots and tables.tex print them, with the ids.
    self.assertIn('| ReCoVR (`recovr`) | ', report)
    self.assertIn('| IVR (`ivr`) | ', report)
    # Rank-cap firing: recovr rank-caps, ivr does not.
    firing = json.loads((self.out / 'rank_cap_firing.json').read_text())
    self.assertEqual(set(firing), {'recovr'})
    self.assertIn('### Rank-cap firing', report)
    self.assertIn('### Asking: when and what', report)
    # IVR's dialogues against the text encoder's window: one per session
    # turn it was active, from the trajectories (here none was cut).
    notes = json.loads((self.out / 'text_truncation.json').read_text())
    self.assertEqual(notes['dialogues']['window'], 256)
    table = notes['dialogues']['methods']
    self.assertEqual(set(table), {'ivr'})  # recovr joins no dialogue
    rows = [json.loads(line) for line in
            (self.out / 'trajectories.jsonl').read_text().splitlines()]
    active = sum(t['action'] not in (None, 'stopped') for r in rows
                 if r['method'] == 'ivr' for t in r['turns'])
    self.assertEqual(sum(c['dialogues'] for c in table['ivr'].values()),
                     active)
    self.assertEqual(sum(c['over_window'] for c in table['ivr'].values()), 0)

  def test_intervals_equal_a_numpy_bootstrap(self):
    metrics = json.loads((self.out / 'metrics.json').read_text())
    import csv  # pylint: disable=g-import-not-at-top
    import jax  # pylint: disable=g-import-not-at-top
    from recovr_jax.core import resampling  # pylint: disable=g-import-not-at-top
    with (self.out / 'ranks.csv').open() as f:
      ranks = [r for r in csv.DictReader(f) if r['method'] == 'recovr']
    sessions = sorted({int(r['session']) for r in ranks})
    table = np.zeros((len(sessions), 4), np.int64)
    for r in ranks:
      table[sessions.index(int(r['session'])), int(r['turn'])] = int(r['rank'])
    # The same resamples as the runner (--seed 0, key seed + 1), in NumPy.
    idx = np.asarray(resampling.bootstrap_indices(
        jax.random.key(1), runs.TINY['bootstrap_resamples'], len(sessions)))
    for key, values in (('R@1', table <= 1), ('R@5', table <= 5),
                        ('Hits@5', np.minimum.accumulate(table, 1) <= 5)):
      means = values.astype(np.float64)[idx].mean(axis=1)   # [R, T+1]
      lower, upper = np.percentile(means, [2.5, 97.5], axis=0)
      ci = metrics['recovr']['intervals'][key]
      np.testing.assert_allclose(ci['lower'], lower, atol=1e-6)
      np.testing.assert_allclose(ci['upper'], upper, atol=1e-6)
      np.testing.assert_allclose(metrics['recovr'][key], values.mean(0),
                                 atol=1e-6)
    # BRI: each session's own BRI (its log best rank, trapezoids averaged
    # over the turns so far), bootstrapped alike; their mean is the BRI.
    log_best = np.log(np.minimum.accumulate(table, 1))
    steps = np.arange(1, table.shape[1])
    per_session = np.concatenate(
        [log_best[:, :1], np.cumsum((log_best[:, :-1] + log_best[:, 1:]) / 2,
                                    1) / steps], 1)
    np.testing.assert_allclose(metrics['recovr']['BRI'],
                               per_session.mean(0), atol=1e-5)
    lower, upper = np.percentile(per_session[idx].mean(axis=1), [2.5, 97.5],
                                 axis=0)
    ci = metrics['recovr']['intervals']['BRI']
    np.testing.assert_allclose(ci['lower'], lower, atol=1e-4)
    np.testing.assert_allclose(ci['upper'], upper, atol=1e-4)
    csv_text = (self.out / 'metrics.csv').read_text()
    self.assertIn('R@1_lower,R@1_upper', csv_text.splitlines()[0])
    report = (self.out / 'report.md').read_text()
    self.assertIn('R@1 (%) per turn [95% session-bootstrap interval]', report)

  def test_ranks_csv_matches_the_displayed_lists(self):
    import csv  # pylint: disable=g-import-not-at-top
    with (self.out / 'ranks.csv').open() as f:
      ranks = list(csv.DictReader(f))
    self.assertLen(ranks, 2 * SESSIONS * 4)   # methods x sessions x turns
    world = generator.make_world(generator.WorldConfig(
        num_test_triplets=12, num_train_triplets=20, gallery_size=300))
    ids = world.gallery_ids
    by_key = {(r['method'], int(r['session']), int(r['turn'])): r
              for r in ranks}
    for line in (self.out / 'trajectories.jsonl').read_text().splitlines():
      row = json.loads(line)
      for turn in row['turns']:
        r = by_key[row['method'], row['session'], turn['turn']]
        self.assertEqual(r['action'], turn['action'] or '')
        self.assertEqual(r['stopped'], str(int(turn['action'] == 'stopped')))
        self.assertEqual(r['target_id'], ids[row['target']])
        self.assertEqual(r['query_id'], f"q{row['session']}")
        self.assertEqual(r['top1_id'], ids[turn['top10'][0]])
        # Trajectories name the videos by id too, beside their indices.
        self.assertEqual(turn['top10_ids'], [ids[i] for i in turn['top10']])
        self.assertEqual(row['target_id'], ids[row['target']])
        if row['target'] in turn['top10']:
          self.assertEqual(int(r['rank']),
                           turn['top10'].index(row['target']) + 1)
        else:
          self.assertGreater(int(r['rank']), 10)

  def test_latex_tables_parse_with_the_numbers(self):
    import re  # pylint: disable=g-import-not-at-top
    from recovr_jax.run import figures  # pylint: disable=g-import-not-at-top
    tex = (self.out / 'tables.tex').read_text()
    metrics = json.loads((self.out / 'metrics.json').read_text())
    tables = re.findall(r'\\begin\{tabular\}\{(lr*)\}(.*?)'
                        r'\\end\{tabular\}', tex, flags=re.S)
    self.assertLen(tables, 4)  # R@1 compact; R@1, Hits@10, BRI wide
    self.assertEqual(tex.count('\\begin{table}'), tex.count('\\end{table}'))
    # A dagger is the paired bootstrap's verdict, turn by turn; bold the
    # best of its column (neither below 20 sessions).
    boot = json.loads((self.out / 'bootstrap.json').read_text())
    dagger = {(boot['a'], t) for t, lo in enumerate(boot['lower']) if lo > 0}
    dagger |= {(boot['b'], t) for t, hi in enumerate(boot['upper'])
               if hi < 0}
    self.assertEqual(dagger, figures.paired_marks(boot))
    sessions = len({json.loads(line)['session'] for line in (
        self.out / 'trajectories.jsonl').read_text().splitlines()})
    marked = sessions >= 20
    bold = figures.column_best(metrics, 'R@1') if marked else set()
    dagger = dagger if marked else set()
    for spec, body in tables[:2]:   # R@1
      self.assertEqual(spec, 'l' + 'r' * 4)
      self.assertIn('\\toprule', body)
      self.assertIn('\\bottomrule', body)
      lines = body.splitlines()
      rows = {line.split(' & ')[0]: (line.rstrip(' \\\\').split(' & ')[1:],
                                     below.split(' & ')[1:])
              for line, below in zip(lines, lines[1:]) if ' & ' in line
              and not line.startswith((' & ', 'Method'))}
      self.assertEqual(set(rows), {'ReCoVR', 'IVR'})
      for name, (cells, intervals) in rows.items():
        method = {'ReCoVR': 'recovr', 'IVR': 'ivr'}[name]
        ci = metrics[method]['intervals']['R@1']
        self.assertLen(cells, 4)
        for t, (cell, interval) in enumerate(zip(cells, intervals)):
          value = float(re.search(r'(\d+\.\d)', cell).group(1))
          self.assertAlmostEqual(value, 100 * metrics[method]['R@1'][t],
                                 delta=0.051)
          self.assertEqual('\\textbf' in cell, (method, t) in bold)
          self.assertEqual(figures.DAGGER in cell, (method, t) in dagger)
          self.assertIn(f'{100 * ci["lower"][t]:.1f}--'
                        f'{100 * ci["upper"][t]:.1f}', interval)

  def test_load_run_with_and_without_pandas(self):
    from recovr_jax import run  # pylint: disable=g-import-not-at-top
    plain = run.load_run(self.out, pandas=False)
    self.assertLen(plain['metrics'], 2 * 4)
    self.assertLen(plain['ranks'], 2 * SESSIONS * 4)
    first = plain['metrics'][0]
    self.assertEqual((first['method'], first['turn']), ('recovr', 0))
    metrics = json.loads((self.out / 'metrics.json').read_text())
    self.assertAlmostEqual(first['R@1'], metrics['recovr']['R@1'][0],
                           places=6)
    self.assertLessEqual(first['R@1_lower'], first['R@1'])
    self.assertIsInstance(plain['ranks'][0]['rank'], int)
    self.assertEqual(plain['config']['identity'], json.loads(
        (self.out / 'resolved_config.json').read_text())['identity'])
    import pandas  # pylint: disable=g-import-not-at-top  (the test extra)
    frames = run.load_run(self.out)
    self.assertIsInstance(frames['metrics'], pandas.DataFrame)
    self.assertEqual(len(frames['ranks']), 2 * SESSIONS * 4)
    self.assertEqual(frames['ranks']['target_id'].tolist(),
                     [r['target_id'] for r in plain['ranks']])
    self.assertEqual(frames['ranks']['action'].tolist(),
                     [r['action'] for r in plain['ranks']])
    # The trajectories: one row per method, session and turn, as the file.
    sessions = [json.loads(line) for line in
                (self.out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(plain['trajectories'], 2 * SESSIONS * 4)
    self.assertEqual(len(frames['trajectories']), 2 * SESSIONS * 4)
    first = plain['trajectories'][5]   # session 1, turn 1
    self.assertEqual(first, {**{k: sessions[1][k] for k in (
        'method', 'session', 'reference', 'target', 'reference_id',
        'target_id', 'error')},
                             **sessions[1]['turns'][1]})
    self.assertEqual([a if isinstance(a, str) else None for a in
                      frames['trajectories']['action'].tolist()[:8]],
                     [t['action'] for s in sessions[:2] for t in s['turns']])
    with self.assertRaisesRegex(FileNotFoundError, 'ranks.csv'):
      empty = self.root / 'not_a_run'
      empty.mkdir(exist_ok=True)
      (empty / 'metrics.csv').write_text('method,turn\n')
      run.load_run(empty)

  def test_parquet_trajectories_are_read_as_the_jsonl_ones(self):
    from recovr_jax import run  # pylint: disable=g-import-not-at-top
    from recovr_jax import trajectory_files  # pylint: disable=g-import-not-at-top
    from recovr_jax.analysis import claims  # pylint: disable=g-import-not-at-top
    out = self.root / 'parquet'
    runs.run_tiny(out, methods=['recovr', 'ivr'],
                  trajectories_format='parquet')
    self.assertFalse((out / 'trajectories.jsonl').exists())
    self.assertEqual(trajectory_files.read(out),
                     trajectory_files.read(self.out))
    for name in ('metrics.json', 'ranks.csv', 'report.md'):
      self.assertEqual((out / name).read_bytes(),
                       (self.out / name).read_bytes(), name)
    self.assertEqual(run.load_run(out, pandas=False)['trajectories'],
                     run.load_run(self.out, pandas=False)['trajectories'])
    fired = claims.load(out).fired
    for method, want in claims.load(self.out).fired.items():
      np.testing.assert_array_equal(fired[method], want)
    from recovr_jax.study import viewer  # pylint: disable=g-import-not-at-top
    seen, want = viewer.load(out), viewer.load(self.out)
    self.assertEqual((seen.rows, seen.ranks, seen.sessions),
                     (want.rows, want.ranks, want.sessions))
    # A resumed run in the other format leaves one file, not two.
    runs.run_tiny(out, methods=['recovr', 'ivr'],
                  trajectories_format='jsonl')
    self.assertFalse((out / 'trajectories.parquet').exists())
    self.assertEqual((out / 'trajectories.jsonl').read_bytes(),
                     (self.out / 'trajectories.jsonl').read_bytes())

  def test_load_run_refuses_damaged_files_naming_them(self):
    from recovr_jax import readers  # pylint: disable=g-import-not-at-top
    from recovr_jax import run  # pylint: disable=g-import-not-at-top
    ranks = (self.out / 'ranks.csv').read_bytes()
    config = (self.out / 'resolved_config.json').read_bytes()
    mid_row = ranks.rindex(b'\n', 0, len(ranks) // 2) + 9
    row_end = ranks.rindex(b'\n', 0, len(ranks) // 2) + 1
    for name, data, message in (
        # Cut mid-row: half the rows were returned without a word.
        ('ranks.csv', ranks[:mid_row], 'the last line has no newline'),
        ('ranks.csv', ranks[:row_end], r"rows of method 'recovr'; the run "
         f'has {SESSIONS} sessions x 4 turns'),
        ('ranks.csv', ranks.replace(b'session,', b'method,', 1),
         "row 1: the column 'method' appears twice"),
        ('ranks.csv', ranks.replace(b'\n', b',x\n', 2).replace(
            b',x\n', b'\n', 1), 'row 2: 10 fields, the header has 9'),
        ('resolved_config.json', config[:len(config) // 2],
         'line [0-9]+: not valid JSON.*ends early'),
    ):
      with self.subTest(name=name, message=message):
        damaged = self.root / 'damaged'
        shutil.rmtree(damaged, ignore_errors=True)
        shutil.copytree(self.out, damaged)
        (damaged / name).write_bytes(data)
        with self.assertRaisesRegex(readers.FileError,
                                    f'^{damaged / name}.*{message}'):
          run.load_run(damaged, pandas=False)

  def test_trajectories_and_no_repeated_rejected_top1(self):
    rows = [json.loads(line) for line in
            (self.out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(rows, 2 * SESSIONS)
    for row in rows:
      self.assertLen(row['turns'], 4)
      self.assertLen(row['turns'][0]['top10'], 10)
      if row['method'] != 'recovr':
        continue
      rejected = set()
      for turn in row['turns']:
        top1 = turn['top10'][0]
        if turn['action'] not in (None, 'stopped'):
          self.assertNotIn(top1, rejected)
          self.assertIn(turn['sigma'], ('neg', 'neu', 'pos'))
        rejected.add(top1)

  def test_no_reflection_keeps_sigma_neutral_and_sweeps(self):
    out = self.root / 'sweep'
    runs.run_tiny(out, methods=['no_reflection'], sweep=['rrf_k=30|60'])
    self.assertTrue((out / 'sweep.md').is_file())
    for sub in ('rrf_k=30', 'rrf_k=60'):
      for line in (out / sub / 'trajectories.jsonl').read_text().splitlines():
        for turn in json.loads(line)['turns'][1:]:
          if turn['action'] != 'stopped':
            self.assertEqual(turn['sigma'], 'neu')

  def test_a_suite_runs_each_part_with_its_methods_and_settings(self):
    from recovr_jax.analysis import claims  # pylint: disable=g-import-not-at-top
    from recovr_jax.run import sweeps  # pylint: disable=g-import-not-at-top
    out = self.root / 'suite'
    with flagsaver.flagsaver(**dict(runs.TINY, output_dir=str(out),
                                    cache_dir=str(self.root / 'cache'))):
      config = run_flags.config_from_flags()
    with self.assertRaisesRegex(Exception, 'suite part bad: .*rrf_k'):
      sweeps.run_parts(config, [('ok', ('recovr',), []),
                                ('bad', ('recovr',), [('rrf_k', '-1', -1.0)])])
    self.assertFalse((out / 'ok').exists())  # checked before any run
    sweeps.run_parts(config, [
        ('a', ('recovr',), []),
        ('b/noisy', ('ivr', 'umivr'), [('noise_rate', '0.1', 0.1)])])
    self.assertEqual(set(claims.load(out / 'a').ranks), {'recovr'})
    self.assertEqual(set(claims.load(out / 'b/noisy').ranks), {'ivr', 'umivr'})
    resolved = json.loads((out / 'b/noisy/resolved_config.json').read_text())
    self.assertEqual(resolved['data']['user']['noise_rate'], 0.1)

  def test_a_raising_reasoner_is_recorded_not_fatal(self):
    class Raising(rules.RulesReasoner):
      def intent(self, requests):
        raise RuntimeError('model crashed')

    original = registry.make
    registry.make = lambda *a, **k: Raising(lexicon)
    try:
      out = self.root / 'raising'
      returned = runs.run_tiny(out, methods=['recovr'], num_sessions=5)
      # Any session that raised fails the run (a non-zero exit) after the
      # outputs are written, unless --max_error_share allows it.
      self.assertRegex(returned, r'FAILED: sessions raised: recovr \d of 5')
      tolerant = runs.run_tiny(self.root / 'raising_ok', methods=['recovr'],
                          num_sessions=5, max_error_share=1.0)
      self.assertIsNone(tolerant)
    finally:
      registry.make = original
    metrics = json.loads((out / 'metrics.json').read_text())
    self.assertGreater(metrics['recovr']['sessions_raised'], 0)
    self.assertIn('### Sessions that raised', (out / 'report.md').read_text())
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(rows, 5)
    failed = [r for r in rows if r['error']]
    self.assertNotEmpty(failed)
    for row in failed:
      self.assertIn('model crashed', row['error'])
      self.assertEqual(row['turns'], [])
    for row in rows:
      if not row['error']:  # found at turn 0: no reasoning was needed
        self.assertEqual(row['turns'][1]['action'], 'stopped')
    self.assertTrue((out / 'metrics.json').is_file())

  def test_jit_simulation_equals_host_with_jax_draws(self):
    host, jit = self.root / 'host_jax', self.root / 'jit'
    runs.run_tiny(host, methods=['recovr', 'no_reflection'], user_draws='jax')
    runs.run_tiny(jit, methods=['recovr', 'no_reflection'], simulation='jit')
    self.assertEqual(json.loads((jit / 'metrics.json').read_text()),
                     json.loads((host / 'metrics.json').read_text()))
    for h, j in zip((host / 'trajectories.jsonl').read_text().splitlines(),
                    (jit / 'trajectories.jsonl').read_text().splitlines()):
      h, j = json.loads(h), json.loads(j)
      self.assertEqual([t['top10'] for t in h['turns']],
                       [t['top10'] for t in j['turns']])
      self.assertEqual([t['action'] for t in h['turns']],
                       [t['action'] for t in j['turns']])
      # Turn 0 holds the modification text under both drivers.
      self.assertEqual(h['turns'][0]['feedback'], j['turns'][0]['feedback'])
      self.assertTrue(j['turns'][0]['feedback'])

  def test_a_sweep_of_the_users_words_builds_each_text_start(self):
    # --start=text: the user's words write each session's first query, so
    # the members of a sweep of --user_language do not share a build.
    out = self.root / 'text_sweep'
    runs.run_tiny(out, methods=['recovr'], start='text', num_turns=1,
                  sweep=['user_language=lexicon|own'])
    first = {}
    for language in ('lexicon', 'own'):
      rows = (out / f'user_language={language}' /
              'trajectories.jsonl').read_text().splitlines()
      first[language] = [json.loads(row)['turns'][0]['feedback']
                         for row in rows]
    self.assertNotEqual(first['lexicon'], first['own'])

  def test_text_start(self):
    # I-TVR on the world: no reference, turn 0 from a description naming
    # text_start.NAMED attributes of the target; every method runs; MERLIN
    # asks about the shown result; the jitted driver is refused.
    from recovr_jax.envs.world.benchmark import lexicon  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.user import text_start  # pylint: disable=g-import-not-at-top
    out = self.root / 'text_start'
    runs.run_tiny(out, methods=['recovr', 'ivr', 'merlin', 'umivr',
                           'history_rewrite'], start='text',
             user_language='lexicon')
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    data = world_source.WorldData.preset('v1', world_fields=dict(
        gallery_size=300, num_test_triplets=12, num_train_triplets=20))
    world = generator.make_world(data.world)
    attrs = world.combos[world.gallery_combos]
    merlin_asked = set()
    first = {}
    for row in rows:
      self.assertEqual(row['reference'], -1)
      text = row['turns'][0]['feedback']
      first.setdefault(row['session'], text)
      self.assertEqual(first[row['session']], text)  # the same for all
      named = lexicon.parse(text)
      self.assertLen(named, text_start.NAMED, text)
      for a, v in named.items():  # the target's own values
        self.assertEqual(attrs[row['target'], a], v, text)
      if row['method'] == 'merlin' and row['turns'][1].get('asked'):
        merlin_asked.add(row['turns'][1]['asked'])
    # About each session's shown result: not one question for every
    # session (which reading a missing reference's caption would give).
    self.assertGreater(len(merlin_asked), 1)
    metrics = json.loads((out / 'metrics.json').read_text())
    self.assertEqual(len({tuple(m['R@1'][:1]) for m in metrics.values()}), 1)
    with self.assertRaisesRegex(Exception, '--start=text runs on '
                                '--simulation=host only'):
      runs.run_tiny(self.root / 'text_jit', methods=['recovr'], start='text',
               simulation='jit')

  def test_jit_and_device_errors_name_the_flag(self):
    methods.register('host_only', _host_only)
    try:
      with self.assertRaisesRegex(Exception, r"--simulation=jit: method "
                                  r"'host_only' .*change --methods"):
        runs.run_tiny(self.root / 'bad', methods=['recovr', 'host_only'],
                 simulation='jit')
    finally:
      methods.unregister('host_only')
    with self.assertRaisesRegex(Exception, '--simulation=jit needs '
                                '--reasoner=rules'):
      runs.run_tiny(self.root / 'bad', methods=['recovr'], simulation='jit',
               reasoner='flax_lm')
    self.assertFalse((self.root / 'bad' / 'metrics.json').exists())
    with self.assertRaisesRegex(Exception, '--session_shards=4 but JAX sees '
                                '1 device'):
      runs.run_tiny(self.root / 'bad', methods=['recovr'], simulation='jit',
               session_shards=4)
    with self.assertRaisesRegex(Exception, '--gallery_over_processes needs '
                                '--simulation=jit and --num_processes >= 2 '
                                r'\(got --simulation=jit, --num_processes=1'):
      runs.run_tiny(self.root / 'bad', methods=['recovr'], simulation='jit',
               gallery_over_processes=True)
    with self.assertRaisesRegex(Exception, '--platform=tpu was requested but '
                                'JAX finds no tpu device'):
      runs.run_tiny(self.root / 'bad', methods=['recovr'], platform='tpu')
    original = resources.available_bytes
    resources.available_bytes = lambda device=None: 1 << 16
    try:
      with self.assertRaisesRegex(Exception, 'a batch of 5 sessions needs '
                                  r'about .* GiB .* lower --batch_size'):
        runs.run_tiny(self.root / 'bad', methods=['recovr'])
    finally:
      resources.available_bytes = original

  def test_a_weightless_encoder_short_of_texts_is_refused_in_a_line(self):
    # A run's archive carries MiniLM without weights: asked for texts its
    # cache lacks (here an empty one), the run is refused in a line naming
    # the flag, and the folder it would have made is not left behind.
    from absl import app  # pylint: disable=g-import-not-at-top
    copy = encoders.weightless_copy(encoders.minilm_path(),
                                    self.root / 'weightless')
    out = self.root / 'weightless_run'
    from unittest import mock  # pylint: disable=g-import-not-at-top
    # (A fresh process: nothing encoded or loaded by this one is shared.)
    with mock.patch.dict(encoders._SHARED_EMBEDDINGS, clear=True), \
         mock.patch.dict(encoders._SHARED_MODELS, clear=True):  # pylint: disable=protected-access
      with self.assertRaisesRegex(app.UsageError, 'a copy without weights'
                                  '.*--text_encoder_dir'):
        runs.run_tiny(out, methods=['recovr'], text_encoder_dir=str(copy),
                      cache_dir=str(self.root / 'empty_cache'))
    self.assertFalse(out.exists())

  def test_bad_input_before_any_work(self):
    with self.assertRaisesRegex(Exception, "unknown --methods nope; valid: "
                                "recovr, covr_only"):
      runs.run_tiny(self.root / 'bad', methods=['recovr', 'nope'])
    blocker = self.root / 'file'
    blocker.write_text('x')
    with self.assertRaisesRegex(Exception, 'cannot be written'):
      runs.run_tiny(blocker / 'sub', methods=['recovr'],
               cache_dir=str(self.root / 'cache'))
    with self.assertRaisesRegex(Exception, 'cache_dir .* cannot be used as a '
                                'directory'):
      runs.run_tiny(self.root / 'ok', methods=['recovr'],
               cache_dir=str(blocker / 'cache'))
    with self.assertRaisesRegex(Exception, 'needs --annotations'):
      runs.run_tiny(self.root / 'bad', data='files')
    with self.assertRaisesRegex(Exception, "unknown --bootstrap_baseline "
                                "'nope'; valid: strongest, covr_only"):
      runs.run_tiny(self.root / 'bad', bootstrap_baseline='nope')
    for against in (dict(bootstrap_baseline='recovr'),
                    dict(bootstrap_also=['recovr'])):
      with self.assertRaisesRegex(Exception, 'recovr minus itself is 0'):
        runs.run_tiny(self.root / 'bad', methods=['recovr'], **against)
    with self.assertRaisesRegex(Exception, '--bootstrap_also compares recovr '
                                'with methods of --methods; not in --methods: '
                                'no_keep'):
      runs.run_tiny(self.root / 'bad', methods=['recovr'],
               bootstrap_also=['no_keep'])
    with self.assertRaisesRegex(Exception, '--bootstrap_also lists a method '
                                'twice'):
      runs.run_tiny(self.root / 'bad', methods=['recovr', 'ivr'],
               bootstrap_also=['ivr', 'ivr'])
    with self.assertRaisesRegex(Exception, "'gallery' is not sweepable"):
      runs.run_tiny(self.root / 'bad', sweep=['gallery=1|2'])
    with self.assertRaisesRegex(Exception, 'user_policy=lazy: value should be one of'):
      runs.run_tiny(self.root / 'bad', sweep=['user_policy=lazy'])


class BenchmarkPresetTest(absltest.TestCase):
  """--benchmark=v2 sets the new benchmark's flags; explicit flags win."""

  def test_presets_and_overrides(self):
    flags.FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(benchmark='v1', methods=['recovr']):
      v1 = run_flags.config_from_flags()
    self.assertEqual((v1.data.captions, v1.data.user.style, v1.data.user.language,
                      v1.data.world.renditions, v1.data.checkpoint_dir),
                     ('oracle', 'template', 'lexicon', 1, None))
    with flagsaver.flagsaver(benchmark='v2', methods=['recovr']):
      v2 = run_flags.config_from_flags()
    self.assertEqual((v2.data.captions, v2.data.user.style, v2.data.user.language,
                      v2.data.world.renditions, v2.data.checkpoint_dir),
                     ('model', 'paper', 'own', 4,
                      encoders.RENDITIONS_CHECKPOINT_DIR))
    with flagsaver.flagsaver(methods=['recovr']):  # the default: v3
      v3 = run_flags.config_from_flags()
    self.assertEqual((v3.data, v3.data.user.language, v3.reasoner.name),
                     (dataclasses.replace(v2.data, user=v3.data.user),
                      'own_v3', 'grounded'))
    with flagsaver.flagsaver(methods=['recovr'], describe_layout=True):
      self.assertEqual(run_flags.config_from_flags().reasoner.name, 'rules')
    with flagsaver.flagsaver(methods=['recovr'], captions='oracle',
                             renditions=2):
      mixed = run_flags.config_from_flags()
    self.assertEqual((mixed.data.captions, mixed.data.world.renditions,
                      mixed.data.user.style), ('oracle', 2, 'paper'))
    self.assertEqual(v2.data, world_source.WorldData.v2())
    self.assertEqual(v1.data, world_source.WorldData.v1())
    with flagsaver.flagsaver(methods=['recovr'], data='files'):
      real = run_flags.config_from_flags()  # the world's presets do not apply
    self.assertEqual(real.data, files_source.FilesData())
    self.assertEqual(real.reasoner.name, 'rules')  # grounded reads the world

  def test_default_run_reads_only_model_captions(self):
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    # 100 combinations x 4 renditions: 400 videos rendered and captioned.
    values = dict(runs.TINY, output_dir=str(root / 'v3'), gallery_size=100,
                  cache_dir=str(root / 'cache'), methods=['recovr', 'umivr'])
    del values['benchmark']
    with flagsaver.flagsaver(**values):
      config = run_flags.config_from_flags()
      built = runner.build(config, run_config.source(config))
      runner.run(config, built)
    resolved = json.loads((root / 'v3' / 'resolved_config.json').read_text())
    self.assertEqual((resolved['data']['source'],
                      resolved['data']['captions'],
                      resolved['data']['user']['language'],
                      resolved['data']['world']['renditions']),
                     ('world', 'model', 'own_v3', 4))
    world = generator.make_world(config.data.world)
    truth = world.gallery_captions
    self.assertLen(built.env.captions, len(truth))
    # What the system reads of the gallery is the captioner's, which is
    # wrong somewhere on a measurable share of it.
    differ = np.mean([a != b for a, b in zip(built.env.captions, truth)])
    self.assertGreater(differ, 0.05)
    metrics = json.loads((root / 'v3' / 'metrics.json').read_text())
    self.assertEqual(metrics['recovr']['R@1'][0], metrics['umivr']['R@1'][0])

  def test_model_captions_need_a_captioner_and_the_world(self):
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    with self.assertRaisesRegex(Exception, '--captioner_checkpoint: .*'
                                'missing: config.json'):
      runs.run_tiny(root / 'a', methods=['recovr'], captions='model',
               captioner_checkpoint=str(root))
    with self.assertRaisesRegex(Exception, '--captions is for --data=world, '
                                'not --data=files'):
      runs.run_of(
          output_dir=str(root / 'b'), methods=['recovr'], captions='model',
          data='files')


class TransplantTest(absltest.TestCase):
  """A rank-cap transplant changes only the baseline's post-processing."""

  def test_ivr_rankcap_is_rank_capped_ivr(self):
    world = generator.make_world(generator.WorldConfig(
        num_test_triplets=12, num_train_triplets=20, gallery_size=300))
    video, composer = training.load_world_models(
        encoders.DEFAULT_CHECKPOINT_DIR, world)
    env = world_environment.world_environment(world, encoders.TextEncoder(), video,
                                        composer)
    base = ranking.LoopConfig(num_turns=1, num_ids=len(env.gallery))
    user = simulated_user.SimulatedUser(seed=0)
    sessions = np.arange(12)
    plain = toy_world.run_host(env, methods.make('ivr'), sessions, user,
                                 base)
    capped = toy_world.run_host(env, methods.make('ivr_rankcap'), sessions,
                                  user, base)
    np.testing.assert_array_equal(plain.displayed[:, 0],
                                  capped.displayed[:, 0])
    sigma = {'rewrite': 0, 'modify': 1, 'answer': 1}
    for i in range(12):
      action = plain.records[i][1]['action']
      if action == 'stopped':
        np.testing.assert_array_equal(capped.displayed[i, 1],
                                      plain.displayed[i, 1])
        continue
      cap = demotion.DEFAULT_KAPPA[sigma[action]]
      want, _ = demotion.rank_cap(plain.displayed[i, 1],
                                  np.zeros(100, np.float32),
                                  [plain.displayed[i, 0, 0]], [cap])
      np.testing.assert_array_equal(capped.displayed[i, 1], want)


if __name__ == '__main__':
  absltest.main()

