"""Shared test setup: CPU, no preallocation, quiet logs; compiled programs
freed when the process's memory maps grow large."""

import gc
import os

import pytest

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# absltest's helpers (create_tempfile, flagsaver) read absl flags: parsed
# once here, so a test does not depend on an earlier test in the same
# process having parsed them (pytest-xdist workers run any subset).
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()

# Every XLA:CPU executable keeps memory maps of its compiled code; the suite
# compiles thousands of programs (the jitted driver per method, table size
# and pass) and Linux allows 65,530 maps per process (vm.max_map_count),
# beyond which LLVM's code allocator crashes the process during a compile.
_MAX_MAPS = 30_000


def _num_maps() -> int:
  try:
    with open('/proc/self/maps', 'rb') as f:
      return sum(1 for _ in f)
  except OSError:  # not Linux: nothing to watch
    return 0


@pytest.fixture(autouse=True)
def _free_compiled_programs():
  """After a test, drops JAX's compiled programs if the maps run high (the
  next tests recompile what they need)."""
  yield
  if _num_maps() > _MAX_MAPS:
    import jax  # pylint: disable=g-import-not-at-top
    jax.clear_caches()
    gc.collect()
