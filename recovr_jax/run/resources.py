"""Devices and memory: a requested accelerator that is absent is an error,
and work that would not fit in memory is refused before it starts."""

import os

import jax

PLATFORMS = ('auto', 'cpu', 'gpu', 'tpu')


def select_device(platform: str, flag: str = '--platform') -> jax.Device:
  """The first device of ``platform`` ('auto': JAX's default backend),
  made the default device.

  Raises:
    ValueError: unknown platform, or no device of that platform (never a
      silent fallback to the CPU).
  """
  if platform not in PLATFORMS:
    raise ValueError(f'{flag}={platform!r}: valid choices are '
                     f'{", ".join(PLATFORMS)}')
  if platform == 'auto':
    device = jax.local_devices()[0]  # this process's (several: the run's)
  else:
    try:
      devices = jax.local_devices(backend=platform)
    except RuntimeError as e:
      devices = []
      reason = str(e).splitlines()[0]
    else:
      reason = ''
    if not devices:
      raise ValueError(
          f'{flag}={platform} was requested but JAX finds no {platform} '
          f'device ({reason or "none listed"}); available: '
          f'{", ".join(sorted({d.platform for d in jax.devices()}))}. Install '
          f'the jax build for {platform} or pass {flag}=cpu.')
    device = devices[0]
  jax.config.update('jax_default_device', device)
  return device


def available_bytes(device: jax.Device | None = None) -> int | None:
  """Free memory of ``device`` (host RAM for a CPU), or None if unknown."""
  device = device or jax.local_devices()[0]
  if device.platform != 'cpu':
    stats = device.memory_stats() or {}
    if 'bytes_limit' in stats:
      return int(stats['bytes_limit']) - int(stats.get('bytes_in_use', 0))
    return None
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  try:
    return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
  except (ValueError, OSError):
    return None


def check_fits(needed: int, what: str, flag: str,
               device: jax.Device | None = None, share: float = 0.8):
  """Raises ``ValueError`` naming ``flag`` when ``needed`` bytes exceed
  ``share`` of the free memory of ``device``."""
  free = available_bytes(device)
  if free is not None and needed > share * free:
    raise ValueError(
        f'{what} needs about {needed / 2**30:.2f} GiB but only '
        f'{free / 2**30:.2f} GiB are free on '
        f'{(device or jax.local_devices()[0]).platform}; lower {flag}')


def session_batch_bytes(num_sessions: int, num_channels: int,
                        gallery_size: int, dim: int, list_length: int,
                        window: int, block_size: int) -> int:
  """Peak bytes of one batch of the ranking core: the blocked score matrix
  of every channel query (with the top-k merge's temporaries, about 3x) and
  the per-session ring and fusion buffers, beside the gallery itself."""
  block = min(block_size, gallery_size)
  scores = 3 * 4 * num_sessions * num_channels * block
  ring = 4 * 8 * num_sessions * window * num_channels * list_length
  return scores + ring + 4 * gallery_size * dim


# What a run writes, measured (2026-12-06) on a run of 20 sessions x 2
# methods (448 KB) and on the fidelity family's main part (2,000 sessions
# x 21 methods, 285 MB), with slack: per session, method and turn, the
# batch file's displayed lists (4 bytes per id), its record, the
# trajectories row and the ranks row; per method its metrics, report and
# table rows; the plots; a fixed part; per TREC line (--export_trec: list_length
# lines per session, method and turn).
OUTPUT_BYTES_PER_ID = 4
OUTPUT_BYTES_PER_TURN = 1_000
# Of which the trajectories' row (as JSON Lines: 578 bytes per turn in
# `main` at 1,000 sessions, 80 MB), and what the Parquet file takes instead
# (39 bytes per turn there, 5.4 MB: --trajectories_format).
TRAJECTORY_BYTES_JSONL = 600
TRAJECTORY_BYTES_PARQUET = 60
OUTPUT_BYTES_PER_METHOD = 8 << 10
OUTPUT_BYTES_FIXED = 32 << 10
OUTPUT_BYTES_PLOTS = 192 << 10
TREC_BYTES_PER_LINE = 64


def output_bytes(num_sessions: int, num_methods: int, num_turns: int,
                 list_length: int, export_trec: bool,
                 plots: bool = True, parquet: bool = False) -> int:
  """An upper estimate of what a run writes to its output directory (at
  most about twice what it writes: ``tests/run/run_test.py``); ``parquet``:
  its trajectories as Parquet."""
  turns = num_sessions * num_methods * (num_turns + 1)
  per_turn = OUTPUT_BYTES_PER_TURN - (
      TRAJECTORY_BYTES_JSONL - TRAJECTORY_BYTES_PARQUET if parquet else 0)
  return (OUTPUT_BYTES_FIXED + (OUTPUT_BYTES_PLOTS if plots else 0)
          + num_methods * OUTPUT_BYTES_PER_METHOD
          + turns * (per_turn + list_length * OUTPUT_BYTES_PER_ID)
          + (turns * list_length * TREC_BYTES_PER_LINE if export_trec
             else 0))


def check_disk(directory, needed: int, flag: str = '--output_dir') -> None:
  """Refuses a run whose outputs would not fit in ``directory``'s free
  space (before any work)."""
  import shutil  # pylint: disable=g-import-not-at-top
  free = shutil.disk_usage(directory).free
  if needed > free:
    raise ValueError(
        f'{flag}={directory}: the run writes about {_size(needed)} and the '
        f'disk has {_size(free)} free; free space or write elsewhere')


def _size(n: int) -> str:
  """``n`` bytes in KiB below a MiB, else in MiB."""
  return f'{n / 2**10:,.0f} KiB' if n < 2**20 else f'{n / 2**20:,.0f} MiB'
