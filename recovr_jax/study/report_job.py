"""Table 4 built from the administration view: the study's report command
(``experiments.study_report`` with the server's own flags) in a child
process, one build at a time, so participants' requests are not slowed by
the simulated users it runs."""

import dataclasses
import pathlib
import subprocess
import threading
import time


@dataclasses.dataclass(frozen=True)
class Status:
  state: str            # 'none', 'running', 'done' or 'failed'
  since: str = ''       # when the last build started (UTC)
  seconds: float = 0.0  # how long it ran (so far)
  code: int | None = None   # its exit status once ended
  tail: str = ''        # the last lines of its output
  table: str = ''       # table4.md once written, else ''


class ReportJob:
  """``command`` writes ``<report_dir>/table4.md``; its output goes to
  ``<report_dir>/build.log``."""

  def __init__(self, command: list[str], report_dir):
    self.command = list(command)
    self.report_dir = pathlib.Path(report_dir)
    self._process = None
    self._started = 0.0
    self._ended = None
    self._lock = threading.Lock()

  @property
  def log(self) -> pathlib.Path:
    return self.report_dir / 'build.log'

  @property
  def table(self) -> pathlib.Path:
    return self.report_dir / 'table4.md'

  def start(self) -> bool:
    """Starts a build; False (nothing started) while one is running."""
    with self._lock:
      if self._process is not None and self._process.poll() is None:
        return False
      self.report_dir.mkdir(parents=True, exist_ok=True)
      with open(self.log, 'w') as log:  # the child keeps its own handle
        self._process = subprocess.Popen(  # pylint: disable=consider-using-with
            self.command, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
      self._started, self._ended = time.time(), None
      return True

  def status(self) -> Status:
    with self._lock:
      process = self._process
      table = self.table.read_text() if self.table.is_file() else ''
      if process is None:
        return Status('none', table=table)
      code = process.poll()
      if code is not None and self._ended is None:
        self._ended = time.time()
      since = time.strftime('%Y-%m-%d %H:%M:%S UTC',
                            time.gmtime(self._started))
      seconds = (self._ended or time.time()) - self._started
      tail = ''
      if self.log.is_file():
        tail = '\n'.join(self.log.read_text(errors='replace')
                         .splitlines()[-5:])
      state = 'running' if code is None else ('done' if code == 0
                                              else 'failed')
      return Status(state, since, round(seconds, 1), code, tail, table)
