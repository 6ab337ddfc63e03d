"""recovr_jax.analysis.claims and paper_claims: verdicts with intervals."""

import json
import pathlib
import re

from absl import app
from absl.testing import absltest
from absl.testing import flagsaver
import chex
import numpy as np

from experiments.evaluate import fidelity
from recovr_jax import readers
from recovr_jax.analysis import claims
from recovr_jax.analysis import paper_claims
from recovr_jax.core import list_metrics
from recovr_jax.core import resampling
from recovr_jax.run import reporting

S, T = 400, 5
RNG = np.random.default_rng(0)


def _run(ranks: dict, top1=None, fired=None, sessions=None):
  top1 = top1 or {m: RNG.integers(0, 3, r.shape) for m, r in ranks.items()}
  fired = fired or {m: np.zeros(r.shape, bool) for m, r in ranks.items()}
  n = len(next(iter(ranks.values())))
  return claims.Run(np.arange(n) if sessions is None else sessions, ranks,
                    top1, fired)


def _hits(share, turns=T + 1):
  """Ranks whose R@1 is ``share`` at every turn (rows in random order)."""
  hit = np.arange(S) < round(share * S)
  return np.where(RNG.permutation(hit)[:, None], 1, 50).repeat(turns, 1)


def _claim(kind, margin=0.0, a='a', b='b'):
  return claims.Claim('c', 'here', 'a claim', '-', lambda v: [claims.Check(
      f'{a} - {b} T1', v.r(a, 1, 1) - v.r(b, 1, 1), kind, margin)])


def _verdict(claim, runs, resamples=2000):
  ev = claims.Evidence({'main': {'main': _run(runs)}}, resamples)
  (row,) = claims.evaluate([claim], ev)
  return row


