r"""Starts one run as N local processes (a laptop, one big machine).

    python -m experiments.launch --num_processes=2 -- \
        --flagfile=experiments/flagfiles/quickstart --output_dir=out/two

Runs ``python -m experiments.run <flags after -->`` N times with
``--coordinator_address=127.0.0.1:<a free port> --num_processes=N
--process_id=i``; process 0's output is shown, the others' go to
``<output_dir>/process_<i>.log``. SIGINT and SIGTERM are passed on to every
process. When one exits with an error the others are stopped and the
launcher exits with that error, naming the process; the same command
resumes from the batches saved. On a cluster, start ``experiments.run``
once per machine with the same flags and ``--coordinator_address`` of
process 0 (or ``auto`` where JAX detects the cluster itself, as on SLURM;
docs/runner.md has a SLURM script).
"""

import itertools
import pathlib
import signal
import socket
import subprocess
import sys
import time

from absl import app
from absl import flags

from experiments.common import cli

_NUM = flags.DEFINE_integer('num_processes', 2, 'Local processes to start.')
_MODULE = flags.DEFINE_string('module', 'experiments.run',
                              'The entry point every process runs.')


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _output_dir(args) -> pathlib.Path:
  """Where the processes write: the last --output_dir given, on the command
  line or in a flagfile (the logs go beside the run's outputs)."""
  try:  # absl's own expansion of --flagfile (nested files, comments)
    expanded = flags.FLAGS.read_flags_from_files(list(args), force_gnu=True)
  except flags.Error as e:
    raise app.UsageError(str(e)) from e
  found = 'out/run'  # experiments.run's default
  for i, a in enumerate(expanded):
    name, eq, value = a.lstrip('-').partition('=')
    if not a.startswith('-') or name != 'output_dir':
      continue
    if eq:
      found = value
    elif i + 1 < len(expanded):  # --output_dir DIR, as absl reads it too
      found = expanded[i + 1]
  return pathlib.Path(found)


def launch(num: int, args, module: str = 'experiments.run') -> int:
  """Starts ``num`` processes of ``module`` with ``args``; returns the exit
  code (the first failing process's, 0 when all succeed)."""
  port = free_port()
  logs = _output_dir(args)
  logs.mkdir(parents=True, exist_ok=True)
  procs, files = [], []
  for i in range(num):
    cmd = [sys.executable, '-m', module, *args,
           f'--coordinator_address=127.0.0.1:{port}',
           f'--num_processes={num}', f'--process_id={i}']
    out = None
    if i:
      out = open(logs / f'process_{i}.log', 'w')  # pylint: disable=consider-using-with
      files.append(out)
    procs.append(subprocess.Popen(cmd, stdout=out, stderr=out))

  def forward(signum, frame):
    del frame
    for p in procs:
      if p.poll() is None:
        p.send_signal(signum)

  old = {s: signal.signal(s, forward) for s in (signal.SIGINT,
                                                signal.SIGTERM)}
  try:
    seen = {}  # process -> (poll when it was first seen failed, its code)
    for tick in itertools.count():
      codes = [p.poll() for p in procs]
      for i, c in enumerate(codes):
        if c not in (None, 0) and i not in seen:
          seen[i] = (tick, c)
      if seen:
        # The first to fail; among those seen together, one killed by a
        # signal (the others' errors are then its consequences).
        i = min(seen, key=lambda j: (seen[j][0], seen[j][1] >= 0, j))
        code = seen[i][1]
        for p in procs:
          if p.poll() is None:
            p.terminate()
        for p in procs:
          try:
            p.wait(timeout=30)
          except subprocess.TimeoutExpired:
            p.kill()
        where = 'above' if i == 0 else str(logs / f'process_{i}.log')
        how = (f'was killed by signal {-code} ({signal.Signals(-code).name})'
               if code < 0 else f'exited with code {code}')
        print(f'experiments.launch: process {i} of {num} {how} (its output: '
              f'{where}); the others were stopped. The same command resumes '
              'from the saved batches.', file=sys.stderr, flush=True)
        return code if code > 0 else 128 - code
      if all(c == 0 for c in codes):
        return 0
      time.sleep(0.2)
  finally:
    for s, handler in old.items():
      signal.signal(s, handler)
    for f in files:
      f.close()


def main(argv):
  if _NUM.value < 1:
    raise app.UsageError(f'--num_processes must be >= 1, got {_NUM.value}')
  args = argv[1:]
  if args and args[0] == '--':
    args = args[1:]
  for a in args:
    if a.split('=', 1)[0] in ('--coordinator_address', '--num_processes',
                              '--process_id'):
      raise app.UsageError(f'{a}: the launcher sets it for each process')
  code = launch(_NUM.value, args, _MODULE.value)
  if code:
    sys.exit(code)


if __name__ == '__main__':
  cli.run(main)
