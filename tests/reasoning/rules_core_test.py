"""The rules reasoning's one core gives the same decisions under NumPy (the
host reasoner) and traced JAX (ReCoVR's jitted form)."""

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import demotion
from recovr_jax.reasoning import rules_core

A, V = 7, 6


def _turn(rng):
  row = lambda p: np.where(rng.random(A) < p, rng.integers(0, V, A), -1)
  return dict(mentions=row(0.3), shown=row(0.8), keep=row(0.3),
              shown_avoided=rng.random(A) < 0.2,
              negative=bool(rng.random() < 0.3), asked=int(rng.integers(-1, A)),
              label=int(rng.integers(0, 3)))


def _decide(t, xp):
  named, changes, num_changes, relative = rules_core.read(
      t['mentions'], t['shown'], t['negative'], xp)
  answers = rules_core.answers(named, t['asked'], xp)
  keep, rejected = rules_core.reflect(t['mentions'], t['shown'], changes,
                                      t['keep'], xp)
  return dict(
      changes=changes, relative=relative,
      wanted=rules_core.wanted(t['mentions'], t['shown'], t['keep'],
                               t['shown_avoided'], relative, xp),
      rules=rules_core.sigma('rules', relative, num_changes, xp=xp),
      paper=rules_core.sigma('paper', relative, num_changes, answers, xp=xp),
      frames=rules_core.sigma('frames', relative, num_changes,
                              label=t['label'], xp=xp),
      keep=keep, rejected=rejected)


class RulesCoreTest(absltest.TestCase):

  def test_numpy_and_traced_jax_agree(self):
    rng = np.random.default_rng(0)
    traced = jax.jit(lambda t: _decide(t, jnp))
    for _ in range(200):
      t = _turn(rng)
      host = _decide(t, np)
      jitted = traced({k: jnp.asarray(v) for k, v in t.items()})
      for key in host:
        np.testing.assert_array_equal(np.asarray(jitted[key]), host[key],
                                      err_msg=key)

  def test_the_rules(self):
    # "make it red" of a blue video: relative, one change: pos; the blue
    # is rejected, the red kept; a rejection marker makes it neg.
    mentions = np.array([2, -1, -1])
    shown = np.array([1, 3, -1])
    named, changes, n, relative = rules_core.read(mentions, shown, False)
    self.assertTrue(relative)
    self.assertEqual(int(rules_core.sigma('rules', relative, n)),
                     demotion.SIGMA_POS)
    keep, rejected = rules_core.reflect(mentions, shown, changes,
                                        np.array([-1, -1, 4]))
    chex.assert_trees_all_equal((keep, rejected),
                                (np.array([2, -1, 4]), np.array([1, -1, -1])))
    self.assertTrue(rules_core.answers(named, 0))
    self.assertFalse(rules_core.answers(named, 1))
    *_, relative = rules_core.read(mentions, shown, True)
    self.assertEqual(int(rules_core.sigma('rules', relative, n)),
                     demotion.SIGMA_NEG)
    with self.assertRaisesRegex(ValueError, 'sigma rule must be one of'):
      rules_core.sigma('nope', relative, n)

  def test_most_uncertain_ties_and_kept(self):
    # Attributes 0 and 2 split 2/2, attribute 1 is unanimous: the first
    # of the tie; kept attributes are skipped; all kept gives 0.
    values = np.array([[0, 1, 3], [0, 1, 4], [1, 1, 3], [1, 1, 4]])
    none = np.zeros(3, bool)
    for xp in (np, jnp):
      self.assertEqual(int(rules_core.most_uncertain(
          xp.asarray(values), xp.asarray(none), 5, xp)), 0)
      self.assertEqual(int(rules_core.most_uncertain(
          xp.asarray(values), xp.asarray([True, False, False]), 5, xp)), 2)
      self.assertEqual(int(rules_core.most_uncertain(
          xp.asarray(values), xp.asarray([True, True, True]), 5, xp)), 0)


if __name__ == '__main__':
  absltest.main()
