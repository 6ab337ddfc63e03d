"""A tiny run of the runner (``run_main``) that the run tests share."""

import pathlib

from absl.testing import flagsaver

from experiments.common import run_flags
from experiments import run

# The runner's mechanics are tested on the first benchmark (no captioner to
# load per run); BenchmarkPresetTest runs the default, v3, end to end.
# Two full batches: a partial last batch would compile its programs again.
TINY = dict(benchmark='v1', num_test_triplets=12, num_train_triplets=20, gallery_size=300,
            num_sessions=10, batch_size=5, num_turns=3,
            bootstrap_resamples=200, plots=False,
            # JAX's persistent compilation cache is process-wide: left off,
            # so the test process does not write into a temporary cache.
            compilation_cache=False)


def run_main(output_dir, **overrides):
  values = dict(TINY, output_dir=str(output_dir),
                cache_dir=str(pathlib.Path(output_dir).parent / 'cache'))
  values.update(overrides)
  if values.get('data') == 'webvid_covr':  # the world's flags are refused
    for name in run_flags.SOURCE_FLAGS['world']:
      values.pop(name, None)
  with flagsaver.flagsaver(**values):
    return run.main(['run'])