class VerdictTest(absltest.TestCase):

  def test_greater(self):
    far = {'a': _hits(0.7), 'b': _hits(0.3)}
    self.assertEqual(_verdict(_claim('greater'), far)['verdict'],
                     'reproduced')
    self.assertEqual(_verdict(_claim('greater', a='b', b='a'), far)
                     ['verdict'], 'contradicted')
    identical = {'a': far['a'], 'b': far['a']}
    row = _verdict(_claim('greater'), identical)
    self.assertEqual(row['verdict'], 'untestable')
    self.assertIn('agree on every session', fidelity.markdown({'m': [row]}))
    same = {'a': _hits(0.5), 'b': _hits(0.5)}
    row = _verdict(_claim('greater'), same)
    self.assertEqual(row['verdict'], 'inconclusive')
    (check,) = row['checks']
    self.assertLess(check['lower'], 0)
    self.assertGreater(check['upper'], 0)

  def test_the_interval_is_the_paired_bootstrap(self):
    runs = {'a': _hits(0.6), 'b': _hits(0.5)}
    row = _verdict(_claim('greater'), runs, resamples=500)
    (check,) = row['checks']
    import jax  # pylint: disable=g-import-not-at-top
    expected = resampling.paired_bootstrap(
        (runs['a'] <= 1).astype(np.float32), (runs['b'] <= 1).astype(
            np.float32), 500, jax.random.key(0))
    self.assertAlmostEqual(check['value'], float(expected.mean[1]), 6)
    self.assertAlmostEqual(check['lower'], float(expected.lower[1]), 5)
    self.assertAlmostEqual(check['upper'], float(expected.upper[1]), 5)

  def test_at_least_and_within(self):
    close = {'a': _hits(0.5), 'b': _hits(0.51)}
    self.assertEqual(_verdict(_claim('at_least', 0.1), close)['verdict'],
                     'reproduced')
    self.assertEqual(_verdict(_claim('within', 0.1), close)['verdict'],
                     'reproduced')
    far = {'a': _hits(0.2), 'b': _hits(0.6)}
    self.assertEqual(_verdict(_claim('at_least', 0.1), far)['verdict'],
                     'contradicted')
    self.assertEqual(_verdict(_claim('within', 0.1), far)['verdict'],
                     'contradicted')
    self.assertEqual(_verdict(_claim('within', 0.1, 'b', 'a'), far)
                     ['verdict'], 'contradicted')
    edge = {'a': _hits(0.5), 'b': _hits(0.6)}  # -10 points: on the margin
    self.assertEqual(_verdict(_claim('within', 0.1), edge)['verdict'],
                     'inconclusive')

  def test_no_repeated_top1_is_read_under_the_papers_placement(self):
    # ReCoVR's repeated top-1 is zero by construction under the default
    # placement (the note says so); the claim reads the run under the
    # paper's placement, and is not run without it.
    (claim,) = [c for c in paper_claims.CLAIMS
                if c.key == 'no_repeated_top1']
    self.assertIn('by construction', claim.note)
    ranks = np.full((S, T + 1), 3)
    fresh = np.tile(np.arange(T + 1), (S, 1))      # a new top-1 every turn
    often = fresh.copy()
    often[:S // 3, 2] = often[:S // 3, 1]          # a third repeat
    for top1, verdict in ((fresh, 'reproduced'), (often, 'contradicted')):
      main = _run({m: ranks for m in paper_claims.MAIN_METHODS})
      placed = _run({'recovr': ranks}, {'recovr': top1})
      ev = claims.Evidence({'main': {
          'main': main, paper_claims.PLACEMENT_RUN: placed}}, 500)
      (row,) = claims.evaluate([claim], ev)
      self.assertEqual(row['verdict'], verdict)
    ev = claims.Evidence({'main': {'main': main}}, 50)
    (row,) = claims.evaluate([claim], ev)
    self.assertEqual(row['verdict'], 'not run')
    self.assertIn(paper_claims.PLACEMENT_RUN, row['why'])

  def test_a_claim_on_recovr_is_read_under_both_placements(self):
    # A claim reading ReCoVR's main run gets a second row reading the run
    # under the paper's placement; it is not counted, and the report names
    # it where its verdict changes. A claim that does not read ReCoVR gets
    # none.
    claim = _claim('greater', a='recovr', b='umivr')
    other = claims.Claim('d', 'here', 'another', '-', lambda v: [
        claims.Check('ivr - umivr T1', v.r('ivr', 1, 1) - v.r('umivr', 1, 1),
                     'greater')])
    main = _run({'recovr': _hits(0.7), 'umivr': _hits(0.3),
                 'ivr': _hits(0.6)})
    placed = _run({'recovr': _hits(0.1)})
    ev = claims.Evidence({'main': {'main': main,
                                   paper_claims.PLACEMENT_RUN: placed}}, 500)
    rows = claims.evaluate([claim, other], ev,
                           placement_run=paper_claims.PLACEMENT_RUN,
                           placement_free=('umivr', 'ivr'))
    self.assertEqual([(r['key'], r['reading'], r['verdict']) for r in rows], [
        ('c', '', 'reproduced'),
        ('c', claims.PLACEMENT_READING, 'contradicted'),
        ('d', '', 'reproduced')])
    self.assertEqual(claims.summary(rows)['reproduced'], 2)
    self.assertEqual(claims.summary(rows)['contradicted'], 0)
    text = claims.markdown({'m': rows})
    self.assertIn('Claims whose verdict changes with the rank-cap placement',
                  text)
    self.assertIn('| c | reproduced -> contradicted |', text)
    # Without the run, or the argument: one row each, as before; nor
    # against a method the placement may change (another ReCoVR variant).
    self.assertLen(claims.evaluate([claim, other], ev), 2)
    self.assertLen(claims.evaluate([claim, other], ev,
                                   placement_run=paper_claims.PLACEMENT_RUN,
                                   placement_free=('ivr',)), 2)

  def test_more_than_half_is_read_one_way_and_reasons_are_current(self):
    ev = _full_evidence()
    for key in ('umivr_stagnates_more', 'umivr_repeats_top1'):
      (claim,) = [c for c in paper_claims.CLAIMS if c.key == key]
      labels = [c.label for c in claim.checks(claims.View(ev))]
      self.assertLen([l for l in labels if l.endswith('rate - 50%')], 1,
                     labels)
    reasons = ' '.join(c.untestable for c in paper_claims.CLAIMS)
    self.assertNotIn('the rules reasoner reads no prompt', reasons)
    # The statements added to the table, each with its checks.
    added = {'variants_competitive_t1',
             'history_rewrite_r10_flat', 'history_rewrite_bri_slow',
             'optional_asking', 'window_saturates', 'reasoner_swapped'}
    rows = {r['key']: r for r in claims.evaluate(paper_claims.CLAIMS, ev)}
    for key in added:
      self.assertNotIn(rows[key]['verdict'], ('untestable', 'not run'), key)
    # The shared turn 0 holds by construction: not a row of the tally.
    self.assertEqual(rows['shared_turn0']['verdict'], 'untestable')

  def test_every_method_shares_turn_0_in_the_familys_runs(self):
    # The protocol property the shared_turn0 row stated, checked on the
    # runs themselves: the target's turn-0 rank is recovr's for every
    # method of every member's main run, on every session.
    folder = pathlib.Path(__file__).resolve().parents[2] / (
        'results/fidelity_v3_sessions')
    members = sorted(folder.glob('*.npz'))
    self.assertLen(members, 4)
    for path in members:
      groups, _ = claims.load_groups(path)
      ranks = groups['main']['main'].ranks
      self.assertGreater(len(ranks), 10, path.name)
      for method, r in ranks.items():
        np.testing.assert_array_equal(r[:, 0], ranks['recovr'][:, 0],
                                      err_msg=f'{path.name}: {method}')

  def test_optional_asking_reads_the_clean_score_not_a_gain(self):
    # ReCoVR gains under both policies but ends far below its clean score:
    # the old encoding (a gain > 0) reproduced this; the paper's point (its
    # score without answering stays near the clean one) does not hold.
    (claim,) = [c for c in paper_claims.CLAIMS if c.key == 'optional_asking']
    start, clean, far, near = (np.where(
        np.arange(S) < round(x * S), 1, 50) for x in (0.3, 0.9, 0.6, 0.89))

    def degraded(policy_end):
      ranks = np.stack([start] * T + [policy_end], axis=1)
      clean_ranks = np.stack([start] * T + [clean], axis=1)
      runs = {paper_claims.CLEAN: clean_ranks,
              'user_policy=modify_only': ranks, paper_claims.REWRITE: ranks}
      return claims.Evidence({'main': {'main': _run({'recovr': ranks})},
                              'degraded': {
                                  k: _run({'recovr': r, 'umivr': r})
                                  for k, r in runs.items()}}, 500)
    self.assertEqual(claims.evaluate([claim], degraded(far))[0]['verdict'],
                     'contradicted')
    self.assertEqual(claims.evaluate([claim], degraded(near))[0]['verdict'],
                     'reproduced')
    old = claims.Claim('old', '-', '-', '-', lambda v: [
        claims.Check(f'gain recovr under {s}', v.r('recovr', 1, T, s) -
                     v.r('recovr', 1, 0, s))
        for s in ('user_policy=modify_only', paper_claims.REWRITE)],
                       group='degraded')
    self.assertEqual(claims.evaluate([old], degraded(far))[0]['verdict'],
                     'reproduced')

  def test_window_saturates_needs_the_gains_to_shrink(self):
    # W = 7 equals W = 5 (the old encoding: reproduced), but the gain from
    # W = 3 to 5 is larger than from 1 to 3: accelerating, not saturating.
    (claim,) = [c for c in paper_claims.CLAIMS if c.key == 'window_saturates']
    self.assertEqual(claim.runs, (f'window={paper_claims.NARROW_WINDOW}',
                                  f'window={paper_claims.WIDE_WINDOW}'))

    def evidence(w1, w3, w5):
      wide = _hits(w5)
      runs = {'window=1': _hits(w1), f'window={paper_claims.NARROW_WINDOW}':
              _hits(w3), 'default': wide,
              f'window={paper_claims.WIDE_WINDOW}': wide}
      return claims.Evidence({'sensitivity': {
          k: _run({'recovr': r}) for k, r in runs.items()}}, 1000)
    accelerating, saturating = evidence(0.3, 0.35, 0.7), evidence(0.3, 0.6,
                                                                    0.65)
    self.assertEqual(claims.evaluate([claim], accelerating)[0]['verdict'],
                     'contradicted')
    self.assertEqual(claims.evaluate([claim], saturating)[0]['verdict'],
                     'reproduced')
    old = claims.Claim('old', '-', '-', '-', lambda v: [claims.Check(
        'w7 - w5', v.r('recovr', 1, T, f'window={paper_claims.WIDE_WINDOW}')
        - v.r('recovr', 1, T, 'default'), 'within', claims.MARGIN_POINTS)],
                       group='sensitivity')
    self.assertEqual(claims.evaluate([old], accelerating)[0]['verdict'],
                     'reproduced')

  def test_marginal_and_equal(self):
    same = _hits(0.5)
    ahead = same.copy()                       # paired: a few sessions ahead
    ahead[np.flatnonzero(ahead[:, 1] > 1)[:4], 1] = 1
    behind = same.copy()                      # a significant deficit
    behind[np.flatnonzero(behind[:, 1] == 1)[:8], 1] = 50
    for a, verdict in ((ahead, 'reproduced'), (behind, 'contradicted'),
                       (_hits(0.9), 'contradicted')):
      row = _verdict(_claim('marginal', 0.03), {'a': a, 'b': same}, 1000)
      self.assertEqual(row['verdict'], verdict)
    self.assertEqual(_verdict(_claim('equal'), {'a': same, 'b': same})
                     ['verdict'], 'reproduced')
    self.assertEqual(_verdict(_claim('equal'), {'a': ahead, 'b': same})
                     ['verdict'], 'contradicted')

  def test_umivr_repeats_is_tested_against_half_not_against_zero(self):
    (claim,) = [c for c in paper_claims.CLAIMS
                if c.key == 'umivr_repeats_top1']
    ranks = np.full((S, T + 1), 3)
    fresh = np.tile(np.arange(T + 1), (S, 1))      # a new top-1 every turn
    rare = fresh.copy()
    rare[:S // 5, 2] = rare[:S // 5, 1]            # a few repeats
    most = np.zeros((S, T + 1), int)               # the same top-1 always
    for top1, verdict in ((rare, 'contradicted'), (most, 'reproduced')):
      runs = {m: ranks for m in paper_claims.MAIN_METHODS}
      codes = {m: fresh for m in paper_claims.MAIN_METHODS}
      codes['umivr'] = top1
      ev = claims.Evidence({'main': {'main': _run(runs, codes)}}, 500)
      (row,) = claims.evaluate([claim], ev)
      # A few repeats beat ReCoVR's zero but are not "most" transitions.
      self.assertEqual(row['verdict'], verdict)

  def test_marginally_ahead_is_not_a_significant_lead(self):
    keys = ('static_rrf_ahead_turn1', 'current_turn_fusion_t1')
    for key in keys:
      (claim,) = [c for c in paper_claims.CLAIMS if c.key == key]
      other = 'static_rrf' if key.startswith('static') else (
          'single_turn_fusion')
      close = {m: _hits(0.5) for m in paper_claims.MAIN_METHODS}
      ahead = close['recovr'].copy()            # paired: a few sessions
      misses = np.flatnonzero(ahead[:, 1] > 1)  # found one turn earlier
      ahead[misses[:len(ahead) // 100 + 1], 1] = 1
      close[other] = ahead
      ev = claims.Evidence({'main': {'main': _run(close)}}, 1000)
      (row,) = claims.evaluate([claim], ev)
      first = row['checks'][0]
      self.assertEqual(first['kind'], 'marginal', key)
      self.assertEqual(first['verdict'], 'reproduced', key)
      far = dict(close)
      far[other] = _hits(0.8)                   # far ahead: not marginal
      ev = claims.Evidence({'main': {'main': _run(far)}}, 1000)
      (row,) = claims.evaluate([claim], ev)
      self.assertEqual(row['checks'][0]['verdict'], 'contradicted', key)

  def test_untestable_and_not_run(self):
    ev = claims.Evidence({'main': {'main': _run({'a': _hits(0.5)})}})
    untestable = claims.Claim('u', 'here', 'q', '-', untestable='no data')
    elsewhere = claims.Claim('d', 'here', 'q', '-', lambda v: [],
                             group='degraded')
    rows = claims.evaluate([untestable, elsewhere], ev)
    self.assertEqual([r['verdict'] for r in rows], ['untestable', 'not run'])
    self.assertEqual(rows[0]['why'], 'no data')
    self.assertEqual(claims.summary(rows)['not run'], 1)

  def test_a_claim_is_its_checks_together(self):
    self.assertEqual(claims.combine(['reproduced'] * 3), 'reproduced')
    self.assertEqual(claims.combine(['reproduced', 'inconclusive']),
                     'inconclusive')
    self.assertEqual(claims.combine(['inconclusive', 'contradicted',
                                     'reproduced']), 'contradicted')
    # A tied turn is not skipped: "every turn" without it is not shown.
    self.assertEqual(claims.combine(['untestable', 'reproduced']),
                     'inconclusive')
    self.assertEqual(claims.combine(['untestable', 'contradicted']),
                     'contradicted')
    self.assertEqual(claims.combine(['untestable'] * 2), 'untestable')
    with self.assertRaises(ValueError):
      claims.combine([])

  def test_missing_rows_and_unpaired_runs_are_errors(self):
    ev = claims.Evidence({'main': {'main': _run({'a': _hits(0.5)})}})
    with self.assertRaisesRegex(claims.MissingRows, "no method 'b'"):
      claims.evaluate([_claim('greater')], ev)
    with self.assertRaisesRegex(ValueError, 'other sessions'):
      claims.Evidence({'main': {
          'main': _run({'a': _hits(0.5)}),
          'other': _run({'a': _hits(0.5)}, sessions=np.arange(S) + 1)}})


class StatisticsTest(absltest.TestCase):

  def test_per_session_statistics_pool_to_the_metrics(self):
    ranks = RNG.integers(1, 12, (S, T + 1))
    top1 = RNG.integers(0, 4, (S, T + 1))
    pooled = list_metrics.failure_modes(ranks, top1)
    for mode, (count, total) in claims.transitions(ranks, top1).items():
      self.assertEqual(int(count.sum()), int(getattr(pooled, mode).count))
      self.assertEqual(int(total.sum()), int(getattr(pooled, mode).total))
    chex.assert_trees_all_close(claims.session_bri(ranks).mean(0),
                                np.asarray(list_metrics.bri(ranks)), atol=1e-5)

  def test_load_reads_a_run_directory(self):
    d = self.create_tempdir()
    targets = RNG.integers(0, 30, 6)
    displayed = {m: RNG.integers(0, 30, (6, T + 1, 10)) for m in 'ab'}
    sessions = np.array([3, 1, 4, 15, 9, 2])
    d.create_file('ranks.csv', reporting.ranks_csv(displayed, sessions,
                                                   targets))
    lines = []
    for m in 'ab':
      for i, s in enumerate(sessions):
        turns = [{'rank_cap_fired': bool((i + t) % 2)} for t in range(T + 1)]
        lines.append(json.dumps({'method': m, 'session': int(s),
                                 'turns': turns}))
    d.create_file('trajectories.jsonl', '\n'.join(lines) + '\n')
    run = claims.load(d.full_path)
    order = np.argsort(sessions)
    np.testing.assert_array_equal(run.sessions, np.sort(sessions))
    for m in 'ab':
      np.testing.assert_array_equal(
          run.ranks[m], np.asarray(list_metrics.target_ranks(
              displayed[m], targets))[order])
      same = displayed[m][order, :, 0][:, 1:] == displayed[m][order, :, 0][
          :, :-1]
      np.testing.assert_array_equal(run.top1[m][:, 1:] == run.top1[m][:, :-1],
                                    same)
      self.assertTrue(run.fired[m][order.tolist().index(0), 1])
    with self.assertRaisesRegex(FileNotFoundError, 'ranks.csv'):
      claims.load(self.create_tempdir().full_path)
    # Cut mid-row (the last rank would read as a shorter number) or
    # mid-line: refused, naming the file and line.
    ranks = pathlib.Path(d.full_path) / 'ranks.csv'
    whole = ranks.read_text()
    ranks.write_text(whole[:-2])
    with self.assertRaisesRegex(readers.FileError, f'^{ranks}, line .*the '
                                'last line has no newline'):
      claims.load(d.full_path)
    ranks.write_text(whole)
    trajectories = pathlib.Path(d.full_path) / 'trajectories.jsonl'
    trajectories.write_text('\n'.join(lines)[:-5])
    with self.assertRaisesRegex(readers.FileError, f'^{trajectories}, line '
                                f'{len(lines)}: the last line'):
      claims.load(d.full_path)
    (pathlib.Path(d.full_path) / 'INCOMPLETE').write_text('')
    with self.assertRaisesRegex(FileNotFoundError, 'has not finished'):
      claims.load(d.full_path)


  def test_saved_groups_read_back_the_same(self):
    groups = {'main': {'main': _run({m: RNG.integers(1, 102, (S, T + 1))
                                     for m in ('a', 'b')},
                                    fired={'a': RNG.random((S, T + 1)) < .5})},
              'sensitivity': {'window=1': _run({'a': _hits(0.3)})}}
    path = self.create_tempdir().full_path + '/member.npz'
    claims.save_groups(path, groups, {'member': 'm'})
    back, meta = claims.load_groups(path)
    self.assertEqual(meta, {'member': 'm'})
    self.assertEqual({g: set(r) for g, r in back.items()},
                     {g: set(r) for g, r in groups.items()})
    for g, runs in groups.items():
      for name, run in runs.items():
        chex.assert_trees_all_equal(
            (run.sessions, run.ranks, run.top1, run.fired),
            (back[g][name].sessions, back[g][name].ranks, back[g][name].top1,
             back[g][name].fired))
    with self.assertRaisesRegex(ValueError, 'may not hold'):
      claims.save_groups(path, {'main': {'a/b': groups['main']['main']}})
    bad = self.create_tempdir().create_file('x.npz', 'not a zip').full_path
    with self.assertRaisesRegex(ValueError, 'x.npz: not a file of'):
      claims.load_groups(bad)


def _full_evidence():
  rank = lambda: RNG.integers(1, 102, (S, T + 1))
  runs = lambda names: _run({m: rank() for m in names}, fired={
      m: RNG.random((S, T + 1)) < 0.5 for m in names})
  sensitivity = (['default', 'window=1'] +
                 [f'{n}={x}' for n, xs in paper_claims.SENSITIVITY.items()
                  for x in xs])
  sensitivity += [f'window={paper_claims.WIDE_WINDOW}',
                  f'window={paper_claims.NARROW_WINDOW}']
  return claims.Evidence({
      'main': {'main': runs(paper_claims.MAIN_METHODS),
               'stagnation': runs(['no_reflection']),
               paper_claims.PLACEMENT_RUN: runs(['recovr']),
               paper_claims.REASONER_RUN: runs(['recovr'])},
      'degraded': {s: runs(['recovr', 'umivr']) for s in (
          paper_claims.CLEAN,) + paper_claims.DEGRADED + (
              paper_claims.REWRITE,)},
      'sensitivity': {s: runs(['recovr']) for s in sensitivity}}, 200)


class PaperClaimsTest(absltest.TestCase):

  def test_every_claim_evaluates_and_both_readings(self):
    rows = claims.evaluate(paper_claims.CLAIMS, _full_evidence(),
                           'stagnation')
    readings = [r['key'] for r in rows if r['reading']]
    self.assertEqual(readings, [c.key for c in paper_claims.CLAIMS
                                if c.readings])
    self.assertLen(rows, len(paper_claims.CLAIMS) + len(readings))
    self.assertEqual({r['verdict'] for r in rows} - set(claims.VERDICTS),
                     set())
    self.assertNotIn('not run', {r['verdict'] for r in rows})
    keys = [c.key for c in paper_claims.CLAIMS]
    self.assertLen(set(keys), len(keys))

  def test_each_check_reads_the_rows_its_label_names(self):
    ev = _full_evidence()
    methods = set(paper_claims.MAIN_METHODS)
    for claim in paper_claims.CLAIMS:
      if claim.checks is None:
        self.assertNotEmpty(claim.untestable)
        continue
      view = claims.View(ev, claim.group)
      checks = claim.checks(view)
      self.assertNotEmpty(checks, claim.key)
      for check in checks:
        words = set(re.findall(r'[a-z_0-9]+', check.label))
        turns = set(re.findall(r'T(\d+)', check.label))
        for _, key in check.quantity.terms:
          kind, run, method = key[:3]
          self.assertIn(method, words, (claim.key, check.label))
          if kind in ('R', 'BRI') and 'gain' not in words:
            self.assertIn(str(key[-1]), turns, (claim.key, check.label))
          if claim.group == 'main':
            self.assertIn(method, methods)
      # Every method it reads is needed: without it the claim is an error.
      for run, method in sorted(view.read):
        group = ev.runs(claim.group)
        r = group[run]
        group[run] = claims.Run(r.sessions, {
            m: x for m, x in r.ranks.items() if m != method}, r.top1, r.fired)
        groups = {claim.group: group}
        with self.assertRaisesRegex(claims.MissingRows, method):
          claim.checks(claims.View(claims.Evidence(groups, 10), claim.group))

  def test_the_suite_makes_the_runs_the_claims_read(self):
    parts = {sub: (set(methods), dict(settings))
             for sub, methods, settings in paper_claims.FIDELITY_PARTS}
    self.assertEqual(parts['main'][0], set(paper_claims.MAIN_METHODS))
    ev = _full_evidence()
    for claim in paper_claims.CLAIMS:
      if claim.checks is None:
        continue
      view = claims.View(ev, claim.group)
      claim.checks(view)
      for run, method in view.read:
        sub = (run if run in paper_claims.MAIN_RUNS
               else f'{claim.group}/{run}')
        self.assertIn(sub, parts, claim.key)
        self.assertIn(method, parts[sub][0], claim.key)

  def test_markdown_summarises_each_member_and_the_changes(self):
    one = claims.evaluate(paper_claims.CLAIMS, _full_evidence(), 'stagnation')
    other = [dict(r) for r in one]
    other[0]['verdict'] = {'reproduced': 'contradicted'}.get(
        one[0]['verdict'], 'reproduced')
    table = fidelity.markdown({'scene_shared=1.0': one,
                               'scene_shared=0.5': other})
    self.assertIn('| scene_shared=0.5 |', table)
    self.assertIn('Claims whose verdict changes across the family: 1.', table)
    self.assertIn(f"| {one[0]['key']} | {one[0]['verdict']} | "
                  f"{other[0]['verdict']} |", table)
    self.assertEqual(table.count(f"| {one[0]['key']} | "), 3)


  def test_the_reasoner_swap_is_not_run_where_it_is_the_main_reader(self):
    ev = _full_evidence()
    rows = {r['key']: r for r in claims.evaluate(
        paper_claims.CLAIMS, ev,
        not_run=fidelity.not_run({'reader': 'rules'}))}
    self.assertEqual(rows['reasoner_swapped']['verdict'], 'not run')
    self.assertIn('restates the main run', rows['reasoner_swapped']['why'])
    self.assertEqual(fidelity.not_run({'reader': 'grounded'}), {})
    rows = {r['key']: r for r in claims.evaluate(
        paper_claims.CLAIMS, ev, not_run=fidelity.not_run(
            {'reader': 'grounded'}))}
    self.assertNotEqual(rows['reasoner_swapped']['verdict'], 'not run')

  def test_members_from_different_code_are_named_in_a_warning(self):
    def config(commit, dirty=False, diff=None):
      return {'environment': {'git_commit': commit, 'git_dirty': dirty,
                              'git_diff_sha256': diff}}
    self.assertEqual(fidelity.code_of(config('a' * 40)), 'a' * 10)
    self.assertEqual(fidelity.code_of(config('a' * 40, True, 'f' * 64)),
                     'a' * 10 + '+dirty:' + 'f' * 8)
    self.assertEqual(fidelity.code_of({}), 'unknown')
    same = {'m1': {'code': ['a' * 10]}, 'm2': {'code': ['a' * 10]}}
    self.assertIsNone(fidelity.code_warning(same))
    members = {'m1': {'code': ['a' * 10]}, 'm2': {'code': ['b' * 10]}}
    self.assertIn('m1: aaaaaaaaaa, m2: bbbbbbbbbb',
                  fidelity.code_warning(members))
    mixed = {'m1': {'code': ['a' * 10, 'a' * 10 + '+dirty']}}
    self.assertIn('runs of one member from several: m1 (2:',
                  fidelity.code_warning(mixed))
    setup = dict(reader='grounded', benchmark='v3', sessions=10,
                 scene_shared=1.0, describe_layout=False)
    one = claims.evaluate(paper_claims.CLAIMS, _full_evidence(), 'stagnation')
    table = fidelity.markdown({'m1': one, 'm2': one},
                              {'m1': {**setup, 'code': ['a' * 10]},
                               'm2': {**setup, 'code': ['b' * 10]}})
    self.assertIn('| m2 | grounded | v3 | 10 | 1.0 | no | bbbbbbbbbb |',
                  table)
    self.assertIn('**Warning: the members come from different code', table)

  def test_the_command_reads_a_member_directory_or_its_saved_sessions(self):
    member = self.create_tempdir('scene_shared=1.0')
    sessions, targets = np.arange(40), RNG.integers(0, 30, 40)
    displayed = {m: RNG.integers(0, 30, (40, T + 1, 10))
                 for m in paper_claims.MAIN_METHODS}
    main = member.mkdir('main')
    main.create_file('ranks.csv', reporting.ranks_csv(displayed, sessions,
                                                      targets))
    main.create_file('trajectories.jsonl', ''.join(
        json.dumps({'method': m, 'session': int(s), 'turns': [{}] * (T + 1)})
        + '\n' for m in displayed for s in sessions))
    config = {'seed': 0, 'reasoner': 'grounded', 'num_sessions': 40,
              'user': {'language': 'own_v3'},
              'data': {'world': {'scene_shared': 1.0,
                                 'describe_layout': False}}}
    main.create_file('resolved_config.json', json.dumps(config))
    out = self.create_tempdir()
    saved = out.full_path + '/sessions'
    with flagsaver.flagsaver(fidelity_dirs=[member.full_path],
                             fidelity_resamples=50, save_sessions_dir=saved,
                             output_json=out.full_path + '/a.json',
                             output_md=out.full_path + '/a.md'):
      fidelity.main(['fidelity'])
    with flagsaver.flagsaver(
        fidelity_dirs=[saved + '/scene_shared=1.0.npz'],
        fidelity_resamples=50, output_json=out.full_path + '/b.json',
        output_md=out.full_path + '/b.md'):
      fidelity.main(['fidelity'])
    a, b = (json.load(open(f'{out.full_path}/{x}.json')) for x in 'ab')
    self.assertEqual(a, b)
    self.assertIn('scene_shared=1.0', a['rows'])
    _, meta = claims.load_groups(saved + '/scene_shared=1.0.npz')
    self.assertEqual(meta['resolved_configs'], {'main': config})
    # Each member names its reader, benchmark and sessions.
    # (A config without an environment: code unknown.)
    self.assertEqual(a['members'], {'scene_shared=1.0': {
        'reader': 'grounded', 'benchmark': 'v3', 'sessions': 40,
        'scene_shared': 1.0, 'describe_layout': False,
        'code': ['unknown']}})
    self.assertIn('| scene_shared=1.0 | grounded | v3 | 40 | 1.0 | no | '
                  'unknown |', open(f'{out.full_path}/a.md').read())
    # A directory and its saved sessions share a name: one row would be lost.
    with flagsaver.flagsaver(
        fidelity_dirs=[member.full_path, saved + '/scene_shared=1.0.npz'],
        output_json=out.full_path + '/c.json'):
      with self.assertRaisesRegex(app.UsageError, 'two share a name'):
        fidelity.main(['fidelity'])


if __name__ == '__main__':
  absltest.main()


class MerlinClaimsTest(absltest.TestCase):

  def test_merlin_claims_read_their_runs(self):
    from recovr_jax.analysis import merlin_claims  # pylint: disable=g-import-not-at-top
    # MERLIN's target rank halves every round at alpha 0.8; at alpha 0.2 it
    # is better at round 1 and worse again from round 2 on.
    base = RNG.integers(20, 60, (S, 1))
    better = np.maximum(base // 2 ** np.arange(T + 1), 1)
    drift = better.copy()
    found = RNG.random(S) < 0.5  # found at rounds 1-2, then lost (drift)
    drift[found, 1:3] = 1
    drift[:, 3:] = 30
    ev = claims.Evidence({'main': {
        'main': _run({'merlin': better}),
        merlin_claims.LOW_ALPHA: _run({'merlin': drift})}}, 500)
    rows = {r['key']: r for r in claims.evaluate(merlin_claims.CLAIMS, ev)}
    self.assertEqual(set(rows), {c.key for c in merlin_claims.CLAIMS})
    for key in ('improves_recall_at_1', 'rank_improves_each_round',
                'low_alpha_helps_early', 'low_alpha_drifts'):
      self.assertEqual(rows[key]['verdict'], 'reproduced', key)
    ranks = rows['rank_improves_each_round']['checks']
    self.assertLen(ranks, T)
    self.assertEqual(ranks[0]['unit'], 'rank')
    self.assertAlmostEqual(ranks[0]['value'],
                           float(np.mean(better[:, 0] - better[:, 1])))
    # Without the alpha 0.2 run its claims are not run, not guessed.
    ev = claims.Evidence({'main': {'main': _run({'merlin': better})}}, 200)
    with self.assertRaises(claims.MissingRows):
      claims.evaluate(merlin_claims.CLAIMS, ev)

  def test_the_command_names_a_missing_run(self):
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top
    proc = subprocess.run(
        [sys.executable, '-m', 'experiments.evaluate.merlin_claims',
         '--runs_dir=/nonexistent/text_start'], capture_output=True,
        text=True, timeout=300)
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn('/nonexistent/text_start/merlin_alpha=0.8 does not exist',
                  proc.stderr)
