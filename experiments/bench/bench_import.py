r"""Times experiments/data/import_covr.py on synthetic CoVR-shaped feature files.

    python -m experiments.bench.bench_import --rows=2556 --missing_share=0.072 \
        --shape=15,32,256

writes ``--rows`` CSV rows and two ``torch.save``-format ``.pth`` files per
row (``<page_dir>/<videoid>.pth``, random float32 of ``--shape``; BLIP-2's
``[F, 32, 256]`` by default) into a temporary directory, leaves out the
reference files of ``--missing_share`` of the rows (CoVR's "Missing 176
pth1's (7.2%)"), and runs the import with ``--missing_ids=drop`` as a
subprocess, timing it. Files are read back from the page cache (they were
just written): this measures parsing and pooling, not a cold disk.
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from experiments.bench import bench_common
from experiments.common import cli
from recovr_jax.envs.files import torch_files

_ROWS = flags.DEFINE_integer('rows', 2556, 'CSV rows (WebVid-CoVR test).')
_MISSING = flags.DEFINE_float('missing_share', 0.072,
                              'Share of rows whose reference has no file.')
_SHAPE = flags.DEFINE_list('shape', ['15', '32', '256'],
                           'Shape of each video\'s features.')


def main(argv):
  del argv
  shape = tuple(bench_common.list_values(_SHAPE, bench_common.positive_int,
                                         what='a positive integer',
                                         distinct=False))
  if _ROWS.value < 1 or not 0 <= _MISSING.value < 1:
    raise app.UsageError('--rows >= 1 and --missing_share in [0, 1)')
  root = pathlib.Path(tempfile.mkdtemp())
  try:
    rng = np.random.default_rng(0)
    n = _ROWS.value
    missing = set(rng.choice(n, int(_MISSING.value * n),
                             replace=False).tolist())
    lines = ['pth1,pth2,edit,txt1,txt2']
    for i in range(n):
      ref = f'{i % 100:04d}/{1000000 + i}'
      tgt = f'{(i + 7) % 100:04d}/{2000000 + i}'
      lines.append(f'{ref},{tgt},make it {i % 13},a caption {i},another '
                   f'caption {i}')
      for vid, skip in ((ref, i in missing), (tgt, False)):
        if not skip:
          path = root / 'emb' / f'{vid}.pth'
          path.parent.mkdir(parents=True, exist_ok=True)
          torch_files.save(path, rng.normal(size=shape).astype(np.float32))
    (root / 'ann.csv').write_text('\n'.join(lines) + '\n')
    size = sum(p.stat().st_size for p in (root / 'emb').rglob('*.pth'))
    print(f'{2 * n - len(missing)} files, {size / 1e9:.2f} GB, '
          f'{len(missing)} references without a file', flush=True)
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, '-m', 'experiments.data.import_covr',
         f'--embeddings_dir={root / "emb"}',
         f'--annotations={root / "ann.csv"}',
         f'--output={root / "gallery.npz"}',
         f'--reference_output={root / "refs.npz"}', '--missing_ids=drop'],
        capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    print(r.stdout + r.stderr[-2000:])
    if r.returncode:
      return f'import failed with exit code {r.returncode}'
    print(f'import_covr: {wall:.1f} s wall for {2 * n - len(missing)} files '
          f'({(2 * n - len(missing)) / wall:.0f} files/s, process start '
          'included)')
  finally:
    shutil.rmtree(root)


if __name__ == '__main__':
  cli.run(main)
