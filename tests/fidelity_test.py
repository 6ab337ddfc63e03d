"""experiments/fidelity.py: the paper's claims read off a run's outputs."""

from absl import app
from absl.testing import absltest

from experiments import fidelity


def _metrics(r1_by_method):
  return {m: {'R@1': list(v)} for m, v in r1_by_method.items()}


def _modes(recovery, improvement, stagnation):
  return {'recovery': {'rate': recovery},
          'improvement': {'rate': improvement},
          'stagnation': {'rate': stagnation}}


def _paper_like():
  """A run shaped like the paper's tables: every claim holds."""
  turns = lambda start, step: [0.3] + [start + step * t for t in range(5)]
  r1 = {'recovr': turns(0.60, 0.06), 'ivr': turns(0.50, 0.01),
        'merlin': turns(0.40, 0.01), 'umivr': turns(0.52, 0.01),
        'history_rewrite': turns(0.45, 0.0),
        'intent_only': turns(0.50, 0.02), 'no_rankcap': turns(0.52, 0.02),
        'no_reflection': turns(0.56, 0.04), 'covr_only': turns(0.55, 0.03),
        't2v_only': turns(0.53, 0.03), 'static_rrf': turns(0.61, 0.01),
        'uniform_rrf': turns(0.58, 0.05), 'penalty_rrf': turns(0.55, 0.05),
        'sim_max': turns(0.50, 0.03), 'sim_sum': turns(0.55, 0.04),
        'ivr_rankcap': turns(0.55, 0.015), 'umivr_rankcap': turns(0.58, 0.02)}
  failures = {'recovr': _modes(0.9, 0.8, 0.2), 'umivr': _modes(0.3, 0.45, 0.55)}
  degraded = {}
  for setting, top, utop in (
      ('noise_rate=0.0', 0.80, 0.45), ('noise_rate=0.1', 0.795, 0.44),
      ('noise_rate=0.2', 0.79, 0.43), ('drop_rate=0.3', 0.79, 0.42),
      ('user_policy=modify_only', 0.70, 0.40),
      ('user_policy=rewrite_only', 0.85, 0.50)):
    degraded[setting] = _metrics({'recovr': [0.3, 0.5, 0.6, 0.7, 0.75, top],
                                  'umivr': [0.3, 0.4, 0.4, 0.4, 0.4, utop]})
  firing = {'recovr': {'fired': {'rate': 0.49}, 'improved': {'rate': 0.77}}}
  return _metrics(r1), failures, degraded, firing


class FidelityTest(absltest.TestCase):

  def test_every_claim_holds_on_a_paper_like_run(self):
    rows = fidelity.claims(*_paper_like())
    self.assertLen(rows, 17)
    self.assertEqual([r[0] for r in rows if not r[3]], [])

  def test_claims_fail_when_the_direction_is_reversed(self):
    metrics, failures, degraded, firing = _paper_like()
    failures['recovr']['stagnation']['rate'] = 0.9
    metrics['umivr']['R@1'][5] = 0.99  # the margin no longer widens
    degraded['user_policy=modify_only']['recovr']['R@1'][5] = 0.9
    firing['recovr']['improved']['rate'] = 0.4
    failed = [r[0] for r in fidelity.claims(metrics, failures, degraded,
                                            firing) if not r[3]]
    # + Table 3's CoVR-only row vs UMIVR at T5 and Table 6's UMIVR gain.
    self.assertLen(failed, 6)
    self.assertIn('ReCoVR stagnates less than UMIVR', failed)
    self.assertIn('ReCoVR at turn 5: modify-only < clean (mixed) < '
                  'rewrite-only', failed)

  def test_missing_rows_are_named(self):
    metrics, failures, degraded, firing = _paper_like()
    del metrics['sim_sum']
    with self.assertRaisesRegex(app.UsageError, 'metrics.json lacks sim_sum'):
      fidelity.claims(metrics, failures, degraded, firing)
    metrics, failures, degraded, firing = _paper_like()
    del degraded['drop_rate=0.3']
    with self.assertRaisesRegex(app.UsageError, 'degraded run lacks '
                                'drop_rate=0.3'):
      fidelity.claims(metrics, failures, degraded, firing)
    with self.assertRaisesRegex(app.UsageError, 'rank_cap_firing.json lacks '
                                'recovr'):
      fidelity.claims(*_paper_like()[:3], {})

  def test_markdown(self):
    table = fidelity.markdown(fidelity.claims(*_paper_like()))
    self.assertEqual(table.count('| reproduced |'), 17)


if __name__ == '__main__':
  absltest.main()
