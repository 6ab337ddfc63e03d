"""One run as two processes on JAX's distributed runtime (gloo on CPU):
the outputs equal the one-process run's byte for byte, for the host and
the jitted driver; the launcher stops every process when one fails or is
killed, naming it, and the same command resumes from the saved batches."""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest

from tests.helpers import runs

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The runner tests' tiny world, as command-line flags.
TINY = [f'--{k}={v}' for k, v in runs.TINY.items()
        if not isinstance(v, bool)] + ['--nocompilation_cache', '--noplots',
                                       '--methods=recovr']


def _module(*args):
  return subprocess.run([sys.executable, '-m', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=900)


def _pid_of(process_id: int, marker: str) -> int:
  """The pid of ``experiments.run`` process ``process_id`` of the launch
  whose command line holds ``marker`` (its output directory)."""
  for proc in pathlib.Path('/proc').iterdir():
    try:
      cmd = (proc / 'cmdline').read_bytes().split(b'\0')
    except OSError:
      continue
    args = [a.decode(errors='replace') for a in cmd]
    if (f'--process_id={process_id}' in args
        and any(marker in a for a in args) and 'experiments.run' in args):
      return int(proc.name)
  raise AssertionError(f'no process {process_id} with {marker} running')


def _wait_for(path: pathlib.Path, text: str, proc, timeout=600):
  start = time.time()
  while time.time() - start < timeout:
    if path.exists() and text in path.read_text():
      return
    if proc.poll() is not None:
      raise AssertionError(f'the launch ended ({proc.returncode}) before '
                           f'{path} said {text!r}')
    time.sleep(0.05)
  raise AssertionError(f'{path} did not say {text!r} in {timeout} s')


class TwoProcessesTest(absltest.TestCase):

  def _one(self, root, simulation, **flags):
    # One process: in this one (run_main puts its cache in root/cache).
    runs.run_tiny(root / 'one', methods=['recovr'], simulation=simulation,
                      **flags)

  def _assert_equal_outputs(self, root, two='two'):
    for name in ('metrics.json', 'trajectories.jsonl', 'bootstrap.json'):
      self.assertEqual((root / 'one' / name).read_bytes(),
                       (root / two / name).read_bytes(), name)
    self.assertFalse((root / two / 'INCOMPLETE').exists())

  def test_two_processes_equal_one_jitted_with_and_without_split_gallery(self):
    # One test, one one-process run: the two launches compare with it.
    root = pathlib.Path(tempfile.mkdtemp())
    self._one(root, 'jit')
    two = _module('experiments.launch', '--num_processes=2', '--', *TINY,
                  '--simulation=jit', f'--cache_dir={root / "cache"}',
                  f'--output_dir={root / "two"}')
    self.assertEqual(two.returncode, 0, two.stderr[-3000:])
    self._assert_equal_outputs(root)
    # Every batch ran once, its sessions split over one mesh of both
    # processes' devices (process 0 writes to the launcher's output).
    log = two.stdout
    self.assertIn('jitted sessions over 2 devices of 2 processes', log)
    for b in (1, 2):
      self.assertIn(f'recovr batch {b} of 2 done on 2 processes', log)
    # The gallery's rows split over the two processes: the same outputs.
    split = _module('experiments.launch', '--num_processes=2', '--', *TINY,
                    '--simulation=jit', '--gallery_over_processes',
                    f'--cache_dir={root / "cache"}',
                    f'--output_dir={root / "split"}')
    self.assertEqual(split.returncode, 0, split.stderr[-3000:])
    self._assert_equal_outputs(root, 'split')
    self.assertIn("the gallery's rows split over 2 processes", split.stdout)

  def test_a_killed_process_is_named_and_the_same_command_resumes(self):
    # Host driver, 10 batches of one session: process 1 runs the odd ones
    # and is killed once its first is saved (4 of its batches are left, so
    # no process can have reached the outputs).
    root = pathlib.Path(tempfile.mkdtemp())
    self._one(root, 'host', batch_size=1)
    args = [sys.executable, '-m', 'experiments.launch', '--num_processes=2',
            '--', *[f for f in TINY if not f.startswith('--batch_size=')],
            '--batch_size=1', '--simulation=host',
            f'--cache_dir={root / "cache"}', f'--output_dir={root / "two"}']
    log = root / 'two' / 'process_1.log'
    with open(root / 'launch.out', 'w') as out, \
        open(root / 'launch.err', 'w') as err:
      launch = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=err)
      try:
        _wait_for(log, 'process 1: recovr batch 2 of 10 done', launch)
        os.kill(_pid_of(1, str(root / 'two')), signal.SIGKILL)
        launch.wait(timeout=300)
      finally:
        if launch.poll() is None:
          launch.kill()
    self.assertEqual(launch.returncode, 128 + 9)
    self.assertIn('process 1 of 2 was killed by signal 9 (SIGKILL)',
                  (root / 'launch.err').read_text())
    self.assertFalse((root / 'two' / 'metrics.json').exists())
    # The same command resumes: process 1 finds its saved batch.
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                           timeout=900)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertIn('process 1: recovr batch 2 of 10 found saved',
                  log.read_text())
    self._assert_equal_outputs(root)


