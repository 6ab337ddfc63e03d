"""Helpers shared by the benchmark scripts: progress lines, timing, and
one CPU device per core."""

import os
import statistics
import sys
import time

import jax


def log(msg):
  print(msg, file=sys.stderr, flush=True)


def timings(fn, repeats):
  """``(median, all)`` wall times of ``fn()`` over ``repeats`` runs after
  one warm-up, waiting for JAX results."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times), times


def split_cpu_devices(count: int):
  """Makes JAX's CPU backend show ``count`` devices (one per core), so rows
  that split sessions over devices use every core (XLA:CPU runs a batched
  sort or ``top_k`` on one thread). Call before JAX starts its backend;
  single-device work still runs on device 0. No-op for ``count <= 1`` or when
  ``XLA_FLAGS`` already sets a device count."""
  flags = os.environ.get('XLA_FLAGS', '')
  if count > 1 and 'device_count' not in flags:
    os.environ['XLA_FLAGS'] = (
        f'{flags} --xla_force_host_platform_device_count={count}').strip()
