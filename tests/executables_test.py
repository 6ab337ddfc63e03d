"""Tests for recovr_jax.executables: ``executables.jit`` programs kept on
disk under a run's compilation cache, called by later processes without
tracing."""

import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from recovr_jax import executables
from tests.helpers import runs

_ROOT = pathlib.Path(__file__).resolve().parents[1]

# One process: three calls of one ``executables.jit`` function (two of one
# config structure that differ only in the shape of an argument the program does
# not read, so their lowered texts are equal), under the compilation cache
# at argv[1], for every line read from stdin (the function made anew, the
# process's loaded programs forgotten: as a later process would); prints
# how many calls traced and the outputs.
_SCRIPT = textwrap.dedent("""
    import dataclasses, json, sys
    import jax
    jax.config.update('jax_compilation_cache_dir', sys.argv[1])
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
    import jax.numpy as jnp
    import numpy as np
    from recovr_jax import config_pytree
    from recovr_jax import executables
    executables.keep_in(sys.argv[1] + '/executables')
    if len(sys.argv) > 2:  # as JAX does for a program it cannot serialize
      def refuse(compiled):
        raise NotImplementedError('serialize_executables with const_args')
      executables.serialize_executable.serialize = refuse

    @config_pytree.register
    @dataclasses.dataclass(frozen=True)
    class Toy:
      scale: float = config_pytree.number(2.0)
      mode: str = 'a'

    for _ in sys.stdin:
      executables._loaded.clear()
      traced = []

      def fn(toy, x, unused, *, n):
        traced.append(x.shape)
        y = jnp.sort(jnp.pad(x * toy.scale, (1, 2)) * -1.0)[:n]
        return {'y': y + (1.0 if toy.mode == 'a' else 2.0)}

      g = executables.jit(fn, static_argnames=('n',))
      outs = [g(Toy(), jnp.arange(5.0), np.zeros(3, np.float32), n=4),
              g(Toy(3.0), jnp.arange(5.0), np.zeros(7, np.float32), n=4),
              g(Toy(mode='b'), jnp.arange(6.0), np.zeros(3, np.float32), n=2)]
      print(json.dumps({'traced': len(traced),
                        'outs': [np.asarray(o['y']).tolist() for o in outs]}),
            flush=True)
""")


def _expected():
  def one(scale, mode, x, n):
    y = np.sort(np.pad(np.asarray(x, np.float32) * scale, (1, 2)) * -1.0)
    return (y[:n] + (1.0 if mode == 'a' else 2.0)).tolist()
  return [one(2.0, 'a', np.arange(5.0), 4), one(3.0, 'a', np.arange(5.0), 4),
          one(2.0, 'b', np.arange(6.0), 2)]


class KeptExecutablesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # This test's own secret (the kept programs' digests are signed with it).
    self.key = pathlib.Path(self.create_tempdir().full_path) / 'k' / 'key'

  def _start(self, cache, *extra, xla_flags=None, key=None):
    """A process of ``_SCRIPT``: ``calls()`` makes its three calls and
    returns how many traced; ``errors()`` what it logged since the last
    ``errors()``. ``key``: its key file (default: the test's)."""
    env = dict(os.environ, PYTHONPATH=str(_ROOT), JAX_PLATFORMS='cpu',
               RECOVR_JAX_KEY_FILE=str(key or self.key))
    if xla_flags is not None:
      env['XLA_FLAGS'] = xla_flags
    path = pathlib.Path(self.create_tempdir().full_path) / 'stderr'
    with open(path, 'w') as err:
      proc = subprocess.Popen(
          [sys.executable, '-c', _SCRIPT, str(cache), *extra],
          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
          text=True, env=env, cwd=_ROOT)
    log = open(path)  # pylint: disable=consider-using-with

    def close():
      proc.stdin.close()
      proc.wait(timeout=60)
      proc.stdout.close()
      log.close()
    self.addCleanup(close)

    def calls():
      proc.stdin.write('call\n')
      proc.stdin.flush()
      line = proc.stdout.readline()
      if not line:
        log.seek(0)
        self.fail(f'the process ended: {log.read()[-3000:]}')
      result = json.loads(line)
      self.assertEqual(result['outs'], _expected())
      return result['traced']

    return calls, log.read

  def _run(self, cache, *extra, xla_flags=None, key=None):
    """One process's three calls: how many traced."""
    calls, _ = self._start(cache, *extra, xla_flags=xla_flags, key=key)
    return calls()

  def test_a_digest_needs_the_users_secret(self):
    cache = pathlib.Path(self.create_tempdir().full_path) / 'xla'
    kept = cache / 'executables'
    self.assertEqual(self._run(cache), 3)
    self.assertEqual(self.key.stat().st_mode & 0o777, 0o600)
    calls, errors = self._start(cache)
    self.assertEqual(calls(), 0)
    # A program replaced and its digest rewritten as anyone could (the
    # unkeyed SHA-256 of the program's key and the bytes): not loaded.
    path = sorted(kept.glob('*.pkl'))[0]
    program = path.stem
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 1
    path.write_bytes(bytes(content))
    (kept / f'{program}.digest').write_text(
        executables._unkeyed_digest(program, bytes(content)))  # pylint: disable=protected-access
    self.assertEqual(calls(), 1)
    self.assertEqual(calls(), 0)
    # Signed with another secret (a cache that travelled): none is loaded;
    # each is compiled afresh and replaced, with a warning.
    other = pathlib.Path(self.create_tempdir().full_path) / 'other'
    calls, errors = self._start(cache, key=other)
    self.assertEqual(calls(), 3)
    self.assertIn('signed with another user', errors())
    self.assertEqual(calls(), 0)
    # The first secret's process now finds the other's signatures.
    self.assertEqual(self._run(cache), 3)
    # A key file others may read: nothing kept or loaded, with a warning.
    self.key.chmod(0o644)
    calls, errors = self._start(cache)
    self.assertEqual(calls(), 3)
    self.assertEqual(calls(), 3)
    self.assertIn('readable or writable by others', errors())

  def test_a_later_process_calls_the_kept_programs_without_tracing(self):
    cache = pathlib.Path(self.create_tempdir().full_path) / 'xla'
    kept = cache / 'executables'
    self.assertEqual(self._run(cache), 3)  # compiled and kept
    # One program file per call (each of its own types) and a name each.
    self.assertLen(list(kept.glob('*.pkl')), 3)
    self.assertLen(list(kept.glob('*.program')), 3)
    self.assertLen(list(kept.glob('*.digest')), 3)
    # A later process: loaded, nothing traced. It then makes the calls again
    # after each change below, with the programs it loaded forgotten.
    calls, errors = self._start(cache)
    self.assertEqual(calls(), 0)
    # A byte changed, its digest kept: not unpickled; compiled afresh and
    # replaced, with a warning naming the file.
    path = sorted(kept.glob('*.pkl'))[0]
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 1
    path.write_bytes(bytes(content))
    errors()
    self.assertEqual(calls(), 1)
    self.assertIn(f'{path} does not match the digest kept beside it',
                  errors())
    self.assertEqual(calls(), 0)
    # Files without their digest (kept before digests were) are compiled
    # afresh and kept with one.
    for digest in kept.glob('*.digest'):
      digest.unlink()
    self.assertEqual(calls(), 3)
    self.assertLen(list(kept.glob('*.digest')), 3)
    self.assertEqual(calls(), 0)
    # Files cut short are compiled again and rewritten.
    for path in kept.glob('*.pkl'):
      path.write_bytes(path.read_bytes()[:100])
    self.assertEqual(calls(), 3)
    self.assertEqual(calls(), 0)
    # Whole files that fail to load (as one kept by another CUDA runtime
    # or jaxlib would) are compiled afresh and replaced too.
    for path in kept.glob('*.pkl'):
      path.write_bytes(pickle.dumps((b'not an executable', None, None)))
    self.assertEqual(calls(), 3)
    self.assertEqual(calls(), 0)
    # Files that hold another call's program (planted, or mixed up) are
    # not called with these arguments: compiled afresh and kept again.
    files = sorted(kept.glob('*.pkl'))
    contents = [p.read_bytes() for p in files]
    for path, content in zip(files, contents[1:] + contents[:1]):
      path.write_bytes(content)
    self.assertEqual(calls(), 3)
    self.assertEqual(calls(), 0)
    # A folder another user may write: its programs are not loaded (a kept
    # program is a pickle), with a warning naming it.
    kept.chmod(0o777)
    self.assertEqual(calls(), 3)
    kept.chmod(0o755)
    self.assertEqual(calls(), 0)
    # Without its files, but with JAX's cache beside them (whose copies
    # of an executable cannot be serialized on CPU), it compiles afresh
    # and keeps them again; a third process loads them.
    for path in kept.iterdir():
      path.unlink()
    self.assertEqual(calls(), 3)
    self.assertEqual(self._run(cache), 0)

  def test_programs_are_keyed_by_the_backend_and_its_runtime(self):
    machine = executables._machine().splitlines()[1]  # pylint: disable=protected-access
    self.assertIn("'cpu'", machine)  # the backend and XLA's platform version

  def test_a_process_with_several_devices_loads_onto_its_first(self):
    # --session_shards needs several CPU devices; the programs it keeps
    # run on the first (loaded onto every device, a call failed: "Expected
    # args to execute_sharded_on_local_devices to have 2 shards").
    cache = pathlib.Path(self.create_tempdir().full_path) / 'xla'
    two = '--xla_force_host_platform_device_count=2'
    self.assertEqual(self._run(cache, xla_flags=two), 3)
    self.assertEqual(self._run(cache, xla_flags=two), 0)

  def test_a_program_jax_cannot_serialize_is_jitted_as_before(self):
    cache = pathlib.Path(self.create_tempdir().full_path) / 'xla'
    kept = cache / 'executables'
    self.assertEqual(self._run(cache, 'unserializable'), 3)
    self.assertEmpty(list(kept.glob('*.pkl')))
    self.assertEqual({p.read_text() for p in kept.glob('*.program')},
                     {executables._UNKEPT})  # pylint: disable=protected-access
    self.assertEqual(self._run(cache), 3)  # traced, through JAX's cache
    self.assertEmpty(list(kept.glob('*.pkl')))

  def test_a_jitted_run_again_traces_nothing_and_writes_the_same(self):
    # The runner's programs (ReCoVR on the world's face), kept by a first
    # run and called by a second; JAX logs each function it traces.
    tmp = pathlib.Path(self.create_tempdir().full_path)
    runs.seed_cache(tmp / 'cache')  # the gallery and texts of earlier runs
    env = dict(os.environ, PYTHONPATH=str(_ROOT), JAX_PLATFORMS='cpu',
               JAX_LOG_COMPILES='1')
    logs = []
    for name in ('first', 'second'):
      proc = subprocess.run(
          [sys.executable, '-m', 'experiments.run', '--benchmark=v1',
           '--num_test_triplets=12', '--num_train_triplets=20',
           '--gallery_size=300', '--num_sessions=6', '--batch_size=6',
           '--num_turns=2', '--bootstrap_resamples=50', '--noplots',
           '--simulation=jit', '--methods=recovr',
           f'--cache_dir={tmp / "cache"}', f'--output_dir={tmp / name}'],
          capture_output=True, text=True, env=env, cwd=_ROOT, timeout=600,
          check=False)
      self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
      logs.append(proc.stderr)
    traced = 'Finished tracing show_batch'  # kept by executables.jit
    self.assertIn(traced, logs[0])
    self.assertNotIn(traced, logs[1])
    self.assertNotEmpty(list((tmp / 'cache' / 'xla' / 'executables').glob(
        '*.pkl')))
    for output in ('metrics.json', 'trajectories.jsonl', 'ranks.csv'):
      self.assertEqual((tmp / 'first' / output).read_bytes(),
                       (tmp / 'second' / output).read_bytes(), output)

  def test_without_a_compilation_cache_it_jits_as_before(self):
    # (An in-process run of an earlier test on this worker may keep its
    # programs somewhere: not here.)
    self.addCleanup(executables.keep_in, executables.folder())
    executables.keep_in(None)
    self.assertIsNone(executables.folder())
    calls = []

    def fn(toy, x):
      calls.append(x.shape)
      return x * toy

    g = executables.jit(fn)
    np.testing.assert_allclose(g(2.0, jnp.arange(3.0)), [0.0, 2.0, 4.0])
    np.testing.assert_allclose(g(2.0, jnp.arange(3.0)), [0.0, 2.0, 4.0])
    self.assertLen(calls, 1)  # jax.jit's own cache
    self.assertEqual(g.compiled._cache_size(), 1)


if __name__ == '__main__':
  absltest.main()
