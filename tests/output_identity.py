r"""The refactoring guard: every run flagfile at small size, hashed.

    python -m tests.output_identity --output_json=/tmp/before.json
    # ... the refactor ...
    python -m tests.output_identity --output_json=/tmp/after.json \
        --compare=/tmp/before.json

Runs each flagfile of ``experiments/flagfiles`` (not ``study``, which is an
interactive server) under the host and the jitted driver, at small size
(``SMALL``), on the world or, for the real-data flagfiles, on the tiny CLIP
and gallery of ``tests.helpers.real_files.write_real_data`` (with four MSR-VTT-style text queries
for ``--start=text``); each run in a fresh
output directory, all in one cache directory that starts empty (so two
calls run against the same cache states, in the same order). Records the SHA-256 of every ``metrics.json``,
``trajectories.jsonl`` and ``ranks.csv`` a run writes (sweeps and suites
write several), its exit status and, for a run that fails, its last error
line. ``--compare`` prints each difference and exits 1 if there is one.
"""

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLAGFILES = ROOT / 'experiments' / 'flagfiles'
HASHED = ('metrics.json', 'trajectories.jsonl', 'ranks.csv')
SMALL = ('--num_sessions=6', '--batch_size=3', '--num_turns=3',
         '--bootstrap_resamples=50', '--noresume')
SIMULATIONS = ('host', 'jit')
REAL_QUERIES = 4  # in tests.helpers.real_files' annotations and queries

_OUT = flags.DEFINE_string('output_json', None, 'Where to write the hashes.',
                           required=True)
_COMPARE = flags.DEFINE_string('compare', None,
                               'An earlier --output_json to compare with.')
_ONLY = flags.DEFINE_list('only', None, 'Flagfiles to run (default: all).')
_WORK = flags.DEFINE_string('work_dir', None,
                            'Where the runs write (default: a temporary '
                            'directory, removed afterwards).')


def flagfiles(only=None) -> list[str]:
  names = sorted(p.name for p in FLAGFILES.iterdir()
                 if p.is_file() and p.name != 'study')
  if only:
    unknown = sorted(set(only) - set(names))
    if unknown:
      raise app.UsageError(f'--only: unknown flagfiles {", ".join(unknown)}; '
                           f'valid: {", ".join(names)}')
    names = [n for n in names if n in only]
  return names


def is_real(name: str) -> bool:
  text = (FLAGFILES / name).read_text()
  words = text.split()
  return '--data=files' in words or '--data=webvid_covr' in words  # alias


def is_text_start(name: str) -> bool:
  return '--start=text' in (FLAGFILES / name).read_text().split()


def hashes(directory: pathlib.Path) -> dict[str, str]:
  out = {}
  for p in sorted(directory.rglob('*')):
    if p.is_file() and p.name in HASHED:
      out[str(p.relative_to(directory))] = hashlib.sha256(
          p.read_bytes()).hexdigest()
  return out


def run_one(name: str, simulation: str, work: pathlib.Path,
            real_flags: list[str]) -> dict:
  out = work / name / simulation
  cache = work / 'cache'
  args = [sys.executable, '-m', 'experiments.run',
          f'--flagfile={FLAGFILES / name}', f'--output_dir={out}',
          f'--cache_dir={cache}', f'--simulation={simulation}', *SMALL]
  if name == 'fidelity':
    args.append('--num_test_triplets=200')
  if is_real(name):
    # The tiny files hold 4 queries (a run asking for more is refused; the
    # runner capped it to 4 before 2026-12-06).
    args += real_flags + [f'--num_sessions={REAL_QUERIES}']
    if is_text_start(name):  # text-to-video queries in MSR-VTT's layout
      args.append(f'--annotations={work / "real_files" / "queries.csv"}')
  start = time.time()
  done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                        check=False)
  record = {'returncode': done.returncode,
            'hashes': hashes(out) if out.is_dir() else {},
            'seconds': round(time.time() - start, 1)}
  if done.returncode:
    lines = [l for l in done.stderr.splitlines() + done.stdout.splitlines()
             if l.strip()]
    errors = [l for l in lines if 'rror' in l or 'FAILED' in l]
    record['error'] = (errors or lines or [''])[-1][-300:]
  return record


def differences(before: dict, after: dict) -> list[str]:
  out = []
  for key in sorted(set(before) | set(after)):
    if key not in after or key not in before:
      out.append(f'{key}: only {"before" if key in before else "after"}')
      continue
    a, b = before[key], after[key]
    if a['returncode'] != b['returncode']:
      out.append(f'{key}: exit {a["returncode"]} -> {b["returncode"]} '
                 f'({b.get("error", "")})')
    for f in sorted(set(a['hashes']) | set(b['hashes'])):
      if a['hashes'].get(f) != b['hashes'].get(f):
        out.append(f'{key}/{f}: {a["hashes"].get(f, "missing")[:12]} -> '
                   f'{b["hashes"].get(f, "missing")[:12]}')
  return out


def main(argv):
  del argv
  names = flagfiles(_ONLY.value)
  work = pathlib.Path(_WORK.value or tempfile.mkdtemp()).absolute()
  if (work / 'cache').exists():
    raise app.UsageError(f'--work_dir {work}: holds a cache of an earlier '
                         'call; give an empty directory')
  real_dir = work / 'real_files'
  if not real_dir.exists():
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    real = real_files.write_real_data(real_dir)
  else:  # written by an earlier call into this work directory
    real = dict(data='files',
                annotations=str(real_dir / 'ann.csv'),
                gallery_embeddings=str(real_dir / 'gallery.npz'),
                clip_dir=str(real_dir / 'clip'))
  queries = real_dir / 'queries.csv'
  if not queries.exists():
    queries.write_text('video_id,sentence\n' + ''.join(
        f'v{i},video number {i}\n' for i in range(1, 5)))
  real_flags = [f'--{k}={v}' for k, v in real.items() if k != 'data']
  records = {}
  for i, name in enumerate(names):
    for simulation in SIMULATIONS:
      record = run_one(name, simulation, work, real_flags)
      records[f'{name}/{simulation}'] = record
      print(f'[{i + 1}/{len(names)}] {name} {simulation}: exit '
            f'{record["returncode"]}, {len(record["hashes"])} files, '
            f'{record["seconds"]}s {record.get("error", "")}', flush=True)
  pathlib.Path(_OUT.value).write_text(json.dumps(records, indent=1,
                                                 sort_keys=True))
  if not _WORK.value:
    shutil.rmtree(work, ignore_errors=True)
  if _COMPARE.value:
    before = json.loads(pathlib.Path(_COMPARE.value).read_text())
    if _ONLY.value:
      before = {k: v for k, v in before.items() if k.split('/')[0] in names}
    diff = differences(before, records)
    for line in diff:
      print(line)
    files = sum(len(r['hashes']) for r in records.values())
    print(f'{len(records)} runs, {files} files: {len(diff)} differences')
    if diff:
      sys.exit(1)


if __name__ == '__main__':
  os.environ.setdefault('PYTHONHASHSEED', '0')
  app.run(main)
