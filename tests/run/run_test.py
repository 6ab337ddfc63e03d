"""Smoke and invariant tests of the runner on a tiny world."""

import errno
import json
import pathlib
import shutil
import tempfile
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np

from experiments import run
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
from recovr_jax.run import outputs
from recovr_jax.run import resources
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
    cls.root = pathlib.Path(tempfile.mkdtemp())
    cls.out = cls.root / 'smoke'
    cls.returned = runs.run_main(cls.out, methods=['recovr', 'ivr'])

  def test_plots_are_written_unless_turned_off(self):
    self.assertEmpty(list(self.out.glob('plot_*')))   # TINY: --noplots
    out = self.root / 'plotted'
    runs.run_main(out, methods=['recovr', 'ivr'], plots=True)
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
      runs.run_main(out, methods=['recovr', 'ivr'], plots=True)
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
    # Bold is the paired bootstrap's verdict, turn by turn.
    boot = json.loads((self.out / 'bootstrap.json').read_text())
    bold = {(boot['a'], t) for t, lo in enumerate(boot['lower']) if lo > 0}
    bold |= {(boot['b'], t) for t, hi in enumerate(boot['upper']) if hi < 0}
    self.assertEqual(bold, figures.paired_bold(boot))
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
          self.assertIn(f'{100 * ci["lower"][t]:.1f}--'
                        f'{100 * ci["upper"][t]:.1f}', interval)

  def test_load_run_with_and_without_pandas(self):
    from recovr_jax import run as experiment  # pylint: disable=g-import-not-at-top
    plain = experiment.load_run(self.out, pandas=False)
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
    frames = experiment.load_run(self.out)
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
      experiment.load_run(empty)

  def test_load_run_refuses_damaged_files_naming_them(self):
    from recovr_jax import readers  # pylint: disable=g-import-not-at-top
    from recovr_jax import run as experiment  # pylint: disable=g-import-not-at-top
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
          experiment.load_run(damaged, pandas=False)

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

  def test_resume_after_first_batch_is_identical(self):
    copy = self.root / 'resumed'
    shutil.copytree(self.out, copy)
    for method_dir in (copy / 'batches').iterdir():
      for path in method_dir.iterdir():
        if not path.name.startswith('00000'):
          if path.is_dir():
            shutil.rmtree(path)
          else:
            path.unlink()
    for name in ('metrics.json', 'trajectories.jsonl', 'report.md'):
      (copy / name).unlink()
    runs.run_main(copy, methods=['recovr', 'ivr'])
    for name in ('metrics.json', 'metrics.csv', 'failure_modes.json',
                 'bootstrap.json', 'trajectories.jsonl'):
      self.assertEqual((copy / name).read_bytes(),
                       (self.out / name).read_bytes(), name)

  def test_a_full_disk_names_the_file_and_the_same_command_resumes(self):
    copy = self.root / 'full_disk'
    shutil.copytree(self.out, copy)
    for name in ('metrics.json', 'trajectories.jsonl', 'ranks.csv'):
      (copy / name).unlink()
    real_write = outputs.write

    def full(config, out, *args, **kwargs):
      raise OSError(errno.ENOSPC, 'No space left on device',
                    str(out / 'trajectories.jsonl'))

    with mock.patch.object(outputs, 'write', full):
      # experiments.run exits 1 with this one line (absl prints what main
      # returns).
      self.assertEqual(
          runs.run_main(copy, methods=['recovr', 'ivr']),
          f'FAILED: {copy / "trajectories.jsonl"}: could not be written (No '
          f'space left on device); {copy / outputs.INCOMPLETE} is kept: free '
          'space and rerun the command (its batches are saved; it writes the '
          'outputs again)')
    self.assertTrue((copy / outputs.INCOMPLETE).exists())
    self.assertIs(outputs.write, real_write)
    runs.run_main(copy, methods=['recovr', 'ivr'])  # the same command
    self.assertFalse((copy / outputs.INCOMPLETE).exists())
    for name in ('metrics.json', 'ranks.csv', 'trajectories.jsonl'):
      self.assertEqual((copy / name).read_bytes(),
                       (self.out / name).read_bytes(), name)

  def test_a_cache_path_that_is_no_file_is_named_before_the_work(self):
    from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
    out, cache = self.root / 'blocked', self.root / 'blocked_cache'
    encoders.TextEncoder().cache_path(cache).mkdir(parents=True)
    with self.assertRaisesRegex(app.UsageError, 'where the text embedding '
                                'cache goes, is not a file: remove it'):
      runs.run_main(out, methods=['recovr'], cache_dir=str(cache))
    self.assertFalse((out / 'batches').exists())  # no session ran
    # Refused before any work in a new directory: nothing of it stays, so
    # the corrected command is not "a run with other settings".
    for name in ('INCOMPLETE', 'flags.txt', 'resolved_config.json'):
      self.assertFalse((out / name).exists(), name)

  def test_outputs_that_would_not_fit_are_refused_before_the_work(self):
    out = self.root / 'no_room'
    # 10 sessions x 1 method x 4 turns: about 95 KiB (resources.output_bytes).
    asked = resources.output_bytes(SESSIONS, 1, runs.TINY['num_turns'], 100,
                                   False, False)
    self.assertEqual(round(asked / 1024), 95)
    with mock.patch('shutil.disk_usage',
                    return_value=mock.Mock(free=16 << 10)):
      with self.assertRaisesRegex(app.UsageError, f'--output_dir={out}: '
                                  'the run writes about 95 KiB and the disk '
                                  'has 16 KiB free'):
        runs.run_main(out, methods=['recovr'])
    self.assertEqual([p for p in out.rglob('*') if p.is_file()
                      and 'batches' in p.parts], [])  # no session ran

  def test_no_reflection_keeps_sigma_neutral_and_sweeps(self):
    out = self.root / 'sweep'
    runs.run_main(out, methods=['no_reflection'], sweep=['rrf_k=30|60'])
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
    self.assertEqual(resolved['user']['noise_rate'], 0.1)

  def test_a_raising_reasoner_is_recorded_not_fatal(self):
    class Raising(rules.RulesReasoner):
      def intent(self, requests):
        raise RuntimeError('model crashed')

    original = registry.make
    registry.make = lambda *a, **k: Raising(lexicon)
    try:
      out = self.root / 'raising'
      returned = runs.run_main(out, methods=['recovr'], num_sessions=5)
      # Any session that raised fails the run (a non-zero exit) after the
      # outputs are written, unless --max_error_share allows it.
      self.assertRegex(returned, r'FAILED: sessions raised: recovr \d of 5')
      tolerant = runs.run_main(self.root / 'raising_ok', methods=['recovr'],
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
    runs.run_main(host, methods=['recovr', 'no_reflection'], user_draws='jax')
    runs.run_main(jit, methods=['recovr', 'no_reflection'], simulation='jit')
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

  def test_text_start(self):
    # I-TVR on the world: no reference, turn 0 from a description naming
    # text_start.NAMED attributes of the target; every method runs; MERLIN
    # asks about the shown result; the jitted driver is refused.
    from recovr_jax.envs.world.benchmark import lexicon  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.user import text_start  # pylint: disable=g-import-not-at-top
    out = self.root / 'text_start'
    runs.run_main(out, methods=['recovr', 'ivr', 'merlin', 'umivr',
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
      runs.run_main(self.root / 'text_jit', methods=['recovr'], start='text',
               simulation='jit')

  def test_jit_and_device_errors_name_the_flag(self):
    methods.register('host_only', _host_only)
    try:
      with self.assertRaisesRegex(Exception, r"--simulation=jit: method "
                                  r"'host_only' .*change --methods"):
        runs.run_main(self.root / 'bad', methods=['recovr', 'host_only'],
                 simulation='jit')
    finally:
      methods.unregister('host_only')
    with self.assertRaisesRegex(Exception, '--simulation=jit needs '
                                '--reasoner=rules'):
      runs.run_main(self.root / 'bad', methods=['recovr'], simulation='jit',
               reasoner='flax_lm')
    self.assertFalse((self.root / 'bad' / 'metrics.json').exists())
    with self.assertRaisesRegex(Exception, '--session_shards=4 but JAX sees '
                                '1 device'):
      runs.run_main(self.root / 'bad', methods=['recovr'], simulation='jit',
               session_shards=4)
    with self.assertRaisesRegex(Exception, '--gallery_over_processes needs '
                                '--simulation=jit and --num_processes >= 2 '
                                r'\(got --simulation=jit, --num_processes=1'):
      runs.run_main(self.root / 'bad', methods=['recovr'], simulation='jit',
               gallery_over_processes=True)
    with self.assertRaisesRegex(Exception, '--platform=tpu was requested but '
                                'JAX finds no tpu device'):
      runs.run_main(self.root / 'bad', methods=['recovr'], platform='tpu')
    original = resources.available_bytes
    resources.available_bytes = lambda device=None: 1 << 16
    try:
      with self.assertRaisesRegex(Exception, 'a batch of 5 sessions needs '
                                  r'about .* GiB .* lower --batch_size'):
        runs.run_main(self.root / 'bad', methods=['recovr'])
    finally:
      resources.available_bytes = original

  def test_bad_input_before_any_work(self):
    with self.assertRaisesRegex(Exception, "unknown --methods nope; valid: "
                                "recovr, covr_only"):
      runs.run_main(self.root / 'bad', methods=['recovr', 'nope'])
    blocker = self.root / 'file'
    blocker.write_text('x')
    with self.assertRaisesRegex(Exception, 'cannot be written'):
      runs.run_main(blocker / 'sub', methods=['recovr'],
               cache_dir=str(self.root / 'cache'))
    with self.assertRaisesRegex(Exception, 'cache_dir .* cannot be used as a '
                                'directory'):
      runs.run_main(self.root / 'ok', methods=['recovr'],
               cache_dir=str(blocker / 'cache'))
    with self.assertRaisesRegex(Exception, 'needs --annotations'):
      runs.run_main(self.root / 'bad', data='webvid_covr')
    with self.assertRaisesRegex(Exception, "unknown --bootstrap_baseline "
                                "'nope'; valid: strongest, covr_only"):
      runs.run_main(self.root / 'bad', bootstrap_baseline='nope')
    for against in (dict(bootstrap_baseline='recovr'),
                    dict(bootstrap_also=['recovr'])):
      with self.assertRaisesRegex(Exception, 'recovr minus itself is 0'):
        runs.run_main(self.root / 'bad', methods=['recovr'], **against)
    with self.assertRaisesRegex(Exception, '--bootstrap_also compares recovr '
                                'with methods of --methods; not in --methods: '
                                'no_keep'):
      runs.run_main(self.root / 'bad', methods=['recovr'],
               bootstrap_also=['no_keep'])
    with self.assertRaisesRegex(Exception, '--bootstrap_also lists a method '
                                'twice'):
      runs.run_main(self.root / 'bad', methods=['recovr', 'ivr'],
               bootstrap_also=['ivr', 'ivr'])
    with self.assertRaisesRegex(Exception, "'gallery' is not sweepable"):
      runs.run_main(self.root / 'bad', sweep=['gallery=1|2'])
    with self.assertRaisesRegex(Exception, 'user_policy=lazy: value should be one of'):
      runs.run_main(self.root / 'bad', sweep=['user_policy=lazy'])


class BenchmarkPresetTest(absltest.TestCase):
  """--benchmark=v2 sets the new benchmark's flags; explicit flags win."""

  def test_presets_and_overrides(self):
    flags.FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(benchmark='v1', methods=['recovr']):
      v1 = run_flags.config_from_flags()
    self.assertEqual((v1.data.captions, v1.user.style, v1.user.language,
                      v1.data.world.renditions, v1.data.checkpoint_dir),
                     ('oracle', 'template', 'lexicon', 1, None))
    with flagsaver.flagsaver(benchmark='v2', methods=['recovr']):
      v2 = run_flags.config_from_flags()
    self.assertEqual((v2.data.captions, v2.user.style, v2.user.language,
                      v2.data.world.renditions, v2.data.checkpoint_dir),
                     ('model', 'paper', 'own', 4,
                      encoders.RENDITIONS_CHECKPOINT_DIR))
    with flagsaver.flagsaver(methods=['recovr']):  # the default: v3
      v3 = run_flags.config_from_flags()
    self.assertEqual((v3.data, v3.user.language, v3.reasoner),
                     (v2.data, 'own_v3', 'grounded'))
    with flagsaver.flagsaver(methods=['recovr'], describe_layout=True):
      self.assertEqual(run_flags.config_from_flags().reasoner, 'rules')
    with flagsaver.flagsaver(methods=['recovr'], captions='oracle',
                             renditions=2):
      mixed = run_flags.config_from_flags()
    self.assertEqual((mixed.data.captions, mixed.data.world.renditions,
                      mixed.user.style), ('oracle', 2, 'paper'))
    self.assertEqual(v2.data, world_source.WorldData.v2())
    self.assertEqual(v1.data, world_source.WorldData.v1())
    with flagsaver.flagsaver(methods=['recovr'], data='webvid_covr'):
      real = run_flags.config_from_flags()  # the world's presets do not apply
    self.assertEqual(real.data, files_source.RealData())
    self.assertEqual(real.reasoner, 'rules')  # grounded reads the world

  def test_default_run_reads_only_model_captions(self):
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    # 100 combinations x 4 renditions: 400 videos rendered and captioned.
    values = dict(runs.TINY, output_dir=str(root / 'v3'), gallery_size=100,
                  cache_dir=str(root / 'cache'), methods=['recovr', 'umivr'])
    del values['benchmark']
    with flagsaver.flagsaver(**values):
      config = run_flags.config_from_flags()
      built = runner.build(config)
      runner.run(config, built)
    resolved = json.loads((root / 'v3' / 'resolved_config.json').read_text())
    self.assertEqual((resolved['data']['source'],
                      resolved['data']['captions'],
                      resolved['user']['language'],
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
      runs.run_main(root / 'a', methods=['recovr'], captions='model',
               captioner_checkpoint=str(root))
    with self.assertRaisesRegex(Exception, '--captions is for --data=world, '
                                'not --data=webvid_covr'):
      with flagsaver.flagsaver(output_dir=str(root / 'b'), methods=['recovr'],
                               captions='model', data='webvid_covr'):
        run.main(['run'])


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


class WebvidCovrTest(absltest.TestCase):
  """The runner on real-data files: a tiny random CLIP, frame folders, CSV."""

  def test_the_users_own_text_encoder_and_composer(self):
    from recovr_jax.envs.files import callables  # pylint: disable=g-import-not-at-top
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    from tests.helpers import real_callables  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    del files['clip_dir']  # not needed with --text_encoder
    out = root / 'out'
    before = dict(real_callables.CALLS)
    with flagsaver.flagsaver(output_dir=str(out), methods=['recovr', 'ivr'],
                             num_turns=2, list_length=5, batch_size=4,
                             bootstrap_resamples=100,
                             text_encoder='tests.helpers.real_callables:encode',
                             composer='tests.helpers.real_callables:compose',
                             **files):
      run.main(['run'])
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(rows, 8)
    for row in rows:  # every turn ran (stopped or not)
      self.assertLen(row['turns'], 3)
    for name in ('encode', 'compose'):
      self.assertGreater(real_callables.CALLS[name], before[name])
    resolved = json.loads((out / 'resolved_config.json').read_text())
    self.assertIn('text_encoder_module', resolved['files'])
    self.assertNotIn('clip_dir', resolved['files'])
    # Wrong answers are named with the flag and what came back.
    for spec, message in (
        ('tests.helpers.real_callables', 'expected module:function'),
        ('no_such_module_xyz:f', "no module 'no_such_module_xyz'"),
        ('tests.helpers.real_callables:missing', "has no 'missing'"),
        ('tests.helpers.real_callables:NOT_CALLABLE', 'is not callable'),
        ('tests.helpers.real_callables:wrong_shape', r'shape \(2, 17\) for 2 inputs'
         r'; expected \(2, 16\)'),
        ('tests.helpers.real_callables:with_nan', 'NaN or inf in row 1 of 2')):
      with self.subTest(spec=spec):
        with self.assertRaisesRegex(ValueError, message):
          callables.module_file(spec, '--text_encoder')
          callables.text_encoder(spec, 16)(['a b', 'c'])
    with self.assertRaisesRegex(ValueError, r'--composer=.*shape \(1, 16\)'):
      callables.composer('tests.helpers.real_callables:compose_one_row', 16)(
          np.zeros((2, 16)), np.zeros((2, 16)))
    # Refused before anything loads, naming the flag.
    with flagsaver.flagsaver(output_dir=str(root / 'bad'), methods=['recovr'],
                             text_encoder='no_such_module_xyz:f', **files):
      with self.assertRaisesRegex(Exception,
                                  "--text_encoder='no_such_module_xyz:f'"):
        run.main(['run'])

  def test_text_start_on_msrvtt_1ka_layout(self):
    # MSR-VTT-1kA's JSFusion test CSV (key, vid_key, video_id, sentence):
    # sessions without a reference; every method runs; an unknown video is
    # named (or dropped with --missing_ids=drop).
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    (root / 'jsfusion.csv').write_text(
        'key,vid_key,video_id,sentence\n' + ''.join(
            f'ret{i},msr{i},v{i},"a video, number {i}"\n' for i in range(5)))
    out = root / 'out'
    flagfile = pathlib.Path(run.__file__).parent / 'flagfiles' / 'msrvtt_1ka'
    self.assertIn('--start=text', flagfile.read_text())
    args = dict(files, annotations=str(root / 'jsfusion.csv'), start='text',
                num_turns=2, list_length=5, batch_size=5,
                bootstrap_resamples=100)
    with flagsaver.flagsaver(output_dir=str(out), methods=[
        'recovr', 'ivr', 'merlin', 'umivr', 'history_rewrite'], **args):
      run.main(['run'])
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(rows, 25)
    for row in rows:
      self.assertEqual(row['reference'], -1)
      self.assertEqual(row['turns'][0]['feedback'],
                       f'a video, number {row["session"]}')
      self.assertEqual(row['target'], row['session'])
    (root / 'bad.csv').write_text('key,vid_key,video_id,sentence\n'
                                  'r0,m0,v0,ok\nr1,m1,v99,unknown video\n')
    with flagsaver.flagsaver(output_dir=str(root / 'bad_out'),
                             methods=['recovr'],
                             **dict(args, annotations=str(root / 'bad.csv'))):
      with self.assertRaisesRegex(Exception, r"row 3, column 'video_id': "
                                  r"unknown video id 'v99'"):
        run.main(['run'])
    # AVSD's dialog file: each dialog's caption is its video's first query.
    (root / 'avsd.json').write_text(json.dumps({'dialogs': [
        {'image_id': f'v{i}', 'caption': f'someone opens door {i}',
         'summary': 'x', 'dialog': [{'question': 'q', 'answer': 'a'}]}
        for i in (2, 5)]}))
    with flagsaver.flagsaver(output_dir=str(root / 'avsd_out'),
                             methods=['recovr', 'merlin'],
                             **dict(args, annotations=str(root / 'avsd.json'))):
      run.main(['run'])
    rows = [json.loads(line) for line in (root / 'avsd_out' / (
        'trajectories.jsonl')).read_text().splitlines()]
    self.assertEqual(sorted({(r['target'], r['turns'][0]['feedback'])
                             for r in rows}),
                     [(2, 'someone opens door 2'), (5, 'someone opens door 5')])
    from recovr_jax.envs.files import data as real_data  # pylint: disable=g-import-not-at-top
    (root / 'bad_avsd.json').write_text(json.dumps(
        {'dialogs': [{'image_id': 'v1', 'caption': ' '}]}))
    with self.assertRaisesRegex(ValueError, r'dialog 1, "caption": expected '
                                'a non-empty string'):
      real_data.load_text_queries(root / 'bad_avsd.json')
    with flagsaver.flagsaver(output_dir=str(root / 'no_ref'),
                             methods=['recovr'],
                             query_embeddings=str(root / 'gallery.npz'),
                             **args):
      with self.assertRaisesRegex(Exception, '--start=text: sessions have '
                                  'no reference video'):
        run.main(['run'])

  def test_fashioniq_caption_file(self):
    # FashionIQ's layout: a JSON list of {target, candidate, captions};
    # the captions joined by " and " are the edit; bad entries are named.
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    entries = [{'target': f'v{i + 1}', 'candidate': f'v{i}',
                'captions': ['is darker', 'has longer sleeves']}
               for i in range(3)]
    (root / 'cap.dress.val.json').write_text(json.dumps(entries))
    out = root / 'out'
    args = dict(files, annotations=str(root / 'cap.dress.val.json'),
                num_turns=1, list_length=5, batch_size=3,
                bootstrap_resamples=100)
    with flagsaver.flagsaver(output_dir=str(out), methods=['recovr', 'ivr'],
                             **args):
      run.main(['run'])
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(rows, 6)
    for row in rows:
      self.assertEqual(row['turns'][0]['feedback'],
                       'is darker and has longer sleeves')
      self.assertEqual(row['target'], row['reference'] + 1)
    from recovr_jax.envs.files import data as real_data  # pylint: disable=g-import-not-at-top
    for bad, message in (
        ([{'candidate': 'v0', 'captions': ['x']}], 'entry 1 has no "target"'),
        ([entries[0], {'target': 'v1', 'candidate': 'v0', 'captions': []}],
         r'entry 2, "captions": expected a list'),
        ({'target': 'v1'}, 'expected a non-empty JSON list'),
        ([{'target': 'v9', 'candidate': 'v0', 'captions': ['x']}],
         r'entry 1, "target": unknown image id')):
      path = root / 'bad.json'
      path.write_text(json.dumps(bad))
      with self.assertRaisesRegex(ValueError, message):
        real_data.load_triplets(path, video_ids=[f'v{i}' for i in range(8)])

  def test_finecvr_files(self):
    # FineCVR-1M's layout (May2333/FDCA data_utils.py): tab-separated
    # idx, ref, target, cap, source, class_id without a header; integer ids
    # named by id2vdoname_test.json; [8, D] .npy features per video,
    # averaged by the importer; bad lines named by number and field.
    from experiments.data import import_finecvr  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.files import data as real_data  # pylint: disable=g-import-not-at-top
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    ann = root / 'annotations'
    ann.mkdir()
    names = {str(i): f'clip_{i:03d}' for i in range(8)}
    (ann / 'id2vdoname_test.json').write_text(json.dumps(names))
    (ann / 'test_remaped.txt').write_text(''.join(
        f'{i}\t{i}\t{i + 1}\tturn the "left" arm up, not down\t'
        f'src\t{i % 3}\n' for i in range(4)) + '\n')
    features = root / 'features'
    features.mkdir()
    rng = np.random.default_rng(0)
    frames = {}
    for name in names.values():
      frames[name] = rng.standard_normal((8, 16)).astype(np.float32)
      np.save(features / f'{name}.npy', frames[name])
    (root / 'captions.json').write_text(json.dumps(
        {n: f'a gymnast number {i}' for i, n in enumerate(names.values())}))
    gallery = root / 'gallery.npz'
    with flagsaver.flagsaver(features_dir=str(features),
                             annotations=str(ann / 'test_remaped.txt'),
                             captions_json=str(root / 'captions.json'),
                             output=str(gallery)):
      import_finecvr.main(['import_finecvr'])
    got = real_data.load_embeddings(gallery, normalize=False)
    self.assertEqual(got.ids, tuple(names.values()))
    np.testing.assert_allclose(got.video[2], frames['clip_002'].mean(0),
                               rtol=1e-6)
    self.assertEqual(got.captions[5], 'a gymnast number 5')
    out = root / 'out'
    with flagsaver.flagsaver(**dict(
        files, output_dir=str(out), methods=['recovr', 'ivr'], num_turns=2,
        list_length=3, batch_size=4, bootstrap_resamples=100,
        annotations=str(ann / 'test_remaped.txt'),
        gallery_embeddings=str(gallery))):
      run.main(['run'])
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertEqual(sorted({(r['reference'], r['target']) for r in rows}),
                     [(i, i + 1) for i in range(4)])
    self.assertEqual(rows[0]['turns'][0]['feedback'],
                     'turn the "left" arm up, not down')
    path = ann / 'test_remaped.txt'
    for text, message in (
        ('0\t1\t2\tx\tsrc\n', r'line 1 has 5 tab-separated fields; '
         'expected 6'),
        ('0\t1\t2\tx\tsrc\t0\n0\t1\t9\tx\tsrc\t0\n',
         r"line 2, field 'target': video id '9' is not in "
         'id2vdoname_test.json'),
        ('0\t1\t1\tx\tsrc\t0\n', 'line 1: the reference and the target '
         "are the same video 'clip_001'"),
        ('0\t1\t2\t \tsrc\t0\n', "line 1, field 'cap' is empty"),
        ('0\t1\t2\tx\ts\t0\n\n0\t1\t2\tx\ts\t0\n', 'line 2 is empty')):
      with self.subTest(text=text):
        path.write_text(text)
        with self.assertRaisesRegex(ValueError, message):
          real_data.load_triplets(path)
    (ann / 'id2vdoname_test.json').unlink()
    with self.assertRaisesRegex(FileNotFoundError, 'need their video-name '
                                'map .*id2vdoname_test.json'):
      real_data.load_triplets(path)
    flagfile = pathlib.Path(run.__file__).parent / 'flagfiles' / 'finecvr'
    self.assertIn('--data=webvid_covr', flagfile.read_text())

  def test_dense_webvid_covr_annotations(self):
    # Dense-WebVid-CoVR's files have WebVid-CoVR's columns with long edits:
    # commas, quotes and a line break inside a quoted field; edits longer
    # than the (tiny) CLIP's 32 positions are encoded from their first
    # tokens and reported.
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    dense = [('v0', 'v1', 'Keep the same red car, but make it drive '
              'backwards along the "coastal" road at dusk while the camera '
              'pans slowly to the left and the waves break on the rocks'),
             ('v2', 'v3', 'Same scene;\nthe man now waves with both hands')]
    import csv  # pylint: disable=g-import-not-at-top
    with (root / 'dense.csv').open('w', newline='') as f:
      writer = csv.writer(f)
      writer.writerow(['pth1', 'pth2', 'edit', 'txt1', 'txt2'])
      for ref, tgt, edit in dense:
        writer.writerow([ref, tgt, edit, f'video {ref}', f'video {tgt}'])
    out = root / 'out'
    with flagsaver.flagsaver(output_dir=str(out), methods=['recovr'],
                             num_turns=1, list_length=5, batch_size=2,
                             bootstrap_resamples=100,
                             **dict(files, annotations=str(root / 'dense.csv'))):
      run.main(['run'])
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertEqual([r['turns'][0]['feedback'] for r in rows],
                     [edit for _, _, edit in dense])
    notes = json.loads((out / 'text_truncation.json').read_text())
    self.assertEqual(notes['max_tokens'], 32)
    self.assertGreaterEqual(notes['texts_truncated'], 1)
    # The edit itself, or a search written from it, was among them.
    self.assertTrue(any(dense[0][2] in row['text'] and row['tokens'] > 32
                        for row in notes['longest']), notes['longest'])
    flagfile = pathlib.Path(run.__file__).parent / 'flagfiles' / (
        'dense_webvid_covr')
    self.assertIn('--data=webvid_covr', flagfile.read_text())

  def test_jit_equals_host_on_real_files(self):
    # The stepped face: the ranking in JAX, the caption user and the
    # reasoning on the host a turn per pass; lists and records equal the
    # host driver's byte for byte (composed and text start, every method
    # kind, sessions that stop at different turns, two batches).
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    (root / 'jsfusion.csv').write_text(
        'key,vid_key,video_id,sentence\n' + ''.join(
            f'ret{i},msr{i},v{i},a video number {i}\n' for i in range(6)))
    runs = {
        # ReCoVR's fusion with rank-cap, MERLIN's utterance embeddings,
        # UMIVR (its dialogue and questions) under a transplanted rank-cap,
        # history rewriting, and a method without a turn-0 CoVR query.
        'composed': dict(methods=['recovr', 'merlin', 'umivr_rankcap',
                                  'history_rewrite', 't2v_only']),
        'text': dict(methods=['recovr', 'merlin'], start='text',
                     annotations=str(root / 'jsfusion.csv'))}
    for name, extra in runs.items():
      outs = {}
      for simulation in ('host', 'jit'):
        outs[simulation] = out = root / f'{name}_{simulation}'
        with flagsaver.flagsaver(**dict(
            files, output_dir=str(out), num_turns=3, list_length=3,
            batch_size=3, bootstrap_resamples=100, simulation=simulation,
            **extra)):
          run.main(['run'])
      for f in ('metrics.json', 'trajectories.jsonl', 'ranks.csv'):
        with self.subTest(run=name, file=f):
          self.assertEqual((outs['jit'] / f).read_text(),
                           (outs['host'] / f).read_text())
      rows = [json.loads(line) for line in
              (outs['jit'] / 'trajectories.jsonl').read_text().splitlines()]
      stops = {len([t for t in r['turns'] if t.get('action') != 'stopped'])
               for r in rows}
      self.assertGreater(len(stops), 1, 'every session stopped alike')

  def test_the_stepped_face_refuses_a_turn_out_of_order(self):
    from recovr_jax.protocol import traced  # pylint: disable=g-import-not-at-top
    from recovr_jax.drivers import jit_runner  # pylint: disable=g-import-not-at-top
    from recovr_jax.protocol import plan  # pylint: disable=g-import-not-at-top
    from recovr_jax.drivers import stepped  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.files import caption_user  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.files import files_environment  # pylint: disable=g-import-not-at-top
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    env = files_environment.real_environment(files['annotations'],
                                    files['gallery_embeddings'],
                                    files['clip_dir'])
    user = files_environment.caption_user(caption_user.CaptionUser(), env.captions)
    ctx = plan.Context(gallery=env.gallery, captions=env.captions,
                           encode_text=env.encode_text, compose=env.compose,
                           reasoner=files_source.VOCABULARY.rules())
    base = ranking.LoopConfig(num_turns=2, list_length=3)
    step_env = stepped.StepEnvironment(env, methods.make('recovr'),
                                       np.arange(4), user, ctx, base)
    config = step_env.config(base)
    trace = jit_runner.run(step_env, config, np.arange(4), 0, chunk_size=None)
    # Each session's turns were ranked once and recorded as the host's.
    self.assertEqual([len(r) for r in step_env.stepper.records], [3] * 4)
    self.assertEqual(trace.displayed.shape[:2], (4, 3))
    # A turn probed out of order (each call gets one turn) is refused.
    with self.assertRaisesRegex(RuntimeError, 'turn 1 was probed before '
                                'turn 3'):
      step_env.stepper.fill(traced.Turn(1, {}))

  def test_runs_end_to_end(self):
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root)
    out = root / 'out'
    with flagsaver.flagsaver(output_dir=str(out),
                             methods=['recovr', 'ivr'], num_turns=2,
                             list_length=5, batch_size=4,
                             bootstrap_resamples=100, **files):
      run.main(['run'])
    metrics = json.loads((out / 'metrics.json').read_text())
    self.assertLen(metrics['recovr']['R@1'], 3)
    rows = [json.loads(line) for line in
            (out / 'trajectories.jsonl').read_text().splitlines()]
    self.assertLen(rows, 8)
    for row in rows:
      for turn in row['turns']:
        self.assertNotIn(row['reference'], turn['top10'])  # v_ref excluded
