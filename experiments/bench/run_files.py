"""What the benchmarks read off a finished run: the runner's shape line,
its ``profile.json`` parts and counts, and the ranking core's shape
constants (``bench_runs``, ``bench_device``)."""

import json
import pathlib
import re

CHANNELS = 2     # the ranking core's lists per turn (T2V, composed)
DIM = 384        # the world's embeddings (MiniLM)
CHUNK = 64       # the jitted driver's sessions per chunk (--jit_chunk_size)

# The runner's line "N sessions x M methods, gallery G videos, T turns".
SHAPE = re.compile(r'^(\d+) sessions x (\d+) methods, gallery (\d+) videos, '
                   r'(\d+) turns', re.M)


def profile_parts(out: pathlib.Path) -> dict:
  """Seconds per profile part, summed over the runs under ``out``."""
  parts = {}
  for path in sorted(out.rglob('profile.json')):
    for name, row in json.loads(path.read_text())['parts'].items():
      parts[name] = round(parts.get(name, 0.0) + row['seconds'], 3)
  return parts


def profile_counts(out: pathlib.Path) -> dict:
  """The work counted (``profiling.count``), summed over the runs."""
  counts = {}
  for path in sorted(out.rglob('profile.json')):
    for name, value in json.loads(path.read_text()).get('counts',
                                                        {}).items():
      counts[name] = round(counts.get(name, 0) + value, 3)
  return counts


def sweep_targets(now: list[dict],
                  baseline: list[dict] | None) -> list[dict]:
  """``bench_sweep``'s targets (issue 84), each with its figure and
  pass/fail, from its rows ``now`` and ``baseline`` (smallest size
  first)."""
  largest, smallest = now[-1], now[0]
  out = [
      dict(target='host us per session-method at the largest size <= 50',
           figure=largest['host_us_per_session_method'],
           passed=largest['host_us_per_session_method'] <= 50),
      dict(target='host share of the wall time at the largest size <= 0.2',
           figure=largest['host_share'], passed=largest['host_share'] <= 0.2)]
  if len(now) > 1:
    scale = largest['sessions'] / smallest['sessions']
    ratio = largest['host_s'] / smallest['host_s']
    out.append(dict(target=f'host time grows at most 1.1 x {scale:g} from '
                    f'{smallest["sessions"]} to {largest["sessions"]} '
                    'sessions', figure=round(ratio, 2),
                    passed=ratio <= 1.1 * scale))
  if baseline:
    ratio = largest['wall_s'] / baseline[-1]['wall_s']
    out.append(dict(target='warm wall time at the largest size <= 1/2 of '
                    "the baseline's", figure=round(ratio, 3),
                    passed=ratio <= 0.5))
  return out
