"""The T2V ceiling beside a run's results, against a NumPy reference."""

from absl.testing import absltest
import numpy as np

from recovr_jax.protocol import environment
from recovr_jax.run import outputs


def _env(rng, n=40, d=8, q=25):
  gallery = rng.normal(size=(n, d)).astype(np.float32)
  gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
  noise = rng.normal(scale=0.8, size=(n, d)).astype(np.float32)
  # caption "c<i>" encodes near video i: a noisy caption of it.
  encode = lambda texts: np.stack([gallery[int(t[1:])] + noise[int(t[1:])]
                                   for t in texts])
  reference = rng.integers(n, size=q)
  target = (reference + 1 + rng.integers(n - 1, size=q)) % n
  env = environment.Environment(
      gallery=gallery, captions=tuple(f'c{i}' for i in range(n)),
      attributes=None, reference=reference, target=target,
      modification=('x',) * q, encode_text=encode, compose=None)
  return env, encode


class CeilingTest(absltest.TestCase):

  def test_recall_of_the_targets_own_caption(self):
    env, encode = _env(np.random.default_rng(0))
    sessions = np.arange(20)
    got = outputs.t2v_ceiling(env, {'caption': env.captions}, sessions, 10,
                              200, 0)['caption']
    targets, refs = env.target[sessions], env.reference[sessions]
    scores = encode([f'c{t}' for t in targets]) @ env.gallery.T
    scores[np.arange(len(sessions)), refs] = -np.inf  # the reference is out
    order = np.argsort(-scores, axis=1, kind='stable')
    rank = np.argmax(order == targets[:, None], axis=1) + 1
    for k in (1, 5, 10):
      self.assertAlmostEqual(got[f'R@{k}']['value'], np.mean(rank <= k),
                             places=6)
      self.assertLessEqual(got[f'R@{k}']['lower'], got[f'R@{k}']['value'])
      self.assertGreaterEqual(got[f'R@{k}']['upper'], got[f'R@{k}']['value'])
    self.assertIn('| caption | ', outputs.ceiling_markdown({'caption': got}))


if __name__ == '__main__':
  absltest.main()
