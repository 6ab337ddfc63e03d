"""Shared test setup: CPU, no preallocation, quiet logs; compiled programs
freed when the process's memory maps grow large."""

import gc
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# The suite is compile-bound (most of its time is XLA compiling small
# programs it then runs for milliseconds): LLVM's optimisations are turned
# off for the test process and the runs it starts (the environment is
# inherited). They change how fast a program runs, not what it computes;
# the benchmarks under experiments/ run with XLA's defaults.
_FAST_COMPILE = ('--xla_backend_optimization_level=0 '
                 '--xla_llvm_disable_expensive_passes=true')
if _FAST_COMPILE not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' +
                             _FAST_COMPILE).strip()
# XLA:CPU's elemental emitters instead of its newer fusion emitters: the
# suite's programs compile in about half the time (tests/drivers/ and
# tests/core/fusion_test.py 89.6 s -> 58.7 s; docs/performance.md, "The
# test suite"). Every comparison a test makes is between programs compiled
# under the same flags, or against NumPy within a tolerance; the runs of
# the refactoring guard (tests/output_identity.py) and the benchmarks
# compile with XLA's defaults. Probed once per session (a jaxlib that does
# not know the flag aborts on it: jaxlib 0.12.1, which .ci/new_versions
# installs, no longer has it), then inherited, as is the probe's answer.
_EMITTERS = '--xla_cpu_use_fusion_emitters=false'
if ('xla_cpu_use_fusion_emitters' not in os.environ['XLA_FLAGS'] and
    'RECOVR_TESTS_EMITTERS_PROBED' not in os.environ):
  os.environ['RECOVR_TESTS_EMITTERS_PROBED'] = '1'
  _probe = subprocess.run(
      [sys.executable, '-c', 'import jax; jax.devices()'],
      env=dict(os.environ, XLA_FLAGS=os.environ['XLA_FLAGS'] + ' ' + _EMITTERS),
      capture_output=True, check=False)
  if _probe.returncode == 0:
    os.environ['XLA_FLAGS'] += ' ' + _EMITTERS
# The session's temporary folder: every test, worker and process it starts
# writes its temporary files under it (TMPDIR), and it is removed when the
# session ends, so no run of the suite leaves them in /tmp.
if 'RECOVR_TESTS_TMP' not in os.environ:
  os.environ['RECOVR_TESTS_TMP'] = tempfile.mkdtemp(prefix='recovr-tests-tmp-')
  os.environ['RECOVR_TESTS_OWN_TMP'] = str(os.getpid())
  os.environ['TMPDIR'] = os.environ['RECOVR_TESTS_TMP']
tempfile.tempdir = os.environ['TMPDIR']
# One persistent compilation cache for the whole session (the test process,
# pytest-xdist's workers and every run a test starts inherit it): a program
# compiled once is loaded, not compiled, by the next process that needs it,
# however quickly it compiled (the whole suite 9 min 2 s with a 0.5 s floor,
# 8 min 25 s without; docs/performance.md). Removed when the session ends.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(
      prefix='recovr-tests-xla-')
  os.environ['RECOVR_TESTS_OWN_XLA_CACHE'] = str(os.getpid())
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
# The tiny runs' shared cache (gallery embeddings, text embeddings, the
# grounded reader's fits: tests/helpers/runs.py), made and removed alike.
if 'RECOVR_TESTS_SHARED_CACHE' not in os.environ:
  os.environ['RECOVR_TESTS_SHARED_CACHE'] = tempfile.mkdtemp(
      prefix='recovr-tests-cache-')
  os.environ['RECOVR_TESTS_OWN_SHARED_CACHE'] = str(os.getpid())


def pytest_sessionfinish(session, exitstatus):  # pylint: disable=unused-argument
  for own, path in (('RECOVR_TESTS_OWN_XLA_CACHE', 'JAX_COMPILATION_CACHE_DIR'),
                    ('RECOVR_TESTS_OWN_SHARED_CACHE',
                     'RECOVR_TESTS_SHARED_CACHE'),
                    ('RECOVR_TESTS_OWN_TMP', 'RECOVR_TESTS_TMP')):
    if os.environ.get(own) == str(os.getpid()):
      shutil.rmtree(os.environ[path], ignore_errors=True)

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
# One test adds at most 3,255 maps (files_run_test's jit-equals-host, in a
# whole run at 982aacd, where a worker passed 30,000 once); above 45,000
# they are freed (a clear costs 5-8 s, then the programs are compiled or
# loaded again).
_MAX_MAPS = 45_000


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


