"""The sharded gallery equals the unsharded path, ties included.

The checks run in a subprocess with 8 fake CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=8``), because the test
process's JAX has already started with one.
"""

import os
import pathlib
import subprocess
import sys

from absl.testing import absltest
import numpy as np

from recovr_jax.core import sharding
from recovr_jax.drivers import jit_runner

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_checks():
  """Compares sharded and unsharded retrieval on several meshes."""
  import jax  # pylint: disable=g-import-not-at-top
  from recovr_jax import retrieve  # pylint: disable=g-import-not-at-top
  assert len(jax.devices()) == 8, jax.devices()
  rng = np.random.default_rng(0)
  for gallery_shards, session_shards in ((8, 1), (4, 2), (2, 4), (1, 8)):
    mesh = sharding.make_mesh(gallery_shards, session_shards)
    for n, b, k in ((101, 5, 10), (64, 8, 10), (7, 3, 10), (40, 2, 1)):
      # Small integers: exact scores, so ties are real ties.
      gallery = rng.integers(-2, 3, (n, 3)).astype(np.float32)
      queries = rng.integers(-2, 3, (b, 3)).astype(np.float32)
      exclude = rng.integers(-1, n, b).astype(np.int32)
      sharded, num_valid = sharding.shard_gallery(gallery, mesh)
      assert num_valid == n
      got = sharding.sharded_retrieve(queries, sharded, k, mesh=mesh,
                                      num_valid=num_valid, exclude=exclude,
                                      block_size=4)
      want = retrieve(queries, gallery, k, exclude=exclude, block_size=4)
      for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w),
                                      err_msg=f'{mesh.shape} n={n}')
  # Sessions split over devices: fusion, and whole jitted sessions (23
  # sessions on 4 shards: padded).
  import functools  # pylint: disable=g-import-not-at-top
  from recovr_jax import methods  # pylint: disable=g-import-not-at-top
  from recovr_jax.core import fusion  # pylint: disable=g-import-not-at-top
  from recovr_jax.protocol import ranking  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.user import simulated_user  # pylint: disable=g-import-not-at-top
  from tests.helpers import toy_world  # pylint: disable=g-import-not-at-top
  mesh = sharding.make_mesh(gallery_shards=2, session_shards=4)
  ids = np.stack([rng.permutation(50)[:30].reshape(2, 3, 5)
                  for _ in range(8)]).astype(np.int32)
  scores = -np.sort(-rng.random(ids.shape), -1).astype(np.float32)
  args = (ids, scores, np.ones((8, 2, 3), bool),
          ids[:, 0, 0, :2].copy(), np.full((8, 2), 3, np.int32))
  step = jax.vmap(functools.partial(fusion.fuse_with_rank_cap, num_ids=50))
  for g, w in zip(sharding.over_sessions(step, mesh)(*args), step(*args)):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
  _, env, jit_env = toy_world.env_for('sum')
  config = toy_world.jit_config(
      methods.make('recovr'), ranking.LoopConfig(
          num_turns=3, list_length=20, num_ids=len(env.gallery)),
      simulated_user.UserConfig(), 'sum')
  # Blocks of 32 rows (9 full blocks and 12 rows) so that the gallery's
  # rows can be split too: over 2 shards (5 blocks each, the last 4 real
  # plus the 12 rows) and 8 (2 blocks each: whole-padding shards), with
  # ReCoVR's avoid penalty and the reference rows read across them.
  ranking.BLOCK_SIZE = 32
  plain = jit_runner.run(jit_env, config, np.arange(23), seed=0)
  for mesh in (mesh, sharding.make_mesh(gallery_shards=8, session_shards=1)):
    split = jit_runner.run(jit_env, config, np.arange(23), seed=0, mesh=mesh)
    jax.tree.map(np.testing.assert_array_equal, split, plain)
  print('sharding checks passed')


def run_process_checks(port: int, process_id: int, devices: int):
  """One of two processes: each holds only its rows of a gallery with ties;
  the retrieval over the mesh of both processes' devices equals the
  unsharded one on each process."""
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}',
                             num_processes=2, process_id=process_id)
  from recovr_jax import retrieve  # pylint: disable=g-import-not-at-top
  assert len(jax.devices()) == 2 * devices, jax.devices()
  rng = np.random.default_rng(0)
  n, b, k = 1001, 6, 10
  # Small integers: exact scores, so ties are real ties.
  gallery = rng.integers(-2, 3, (n, 8)).astype(np.float32)
  queries = rng.integers(-2, 3, (b, 8)).astype(np.float32)
  exclude = rng.integers(-1, n, b).astype(np.int32)
  mesh = sharding.make_mesh(gallery_shards=2 * devices)
  start, stop = sharding.process_rows(n, mesh)
  assert (start, stop) == ((0, 501) if process_id == 0 else (501, 1001)) or (
      devices > 1), (start, stop)
  sharded, num_valid = sharding.shard_gallery_rows(gallery[start:stop], mesh,
                                                   n)
  ids, scores = sharding.sharded_retrieve(queries, sharded, k, mesh=mesh,
                                          num_valid=num_valid,
                                          exclude=exclude)
  want_ids, want_scores = retrieve(queries, gallery, k, exclude=exclude)
  np.testing.assert_array_equal(np.asarray(ids), np.asarray(want_ids))
  np.testing.assert_array_equal(np.asarray(scores), np.asarray(want_scores))
  try:
    sharding.shard_gallery_rows(gallery[:3], mesh, n)
  except ValueError as e:
    assert f'holds gallery rows [{start}, {stop})' in str(e), e
  else:
    raise AssertionError('wrong row count accepted')
  print(f'process {process_id}: rows [{start}, {stop}) checks passed')


class ShardingTest(absltest.TestCase):

  def test_sharded_equals_unsharded_on_8_cpu_devices(self):
    env = dict(os.environ, XLA_FLAGS=(
        os.environ.get('XLA_FLAGS', '') +
        ' --xla_force_host_platform_device_count=8').strip(),
               JAX_PLATFORMS='cpu')
    proc = subprocess.run(
        [sys.executable, '-c',
         'from tests.core.sharding_test import run_checks; run_checks()'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('sharding checks passed', proc.stdout)

  def test_a_gallery_split_over_two_processes(self):
    # Each process holds only its rows (one and two CPU devices each).
    import socket  # pylint: disable=g-import-not-at-top
    for devices in (1, 2):
      with socket.socket() as sock:  # a free port (experiments.launch's
        sock.bind(('127.0.0.1', 0))  # flags would clash with the runner's)
        port = sock.getsockname()[1]
      env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS=(
          os.environ.get('XLA_FLAGS', '') +
          f' --xla_force_host_platform_device_count={devices}').strip())
      procs = [subprocess.Popen(
          [sys.executable, '-c', 'from tests.core.sharding_test import '
           f'run_process_checks; run_process_checks({port}, {i}, {devices})'],
          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          text=True) for i in range(2)]
      for i, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertIn(f'process {i}: rows', out)
        self.assertIn('checks passed', out)

  def test_mesh_needs_enough_devices(self):
    with self.assertRaisesRegex(ValueError, 'needs 64 devices'):
      sharding.make_mesh(64)


if __name__ == '__main__':
  absltest.main()
