"""The run's matmul precisions: --retrieval_precision refused before any
work where the backend has no such matmul, --matmul_precision recorded,
harmless on a CPU, and part of a kept program's key."""

import json
import pathlib

from absl import app
from absl.testing import absltest
import jax
import jax.numpy as jnp

from recovr_jax import executables
from tests.helpers import runs


class PrecisionTest(absltest.TestCase):

  def test_a_precision_the_backend_lacks_is_refused_before_any_work(self):
    if jax.default_backend() != 'cpu':
      self.skipTest('XLA:CPU is the backend without TF32')
    out = pathlib.Path(self.create_tempdir().full_path) / 'out'
    with self.assertRaisesRegex(app.UsageError,
                                '--retrieval_precision=tf32: XLA on cpu has '
                                'no tf32 matmul; use highest or bf16x3'):
      runs.run_tiny(out, retrieval_precision='tf32')
    self.assertFalse(out.exists())  # refused before the folder was made

  def test_matmul_precision_recorded_and_harmless_on_a_cpu(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    metrics = {}
    for precision in ('highest', 'default'):
      out = root / precision
      self.assertIsNone(runs.run_tiny(out, methods=['recovr', 'ivr'],
                                      matmul_precision=precision))
      resolved = (out / 'resolved_config.json').read_text()
      self.assertIn(f'"matmul_precision": "{precision}"', resolved)
      metrics[precision] = json.loads((out / 'metrics.json').read_text())
    if jax.default_backend() == 'cpu':  # float32 either way
      self.assertEqual(metrics['highest'], metrics['default'])

  def test_a_kept_program_is_keyed_by_the_matmul_precision(self):
    def fn(x):
      return x @ x
    args = (jnp.ones((2, 2)),)
    leaves, tree = jax.tree.flatten((args, {}))
    types = tuple(jax.typeof(x) for x in leaves)
    keys = set()
    for precision in ('highest', 'default'):
      with jax.default_matmul_precision(precision):
        keys.add(executables._key(fn, {}, tree, types))
    self.assertLen(keys, 2)


if __name__ == '__main__':
  absltest.main()