class LaunchTest(absltest.TestCase):

  def test_a_failing_process_stops_the_others_and_is_named(self):
    start = time.time()
    out = pathlib.Path(tempfile.mkdtemp())
    proc = _module('experiments.launch', '--num_processes=3',
                   '--module=tests.helpers.launch_fake', '--',
                   f'--output_dir={out}')
    self.assertEqual(proc.returncode, 3, proc.stderr)
    self.assertIn('process 1 of 3 exited with code 3', proc.stderr)
    self.assertIn('process_1.log', proc.stderr)
    self.assertLess(time.time() - start, 60)  # the others did not sleep on

  def test_the_logs_go_where_a_flagfile_says_the_run_writes(self):
    root = pathlib.Path(tempfile.mkdtemp())
    inner = root / 'inner'
    inner.write_text(f'# where the run writes\n--output_dir={root / "out"}\n')
    outer = root / 'outer'
    outer.write_text(f'--seed=3\n--flagfile={inner}\n')
    proc = _module('experiments.launch', '--num_processes=2',
                   '--module=tests.helpers.launch_fake', '--',
                   f'--flagfile={outer}')
    self.assertEqual(proc.returncode, 3, proc.stderr)
    self.assertIn(str(root / 'out' / 'process_1.log'), proc.stderr)
    self.assertTrue((root / 'out' / 'process_1.log').is_file())
    # The same written as two words after the flagfile: that one wins, for
    # the logs as for the run.
    proc = _module('experiments.launch', '--num_processes=2',
                   '--module=tests.helpers.launch_fake', '--',
                   f'--flagfile={outer}', '--output_dir', str(root / 'two'))
    self.assertEqual(proc.returncode, 3, proc.stderr)
    self.assertIn(str(root / 'two' / 'process_1.log'), proc.stderr)
    self.assertTrue((root / 'two' / 'process_1.log').is_file())

  def test_a_coordinator_port_in_use_is_named_not_a_crash(self):
    from recovr_jax.run import distributed  # pylint: disable=g-import-not-at-top
    with socket.socket() as held:
      held.bind(('127.0.0.1', 0))
      held.listen()
      port = held.getsockname()[1]
      with self.assertRaisesRegex(ValueError, f'127.0.0.1:{port}: port '
                                  f'{port} is already in use'):
        distributed.check_port(f'127.0.0.1:{port}')
    with self.assertRaisesRegex(ValueError, 'expected HOST:PORT'):
      distributed.check_port('localhost')

  def _by_hand(self, root, *per_process):
    """Processes of one run started by hand, each with its own extra
    flags (``per_process``), on a free coordinator port."""
    with socket.socket() as s:
      s.bind(('127.0.0.1', 0))
      port = s.getsockname()[1]
    return [subprocess.Popen(
        [sys.executable, '-m', 'experiments.run', *TINY,
         f'--cache_dir={root / "cache"}',
         f'--coordinator_address=127.0.0.1:{port}', f'--process_id={pid}',
         *extra], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
            for pid, extra in enumerate(per_process)]

  def test_processes_started_with_different_counts_refuse_together(self):
    root = pathlib.Path(tempfile.mkdtemp())
    procs = self._by_hand(
        root, *[(f'--output_dir={root / "run"}', f'--num_processes={count}')
                for count in (2, 3)])
    for proc in procs:
      out, _ = proc.communicate(timeout=300)
      self.assertEqual(proc.returncode, 1, out[-2000:])
      self.assertIn('the processes were started with different '
                    '--num_processes (2, 3; 2 joined)', out)
    self.assertFalse((root / 'run' / 'batches').exists())

  def test_processes_started_with_different_flags_name_them(self):
    root = pathlib.Path(tempfile.mkdtemp())
    procs = self._by_hand(
        root, *[(f'--output_dir={root / out}', '--num_processes=2')
                for out in ('run', 'elsewhere')])
    for proc in procs:
      out, _ = proc.communicate(timeout=300)
      self.assertEqual(proc.returncode, 1, out[-2000:])
      self.assertIn('they differ in --output_dir)', out)

  def test_the_launcher_sets_the_process_flags_itself(self):
    proc = _module('experiments.launch', '--num_processes=2', '--',
                   '--process_id=1')
    self.assertEqual(proc.returncode, 1)
    self.assertIn('the launcher sets it for each process', proc.stderr)


if __name__ == '__main__':
  absltest.main()
