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
