"""Where a run's wall time goes: exclusive seconds per part of the host loop.

A ``Profile`` is activated around a run (``with profile.active():``); code
marks its parts with ``with profiling.part('text encoding'):``, which costs
nothing when no profile is active. Parts nest and the time is exclusive: a
part's seconds exclude the parts opened inside it, so the parts of a run add
up to its wall time (the rest is reported as ``other``). JAX dispatches
asynchronously, so a part that starts device work blocks on its outputs
before it closes (``part(..., result)`` / ``sync``); the host loop converts
every output to NumPy at once anyway, so this moves no work between parts.
"""

import collections
import contextlib
import time

import jax

_ACTIVE = []  # the active profile, if any (a stack of one)

# The part that times the jitted drivers' turn programs, blocked on until
# their outputs are ready: the run's device time. Everything else in the
# wall time is the host's (``Profile.report``'s ``device_s`` / ``host_s``).
DEVICE = 'device programs'
# Loading a kept program, or compiling one, inside a device call: the
# host's work (``executables.find``), not the device's.
PROGRAMS = 'programs (load or compile)'


class Profile:
  """Exclusive seconds and call counts per part name."""

  def __init__(self):
    self.seconds = collections.Counter()
    self.calls = collections.Counter()
    self.counts = collections.Counter()   # ``count``: work done, by name
    self._open = []  # [name, start, seconds of nested parts]
    self._start = None
    self.wall = 0.0

  @contextlib.contextmanager
  def active(self):
    """Makes this the profile ``part`` records into, and times the whole."""
    if _ACTIVE:
      raise RuntimeError('a profile is already active')
    _ACTIVE.append(self)
    start = time.perf_counter()
    try:
      yield self
    finally:
      self.wall += time.perf_counter() - start
      _ACTIVE.pop()

  def _enter(self, name):
    self._open.append([name, time.perf_counter(), 0.0])

  def _exit(self):
    name, start, nested = self._open.pop()
    spent = time.perf_counter() - start
    self.seconds[name] += spent - nested
    self.calls[name] += 1
    if self._open:
      self._open[-1][2] += spent

  def report(self) -> dict:
    """``{'wall_s', 'device_s', 'host_s', 'parts': {name: {'seconds',
    'share', 'calls'}}}``, parts largest first, with ``other`` the wall
    time outside every part, and ``counts`` (what ``count`` recorded) when
    there are any. ``device_s`` is the ``DEVICE`` part (the turn programs,
    blocked on; not the loading or compiling of a kept program in them,
    ``PROGRAMS``), ``host_s`` the rest of the wall time."""
    parts = dict(self.seconds)
    parts['other'] = max(self.wall - sum(parts.values()), 0.0)
    total = self.wall or 1.0
    device = self.seconds.get(DEVICE, 0.0)
    out = {'wall_s': round(self.wall, 3), 'device_s': round(device, 3),
           'host_s': round(max(self.wall - device, 0.0), 3), 'parts': {
        name: {'seconds': round(s, 3), 'share': round(s / total, 4),
               'calls': self.calls.get(name, 0)}
        for name, s in sorted(parts.items(), key=lambda kv: -kv[1])}}
    if self.counts:
      out['counts'] = {k: round(v, 3) if isinstance(v, float) else v
                       for k, v in sorted(self.counts.items())}
    return out


@contextlib.contextmanager
def part(name: str):
  """Marks a part of the run (a no-op without an active profile)."""
  if not _ACTIVE:
    yield
    return
  profile = _ACTIVE[0]
  profile._enter(name)  # pylint: disable=protected-access
  try:
    yield
  finally:
    profile._exit()  # pylint: disable=protected-access


def count(name: str, amount) -> None:
  """Adds ``amount`` to the work counted as ``name`` (e.g. the tokens a
  part encoded; a no-op without an active profile)."""
  if _ACTIVE:
    _ACTIVE[0].counts[name] += amount


def sync(tree):
  """``tree`` after its device work is done (only under a profile)."""
  if _ACTIVE:
    jax.block_until_ready(tree)
  return tree


def timed(name: str, fn):
  """``fn`` with its calls (and their device work) counted as ``name``."""
  def wrapped(*args, **kwargs):
    with part(name):
      return sync(fn(*args, **kwargs))
  wrapped.__wrapped__ = fn
  return wrapped


def table(report: dict) -> str:
  """A Markdown table of ``Profile.report()``."""
  lines = ['| part | seconds | share | calls |', '|---|---:|---:|---:|']
  for name, p in report['parts'].items():
    lines.append(f'| {name} | {p["seconds"]:.1f} | {100 * p["share"]:.1f}% '
                 f'| {p["calls"]:,} |')
  lines.append(f'| **wall** | {report["wall_s"]:.1f} | 100% | |')
  if 'device_s' in report:
    lines.append(f'\nDevice (the turn programs, blocked on): '
                 f'{report["device_s"]:.1f} s; host (the rest): '
                 f'{report["host_s"]:.1f} s.')
  return '\n'.join(lines)


class Timer:
  """Prints stage progress with rate and time left, at most every ``every`` s."""

  def __init__(self, every: float = 5.0, printer=None):
    self._every = every
    self._print = printer or (lambda msg: print(msg, flush=True))
    self._start = {}
    self._last = 0.0

  def __call__(self, stage, done, total, info):
    now = time.time()
    start = self._start.setdefault(stage, now)
    if done < total and now - self._last < self._every and not info:
      return
    self._last = now
    elapsed = now - start
    rate = done / elapsed if elapsed > 0 else float('inf')
    left = (total - done) / rate if rate > 0 else 0.0
    extra = ' '.join(f'{k}={v:.4f}' for k, v in info.items())
    if elapsed <= 0:  # the stage's first report: no rate yet
      self._print(f'[{stage}] {done}/{total} {extra}'.rstrip())
      return
    self._print(f'[{stage}] {done}/{total} {rate:.1f}/s '
                f'elapsed {elapsed:.0f}s left {left:.0f}s {extra}'.rstrip())