# ``pytest -m fast``: a quick pass over every package (the unit tests that
# build no world, load no model and start no run), for the edit-test loop;
# the README's test command runs everything. Module -> its fast test
# classes (None: all of them).
FAST = {
    # core
    'demotion_test.py': None, 'fusion_test.py': None, 'list_metrics_test.py': None,
    'resampling_test.py': None,
    'ring_test.py': None, 'slerp_test.py': None,
    # protocol, methods
    'methods_test.py': {'RegistryTest', 'AnchoredTest'},
    # drivers
    'jit_loop_test.py': None,
    'drivers_test.py': {'ChooseTest', 'CapabilitiesTest'},
    # reasoning
    'rules_core_test.py': None, 'reflection_test.py': None,
    'ask_scores_test.py': None, 'wordnet_test.py': None, 'lora_test.py': None,
    'reasoning_test.py': {'SchemaTest', 'RulesReasonerTest', 'FreeTextTest'},
    'reasoning_registry_test.py': {'RegistryTest'},
    # world
    'simulated_user_test.py': None, 'user_language_test.py': None,
    # real
    'data_test.py': None,
    # experiment, study, the project
    'profiling_test.py': None, 'resources_test.py': None,
    'claims_test.py': {'VerdictTest', 'StatisticsTest'},
    'study_test.py': {'FeedbackTextTest'}, 'access_test.py': None,
    'readers_test.py': None, 'compare_runs_test.py': {'CompareRunsTest'},
    'layering_test.py': None, 'readme_test.py': None,
    'config_tree_test.py': None,
    'model_card_test.py': None,
}


def pytest_configure(config):
  here = os.path.dirname(os.path.abspath(__file__))
  present = {p.name for p in pathlib.Path(here).rglob('*_test.py')}
  missing = sorted(m for m in FAST if m not in present)
  if missing:
    raise pytest.UsageError(f'tests/conftest.py FAST names missing test '
                            f'modules: {", ".join(missing)}')
  config.addinivalue_line(
      'markers', 'fast: the quick pass over every package (tests/conftest.py '
      'FAST; pytest -m fast)')


# The slowest tests first (runs end to end, each 15-50 s on CI's 2-core
# machine: `python -m pytest -q -n 2 --dist worksteal --durations=0 tests`
# at ba6b097). pytest-xdist's workers then end on short tests rather than
# one on a long run while the other waits (about a minute of the suite's
# wall before). Only the order changes; a stale list costs balance only.
SLOW_FIRST = (
    'tests/run/distributed_test.py::TwoProcessesTest',
    'tests/experiments/bundle_test.py',
    'tests/experiments/bench_device_test.py',
    'tests/envs/world/layout_test.py::RunTest',
    'tests/executables_test.py',
    'tests/experiments/bench_runs_test.py',
    'tests/envs/files/covr_import_test.py::RealDataOptionsTest',
    'tests/core/sharding_test.py',
    'tests/reasoning/chat_lm_test.py',
    'tests/experiments/bench_core_test.py',
    'tests/drivers/jit_loop_test.py',
    'tests/run/run_test.py::BenchmarkPresetTest',
    'tests/analysis/reading_test.py::EvalReadingCliTest',
    'tests/envs/world/captioner_test.py',
    'tests/experiments/bench_sessions_test.py',
    'tests/reasoning/gguf_llama_test.py',
)


def _first_slow(item) -> int:
  for i, prefix in enumerate(SLOW_FIRST):
    if item.nodeid == prefix or item.nodeid.startswith(prefix + '::'):
      return i
  return len(SLOW_FIRST)


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
  items.sort(key=_first_slow)  # stable: the rest keep their order
  for item in items:
    name = os.path.basename(str(item.fspath))
    if name not in FAST:
      continue
    classes = FAST[name]
    cls = getattr(item, 'cls', None)
    if classes is None or (cls is not None and cls.__name__ in classes):
      item.add_marker(pytest.mark.fast)
