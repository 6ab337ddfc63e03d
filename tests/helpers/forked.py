"""Entry points run as ``python -m`` runs them, each in a process forked
from one that has already imported JAX, Flax, transformers and the
library (their import is about 3 s of every fresh process): for the tests
that start many entry points only to see them refuse.

``run(module, *args)`` returns a ``subprocess.CompletedProcess`` as
``subprocess.run([sys.executable, '-m', module, *args], cwd=ROOT,
capture_output=True, text=True)`` would. The forked process has the
environment of this one, runs ``module`` as ``__main__`` with
``sys.argv`` set, and exits with the code ``python -m`` would (a
``SystemExit`` message on stderr and 1, a traceback and 1; one that
starts itself again with ``sys.orig_argv`` starts the module). The server
imports no module that defines a flag, so each entry point defines its own
flags as in a fresh process. Tests of what a fresh process imports (the
runner's early checks) start one themselves."""

import atexit
import json
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import threading

ROOT = pathlib.Path(__file__).resolve().parents[2]

_SERVER = textwrap.dedent("""
    import json, os, runpy, sys, traceback
    import numpy, jax, jax.numpy, flax, optax, transformers
    from recovr_jax.run import runner
    print('ready', flush=True)
    for line in sys.stdin:
      request = json.loads(line)
      pid = os.fork()
      if pid:
        status = os.waitpid(pid, 0)[1]
        print(os.waitstatus_to_exitcode(status), flush=True)
        continue
      null = os.open(os.devnull, os.O_RDONLY)
      os.dup2(null, 0)
      for fd, path in ((1, request['stdout']), (2, request['stderr'])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
      sys.stdin = open(os.devnull)
      sys.argv = [request['module'], *request['args']]
      # A process that starts itself again (bench_common.full_speed_blas)
      # starts the module, not this server.
      sys.orig_argv = [sys.executable, '-m', *sys.argv]
      code = 0
      try:
        runpy.run_module(request['module'], run_name='__main__',
                         alter_sys=True)
      except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
          code = e.code or 0
        else:
          print(e.code, file=sys.stderr)
          code = 1
      except BaseException:
        traceback.print_exc()
        code = 1
      sys.stdout.flush()
      sys.stderr.flush()
      raise SystemExit(code)
""")

_server = []
_lock = threading.Lock()


def _start():
  proc = subprocess.Popen([sys.executable, '-c', _SERVER], cwd=ROOT,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
  if proc.stdout.readline().strip() != 'ready':
    raise RuntimeError('the fork server did not start')

  def stop():
    proc.stdin.close()
    proc.wait(timeout=60)
  atexit.register(stop)
  return proc


def run(module: str, *args: str) -> subprocess.CompletedProcess:
  """``python -m module *args`` in ``ROOT``, forked (see above)."""
  with _lock:
    if not _server or _server[0].poll() is not None:
      _server[:] = [_start()]
    server = _server[0]
    with tempfile.TemporaryDirectory() as folder:
      out, err = pathlib.Path(folder, 'out'), pathlib.Path(folder, 'err')
      server.stdin.write(json.dumps({
          'module': module, 'args': list(args), 'stdout': str(out),
          'stderr': str(err)}) + '\n')
      server.stdin.flush()
      code = server.stdout.readline()
      if not code:
        raise RuntimeError(f'the fork server ended running {module}')
      return subprocess.CompletedProcess(
          [sys.executable, '-m', module, *args], int(code),
          out.read_text() if out.exists() else '',
          err.read_text() if err.exists() else '')
