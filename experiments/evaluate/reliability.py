"""Bad inputs and faults tried against the runner (the README's Reliability
table).

  python -m experiments.evaluate.reliability --output_md=results/reliability.md

Each case runs ``python -m experiments.run`` in a subprocess on a tiny world
(v1, 12 sessions, 3 turns) in a scratch directory, after breaking one thing,
and checks what the run does: refuse before work with a message that names
what to fix, recompute derived data with a warning, or give the same outputs
as a clean run. The kill-and-resume case SIGKILLs a run after its first
batch and compares the resumed outputs byte for byte. Exits non-zero if any
case does not behave as expected.
"""

import hashlib
import http.client
import itertools
import json
import os
import pathlib
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

from absl import app
from absl import flags
import numpy as np

from experiments.common import cli
from experiments.common import outputs

_KEEP = flags.DEFINE_bool('keep', False, 'Keep the scratch directory.')
GROUPS = ('runner', 'files', 'processes', 'study', 'viewer', 'importer',
          'lora', 'faults')
_GROUPS = flags.DEFINE_multi_enum(
    'cases', list(GROUPS), GROUPS,
    'Which groups of cases to try (repeatable): the runner, the files the '
    'project reads (a user\'s, its own outputs, the study\'s access file, '
    'images, the launcher\'s flagfiles and port), the runner as '
    'several processes, the study app, the session viewer, '
    'the CoVR importer, LoRA adapters, and the faults of a run that '
    'travels, refuses or shares its files (an archive\'s parts, its '
    'self-check, a refusal over a finished run, one query repeated, sizes, '
    'two writers, one-line refusals).')

TINY = ['--benchmark=v1', '--num_test_triplets=12', '--num_train_triplets=20',
        '--gallery_size=300', '--num_sessions=12', '--batch_size=5',
        '--num_turns=3', '--bootstrap_resamples=200', '--methods=recovr']
OUTPUTS = ('metrics.json', 'trajectories.jsonl', 'failure_modes.json',
           'bootstrap.json')


class Scratch:
  """A scratch root with a shared cache and a clean reference run."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.cache = root / 'cache'

  def run(self, out, *args, wait=True, cache_dir=None):
    cmd = [sys.executable, '-m', 'experiments.run', *TINY,
           f'--cache_dir={cache_dir or self.cache}', f'--output_dir={out}',
           *args]
    if not wait:
      return subprocess.Popen(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr, time.time() - start

  def copy(self, src, name):
    dst = self.root / name
    shutil.copytree(src, dst)
    return dst


def _same(a, b) -> bool:
  return all((a / n).read_bytes() == (b / n).read_bytes() for n in OUTPUTS)


def _message(text: str) -> str:
  """The line of the output that carries the warning or the error (absl
  prints a refused run's message last, after the usage text)."""
  for pattern in (r': error: (.*)', r'(warning: .*)', r'FAILED: (.*)'):
    found = re.findall(pattern, text)
    if found:
      return '; '.join(f.strip() for f in found) if ': error: ' in \
          pattern else found[-1].strip()
  lines = [line for line in text.strip().splitlines() if line.strip()]
  return lines[-1].strip() if lines else '(no output)'


def _refused(rc, text, pattern) -> tuple[str, bool]:
  msg = _message(text)
  return f'refused (exit {rc}): {msg}', rc != 0 and bool(
      re.search(pattern, text))


class _Planted:
  """Unpickled, it makes the file ``path`` (code run from a cache)."""

  def __init__(self, path: str):
    self.path = path

  def __reduce__(self):
    return (open, (self.path, 'w'))


def cases(s: Scratch, clean: pathlib.Path):
  """Yields ``(case, outcome, as_expected)``."""
  from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top

  # Resume and run identity.
  d = s.copy(clean, 'seed')
  flags_before = (d / 'flags.txt').read_bytes()
  rc, text, _ = s.run(d, '--user_seed=7')
  outcome, ok = _refused(rc, text, r'user_seed: 0 -> 7')
  ok &= (d / 'flags.txt').read_bytes() == flags_before
  yield ('--user_seed=7 into a directory of a seed-0 run', outcome +
         '; its flags.txt untouched', ok)

  d = s.root / 'noresume'
  s.run(d, '--rrf_k=1', '--recency=uniform')
  s.run(d, '--noresume', '--num_sessions=5')
  rc, _, _ = s.run(d)
  yield ('`--rrf_k=1 --recency=uniform` run, then `--noresume '
         '--num_sessions=5`, then a default resume',
         f'exit {rc}; outputs equal a clean run: {_same(d, clean)} (the '
         'old batches were cleared)', rc == 0 and _same(d, clean))

  d = s.root / 'grow'
  s.run(d, '--num_sessions=6')
  rc, _, _ = s.run(d)
  yield ('growing --num_sessions from 6 to 12 in the same directory',
         f'exit {rc}; the partial batch is rerun; outputs equal a clean run: '
         f'{_same(d, clean)}', rc == 0 and _same(d, clean))

  d = s.copy(clean, 'batch')
  rc, text, _ = s.run(d, '--batch_size=4')
  yield ('changing --batch_size in an existing directory',
         *_refused(rc, text, r'batch_size: 5 -> 4'))

  # Values.
  for args, pattern in (
      (['--rrf_k=nan'], 'rrf_k must be a finite number'),
      (['--rrf_k=inf'], 'rrf_k must be a finite number'),
      (['--recency=exp', '--gamma=-1'], r'gamma .* must be in \(0, 1\]'),
      (['--sweep=rrf_k=nan'], r'--sweep rrf_k=nan: rrf_k must be'),
      (['--methods=merlin', '--merlin_alpha=5'], 'merlin_alpha must be in'),
      (['--ask_tau=nan'], 'ask tau must be a finite number'),
      (['--noise_rate=1.5'], r'noise_rate must be in \[0, 1\]')):
    d = s.root / ('value' + str(abs(hash(tuple(args)))))
    rc, text, _ = s.run(d, *args)
    outcome, ok = _refused(rc, text, pattern)
    yield (' '.join(f'`{a}`' for a in args), outcome +
           f'; output directory created: {d.exists()}', ok and not d.exists())

  # A session start the driver or the directory cannot take.
  d = s.root / 'text_jit'
  rc, text, _ = s.run(d, '--start=text', '--simulation=jit')
  outcome, ok = _refused(rc, text, r'--start=text runs on --simulation=host')
  yield ('`--start=text --simulation=jit`', outcome +
         f'; output directory created: {d.exists()}', ok and not d.exists())
  d = s.copy(clean, 'text_into_composed')
  rc, text, _ = s.run(d, '--start=text')
  yield ('`--start=text` into the directory of a composed run',
         *_refused(rc, text, r"data.start: 'composed' -> 'text'"))

  # Artefacts.
  cache_file = next(s.cache.glob('gallery-*.npz'))
  backup = cache_file.read_bytes()
  with np.load(cache_file) as data:
    arrays = {k: data[k] for k in data.files}
  arrays['video'][:50] = np.nan
  np.savez(cache_file, **arrays)
  d = s.root / 'nan_cache'
  rc, text, _ = s.run(d)
  yield ('50 NaN rows in the gallery cache',
         f'exit {rc}: {_message(text)}; outputs equal a clean run: '
         f'{_same(d, clean)}', rc == 0 and _same(d, clean) and
         'recomputing it' in text)
  cache_file.write_bytes(backup[:len(backup) // 2])
  d = s.root / 'cut_cache'
  rc, text, _ = s.run(d)
  yield ('a truncated gallery cache',
         f'exit {rc}: {_message(text)}; outputs equal a clean run: '
         f'{_same(d, clean)}', rc == 0 and _same(d, clean) and
         'recomputing it' in text)

  ckpt = s.root / 'ckpt_flip'
  shutil.copytree(encoders.DEFAULT_CHECKPOINT_DIR, ckpt)
  flip_bytes(ckpt / 'composer', 1000, 400)
  rc, text, _ = s.run(s.root / 'flip', f'--checkpoint_dir={ckpt}')
  yield ('400 flipped bytes in the composer checkpoint',
         *_refused(rc, text, 'does not match its checksum'))

  ckpt = s.root / 'ckpt_nan'
  shutil.copytree(encoders.DEFAULT_CHECKPOINT_DIR, ckpt)
  _nan_composer(ckpt)
  rc, text, _ = s.run(s.root / 'nan_ckpt', f'--checkpoint_dir={ckpt}')
  yield ('a composer checkpoint with one NaN leaf value (re-saved, so its '
         'checksums match)', *_refused(rc, text, 'NaN or infinite values'))

  d = s.copy(clean, 'zeroed')
  big = d / 'batches' / 'recovr' / '00000.npz'
  raw = bytearray(big.read_bytes())
  mid = len(raw) // 2
  raw[mid:mid + 100] = bytes(100)
  big.write_bytes(bytes(raw))
  rc, text, _ = s.run(d)
  yield ('100 zeroed bytes in a batch checkpoint',
         *_refused(rc, text, r'batch checkpoint .*00000'))

  d = s.copy(clean, 'json')
  path = d / 'batches' / 'recovr' / '00001.json'
  path.write_text(path.read_text()[:40])
  rc, text, _ = s.run(d)
  yield ('a truncated batch JSON', *_refused(
      rc, text, r'00001.json is unreadable or incomplete'))

  ckpt = s.root / 'ckpt_unverified'
  shutil.copytree(encoders.DEFAULT_CHECKPOINT_DIR, ckpt)
  flip_bytes(ckpt / 'composer', 1000, 400)
  (ckpt / 'composer' / 'checksums.json').unlink()
  rc, text, _ = s.run(s.root / 'unverified', f'--checkpoint_dir={ckpt}')
  yield ('the composer\'s checksums.json deleted and 400 bytes flipped',
         *_refused(rc, text, r'has no checksums\.json.*'
                   '--allow_unverified_checkpoints'))
  d = s.root / 'unverified_allowed'
  rc, text, _ = s.run(d, f'--checkpoint_dir={ckpt}',
                      '--allow_unverified_checkpoints')
  listed = (d / 'resolved_config.json').exists() and 'unverified_checkpoints' \
      in (d / 'resolved_config.json').read_text() and (
          d / 'report.md').exists() and 'Unverified checkpoints' in (
              d / 'report.md').read_text()
  yield ('the same with --allow_unverified_checkpoints',
         f'exit {rc}; resolved_config.json and report.md list the unverified '
         f'checkpoint: {listed}', rc == 0 and listed)

  d = s.copy(clean, 'edited_record')
  path = d / 'batches' / 'recovr' / '00000.json'
  path.write_text(path.read_text().replace('"sigma": "neg"', '"sigma": "pos"'
                                           ).replace('"sigma": "neu"',
                                                     '"sigma": "pos"'))
  rc, text, _ = s.run(d)
  yield ('a sigma edited in a batch\'s trajectory records', *_refused(
      rc, text, r'00000.json: its sessions, records or counts do not match'))

  d = s.copy(clean, 'other_code')
  path = d / 'batches' / 'recovr' / '00000.json'
  meta = json.loads(path.read_text())
  meta['code'] = '0' * 64  # as if the package's sources had changed since
  path.write_text(json.dumps(meta))
  rc, text, _ = s.run(d)
  yield ('a batch written by other code (its recorded source digest '
         'differs)', *_refused(rc, text, r'00000.json was computed by other '
                                         r'code'))

  rc, text, _ = s.run(s.root / 'beyond', '--num_sessions=100000')
  yield ('`--num_sessions=100000` on 12 test queries', *_refused(
      rc, text, r'--num_sessions=100000: the world gives at most 12 '
      r'sessions.*--query_repeats=8334'))

  rc, text, _ = s.run(s.root / 'many', '--batch_size=0', '--rrf_k=-1',
                      '--methods=recovr,bogus', '--window=0')
  lines = [l for l in text.splitlines() if ': error: ' in l]
  yield ('four bad flags at once (`--batch_size=0 --rrf_k=-1 '
         '--methods=recovr,bogus --window=0`)',
         f'refused (exit {rc}) with {len(lines)} error lines',
         rc != 0 and len(lines) == 4)

  rc, text, _ = s.run(s.root / 'seed1', '--world_seed=1')
  yield ('--world_seed=1 with the encoders trained on seed 0',
         *_refused(rc, text, r'% of this world\'s test combinations'))

  # Errors visible in the outputs.
  d = s.root / 'lock'
  first = s.run(d, '--methods=recovr,ivr,merlin,umivr,history_rewrite',
                wait=False)  # long enough to be caught holding the lock
  while not (d / 'flags.txt').exists() and first.poll() is None:
    time.sleep(0.2)
  rc, text, _ = s.run(d)
  first.wait()
  yield ('two runs into one directory at once', *_refused(
      rc, text, 'another run is writing'))

  rc, text, _ = s.run('')
  yield ('`--output_dir=` (empty)', *_refused(rc, text, 'output_dir is empty'))
  a_file = s.root / 'a_file'
  a_file.write_text('x')
  rc, text, secs = s.run(s.root / 'cachefile', f'--cache_dir={a_file}')
  outcome, ok = _refused(rc, text, 'cannot be used as a directory')
  yield ('`--cache_dir` naming a file', outcome + f' after {secs:.0f} s', ok)

  # Caches: a folder where the text cache goes; kept programs that others
  # may write (a pickle runs code when loaded) or that hold another
  # program.
  blocked = s.root / 'blocked_cache'
  encoders.TextEncoder().cache_path(blocked).mkdir(parents=True)
  rc, text, secs = s.run(s.root / 'blocked', f'--cache_dir={blocked}')
  outcome, ok = _refused(rc, text, 'where the text embedding cache goes, is '
                         'not a file')
  ok &= not (s.root / 'blocked' / 'batches').exists()
  yield ('a folder where the text embedding cache goes',
         outcome + f' after {secs:.0f} s, before any session', ok)
  kept_cache = s.root / 'kept_cache'
  shutil.copytree(s.cache, kept_cache, ignore=shutil.ignore_patterns('xla'))
  jit = ('--simulation=jit', f'--cache_dir={kept_cache}')
  rc0, _, _ = s.run(s.root / 'kept0', *jit)
  kept = kept_cache / 'xla' / 'executables'
  kept.chmod(0o777)
  rc, text, _ = s.run(s.root / 'kept1', *jit)
  ok = (rc0 == 0 and rc == 0 and 'not loaded' in text and str(kept) in text
        and _same(s.root / 'kept0', s.root / 'kept1'))
  yield ('kept compiled programs in a folder others may write',
         f'exit {rc}: not loaded, compiled afresh, with a warning naming the '
         'folder; outputs identical', ok)
  kept.chmod(0o755)
  files = sorted(kept.glob('*.pkl'))
  contents = [f.read_bytes() for f in files]
  for f, c in zip(files, contents[1:] + contents[:1]):
    f.write_bytes(c)
  rc, text, _ = s.run(s.root / 'kept2', *jit)
  yield ('kept program files swapped between programs',
         f'exit {rc}: each compiled afresh and replaced; outputs identical',
         rc == 0 and len(files) > 1 and _same(s.root / 'kept0',
                                              s.root / 'kept2'))
  # As a travelled cache could hold them: every program replaced by a
  # pickle that makes a file when loaded, each digest rewritten as anyone
  # can (the unkeyed SHA-256 of the program's key and the bytes).
  marker = s.root / 'code_ran'
  planted = pickle.dumps(_Planted(str(marker)))
  for f in kept.glob('*.pkl'):
    f.write_bytes(planted)
    f.with_suffix('.digest').write_text(hashlib.sha256(
        f.stem.encode() + b'\n' + planted).hexdigest())
  rc, text, _ = s.run(s.root / 'kept3', *jit)
  yield ('kept programs replaced by pickles that run code, their digests '
         'rewritten', f'exit {rc}: {"code ran" if marker.exists() else "no code ran"}'
         '; each compiled afresh (a digest needs the user\'s secret); '
         'outputs identical',
         rc == 0 and not marker.exists() and _same(s.root / 'kept0',
                                                   s.root / 'kept3'))

  reasoner = s.root / 'reasoner_missing'
  reasoner.mkdir()
  (reasoner / 'config.json').write_text('{}')
  rc, text, secs = s.run(s.root / 'lm', '--reasoner=flax_lm',
                         f'--reasoner_checkpoint={reasoner}')
  outcome, ok = _refused(rc, text, 'is missing')
  yield ('a reasoner directory missing files', outcome + f' after {secs:.0f} '
         's (before any model loads)', ok)

  # Kill and resume.
  d = s.root / 'killed'
  proc = s.run(d, wait=False)
  first_batch = d / 'batches' / 'recovr' / '00000.json'
  while not first_batch.exists() and proc.poll() is None:
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  rc, _, _ = s.run(d)
  yield ('SIGKILL after the first batch, then the same command',
         f'exit {rc}; outputs byte-identical to an uninterrupted run: '
         f'{_same(d, clean)}', rc == 0 and _same(d, clean))

  d = s.copy(clean, 'killed_noresume')
  shutil.rmtree(d / 'batches')  # the first batch seen is the new run's
  proc = s.run(d, '--noresume', '--rrf_k=1', wait=False)
  first_batch = d / 'batches' / 'recovr' / '00000.json'
  while not first_batch.exists() and proc.poll() is None:
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  stale = (d / 'metrics.json').exists()
  marked = (d / 'INCOMPLETE').exists()
  yield ('SIGKILL of a `--noresume --rrf_k=1` run over a finished one',
         f'old metrics.json left beside the new settings: {stale}; '
         f'INCOMPLETE marker: {marked}', not stale and marked)


def _module(*args, cwd=None):
  done = subprocess.run([sys.executable, '-m', *args], capture_output=True,
                        text=True, check=False, cwd=cwd)
  return done.returncode, done.stdout + done.stderr


def _raises(fn, pattern) -> tuple[str, bool]:
  """Calls ``fn``: the outcome of the error it raises (expected: one
  matching ``pattern``)."""
  try:
    fn()
  except (OSError, ValueError) as e:
    return (f'refused: {type(e).__name__}: {e}',
            bool(re.search(pattern, str(e))))
  return 'accepted without an error', False


def file_cases(s: Scratch, clean: pathlib.Path):
  """Files read only in part, and the resources around them: each
  refused with the file, the row or line and the field named."""
  from recovr_jax import readers  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.files import data  # pylint: disable=g-import-not-at-top
  from recovr_jax.run import results  # pylint: disable=g-import-not-at-top
  from recovr_jax.study import study  # pylint: disable=g-import-not-at-top

  # The user's CSV.
  header = 'pth1,pth2,edit,txt1,txt2'
  for name, text, pattern in (
      ('a duplicated column name', f'{header},edit\na,b,x,c,d,y\n',
       "row 1: the column 'edit' appears twice"),
      ('a row with more fields than the header',
       f'{header}\na,b,x,c,d\nb,c,make it red, please,c,d\n',
       r'row 3: 6 fields, the header has 5'),
      ('a row with fewer fields', f'{header}\na,b,x\n',
       r'row 2: 3 fields, the header has 5'),
      ('an unclosed quote', f'{header}\na,b,"x,c,d\nb,c,y,c,d\n',
       r'row 2: .*unclosed quote')):
    path = s.root / 'files_user.csv'
    path.write_text(text)
    yield (f'an annotation CSV with {name}',
           *_raises(lambda p=path: data.load_covr_csv(p), pattern))

  # The user's NPZ: gallery embeddings cut while copied, or holding
  # Python objects (which NumPy would unpickle: code run on load).
  gallery = s.root / 'files_gallery.npz'
  np.savez(gallery, ids=np.array(['a', 'b']), video=np.eye(2, 3))
  whole = gallery.read_bytes()
  gallery.write_bytes(whole[:len(whole) // 2])
  yield ('a gallery embeddings NPZ cut in half', *_raises(
      lambda: data.load_embeddings(gallery),
      r'files_gallery.npz: not a readable .npz archive'))
  np.savez(gallery, ids=np.array(['a', 'b']), video=np.eye(2, 3),
           captions=np.array(['red car', None], dtype=object))
  yield ('a gallery embeddings NPZ whose captions are Python objects',
         *_raises(lambda: data.load_embeddings(gallery),
                  r'files_gallery.npz: not a readable .npz archive.*'
                  'allow_pickle=False'))

  # The project's own outputs.
  ranks = (clean / 'ranks.csv').read_bytes()
  half = ranks.rindex(b'\n', 0, len(ranks) // 2)
  for name, cut, pattern in (
      ('mid-row', half + 9, 'the last line has no newline'),
      ('at a row end', half + 1, r"rows of method 'recovr'; the run has")):
    d = s.copy(clean, f'files_ranks_{cut}')
    (d / 'ranks.csv').write_bytes(ranks[:cut])
    yield (f'`load_run` on a ranks.csv cut {name}',
           *_raises(lambda d=d: results.load_run(d, pandas=False), pattern))
  for name in ('resolved_config.json', 'metrics.csv'):
    d = s.copy(clean, f'files_cut_{name}')
    raw = (d / name).read_bytes()
    (d / name).write_bytes(raw[:len(raw) // 2])
    yield (f'`load_run` on a {name} cut in half', *_raises(
        lambda d=d: results.load_run(d, pandas=False),
        rf'{name}, line [0-9]+: (not valid JSON|the last line)'))
  d = s.copy(clean, 'files_killed')
  (d / readers.INCOMPLETE).write_text('killed\n')
  rc, text = _module('experiments.evaluate.compare_runs',
                     f'--runs={clean},{d}', '--resamples=10')
  yield ('`compare_runs` on the directory of a killed run (INCOMPLETE)',
         *_refused(rc, text, 'its run has not finished'))
  d = s.copy(clean, 'files_cut_trajectories')
  path = d / 'trajectories.jsonl'
  path.write_bytes(path.read_bytes()[:-30])
  rc, text = _module('experiments.evaluate.compare_runs',
                     f'--runs={clean},{d}', '--resamples=10')
  yield ('`compare_runs` on a trajectories.jsonl cut mid-line',
         *_refused(rc, text, r'trajectories.jsonl, line [0-9]+: the last '
                   'line has no newline'))

  # The study's access file.
  logs = s.root / 'files_access'
  logs.mkdir()
  good = study._access(logs, ('p01', 'p02'))  # pylint: disable=protected-access
  for name, change, pattern in (
      ('an empty code', {'p01': ''}, "participant 'p01' is not a string"),
      ('a code that is a number', {'p01': 7}, "participant 'p01' is not a "
       'string'),
      ('a code for an unknown participant', {'eve': 'x' * 22},
       "participant 'eve', who is not in this study")):
    (logs / study.ACCESS_FILE).write_text(json.dumps(
        {**good, 'codes': {**good['codes'], **change}}))
    yield (f'the study restarted on an access.json with {name}', *_raises(
        lambda: study._access(logs, ('p01', 'p02')), pattern))  # pylint: disable=protected-access

  # Images: a forged header claiming 20,000 x 20,000 pixels.
  import struct  # pylint: disable=g-import-not-at-top
  import zlib  # pylint: disable=g-import-not-at-top

  def chunk(kind, body):
    return (struct.pack('>I', len(body)) + kind + body
            + struct.pack('>I', zlib.crc32(kind + body)))
  bomb = s.root / 'files_frames' / 'v0' / '0000.png'
  bomb.parent.mkdir(parents=True)
  bomb.write_bytes(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack(
      '>IIBBBBB', 20_000, 20_000, 8, 2, 0, 0, 0)) + chunk(
          b'IDAT', zlib.compress(b'')) + chunk(b'IEND', b''))
  yield ('a 20,000 x 20,000-pixel frame (a forged header)', *_raises(
      lambda: readers.read_image(bomb), r'0000.png: .*over 50,000,000 '
      'pixels'))

  # The launcher and the coordinator's port.
  flagfile = s.root / 'files_where.flags'
  out = s.root / 'files_from_flagfile'
  flagfile.write_text(f'--output_dir={out}\n--rrf_k=nan\n')
  rc, text = _module('experiments.launch', '--num_processes=2', '--',
                     *TINY, f'--cache_dir={s.cache}', f'--flagfile={flagfile}')
  logged = (out / 'process_1.log').is_file()
  yield ('the launcher with --output_dir set in a flagfile', f'exit {rc}; '
         f'process 1\'s log in the flagfile\'s --output_dir: {logged}',
         rc != 0 and logged)
  with socket.socket() as held:
    held.bind(('127.0.0.1', 0))
    held.listen()
    port = held.getsockname()[1]
    rc, text, _ = s.run(s.root / 'files_port', '--num_processes=2',
                        '--process_id=0',
                        f'--coordinator_address=127.0.0.1:{port}')
  yield ('process 0 of a run on a coordinator port already in use',
         *_refused(rc, text, f'port {port} is already in use'))
  # Two processes started by hand that disagree.
  for name, extra, pattern in (
      ('--num_processes (2 and 3)', ('--num_processes=3',),
       r'different --num_processes \(2, 3; 2 joined\)'),
      ('settings (--seed=0 and --seed=1)', ('--num_processes=2', '--seed=1'),
       'process 1 was started with other settings than process 0 .*they '
       'differ in --seed')):
    with socket.socket() as free:
      free.bind(('127.0.0.1', 0))
      port = free.getsockname()[1]
    common = (f'--coordinator_address=127.0.0.1:{port}',)
    d = s.root / f'files_disagree_{extra[-1][2:6]}'
    first = s.run(d, *common, '--num_processes=2', '--process_id=0',
                  wait=False)
    rc, text, _ = s.run(d, *common, '--process_id=1', *extra)
    first_text, _ = first.communicate(timeout=300)
    both = rc != 0 and first.returncode != 0
    yield (f'two processes started by hand with different {name}',
           f'both refused (exits {first.returncode}, {rc}): '
           f'{_message(text)}', both and bool(re.search(pattern, text))
           and bool(re.search(pattern, first_text)))


def _child_pid(parent: int, marker: str) -> int | None:
  """The pid of ``parent``'s child process whose command line holds the
  argument ``marker`` (None: none yet)."""
  for proc in pathlib.Path('/proc').iterdir():
    if not proc.name.isdigit():
      continue
    try:
      ppid = int((proc / 'stat').read_text().rsplit(')', 1)[1].split()[1])
      args = (proc / 'cmdline').read_bytes().split(b'\0')
    except (OSError, ValueError, IndexError):
      continue
    if ppid == parent and marker.encode() in args:
      return int(proc.name)
  return None


def multi_process_cases(s: Scratch):
  """Two processes of the jitted driver (one mesh over both): process 1
  killed after the first batch; the launcher must name it and the same
  command resume to the one-process outputs."""
  ref = s.root / 'jit_one'
  s.run(ref, '--simulation=jit')
  d = s.root / 'jit_two'
  cmd = [sys.executable, '-m', 'experiments.launch', '--num_processes=2',
         '--', *TINY, f'--cache_dir={s.cache}', f'--output_dir={d}',
         '--simulation=jit']
  launch = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
  first_batch = d / 'batches' / 'recovr' / '00000.json'
  while not first_batch.exists() and launch.poll() is None:
    time.sleep(0.05)
  victim = _child_pid(launch.pid, '--process_id=1')
  if victim is not None:
    os.kill(victim, signal.SIGKILL)
  text = launch.communicate(timeout=600)[0]
  named = 'process 1 of 2 was killed by signal 9 (SIGKILL)' in text
  done = subprocess.run(cmd, capture_output=True, text=True, check=False)
  same = done.returncode == 0 and _same(d, ref)
  yield ('`--simulation=jit` over 2 processes, process 1 SIGKILLed after '
         'the first batch, then the same command',
         f'launch exit {launch.returncode}, the process named: {named}; '
         f'resumed exit {done.returncode}, outputs byte-identical to one '
         f'process: {same}', victim is not None and launch.returncode != 0
         and named and same)


def _snapshot(folder: pathlib.Path) -> dict:
  return {str(p.relative_to(folder)): p.read_bytes()
          for p in sorted(folder.rglob('*')) if p.is_file()}


def _refusal_of(fn, pattern) -> tuple[str, bool]:
  """Calls ``fn`` (an entry point's own step): the one line of the error
  it raises (expected: a usage error matching ``pattern``)."""
  try:
    fn()
  except Exception as e:  # pylint: disable=broad-except
    return (f'refused: {e}', isinstance(e, app.UsageError) and
            bool(re.search(pattern, str(e))) and '\n' not in str(e))
  return 'accepted without an error', False


def _peak_run(s: Scratch, out, *args) -> tuple[int, float]:
  """``s.run`` of ``args`` into ``out``: its exit status and the peak
  resident memory of its process, MiB."""
  proc = s.run(out, *args, wait=False)
  proc.stdout.read()
  _, status, usage = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  proc.stdout.close()
  return proc.returncode, usage.ru_maxrss / 1024


def fault_cases(s: Scratch, clean: pathlib.Path):
  """A run that travels, refuses or shares its files (issue "faults"):
  what of a checkout an archive carries, the archive's own check, a
  refusal over a finished run, one query repeated, sizes before
  allocations, two writers of one cache, one-line refusals."""
  import errno  # pylint: disable=g-import-not-at-top
  from unittest import mock  # pylint: disable=g-import-not-at-top
  from experiments.common import archive  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top

  # What travels: a checkout of three files, one a link leading outside.
  checkout = s.root / 'checkout'
  (checkout / 'pkg').mkdir(parents=True)
  (checkout / 'pkg' / 'a.py').write_text('A = 1\n')
  (checkout / 'pkg' / 'inside.py').symlink_to('a.py')
  (checkout / 'pkg' / 'outside.py').symlink_to('/etc/hostname')
  outcome, ok = _refusal_of(lambda: archive.copy_code(
      checkout, ['pkg/a.py', 'pkg/inside.py', 'pkg/outside.py'],
      s.root / 'code1'), r'pkg/outside.py is a link to .*outside the '
      'checkout')
  archive.copy_code(checkout, ['pkg/a.py', 'pkg/inside.py'], s.root / 'code2')
  kept = (s.root / 'code2' / 'pkg' / 'inside.py').is_symlink()
  yield ('an archive of a checkout with a link inside it and one leading '
         'outside', f'{outcome}; without the outside one, the inside link '
         f'travels as a link: {kept}', ok and kept)
  outside = s.root / 'my.flags'
  outside.write_text('--rrf_k=30\n')
  args, carried = archive.carried_flagfiles(
      [f'--flagfile={outside}', '--seed=1'], checkout, ['pkg/a.py'])
  ok = args == ['--flagfile=../flags/my.flags', '--seed=1'] and carried == {
      'my.flags': outside.resolve()}
  yield ('an archive of a run whose --flagfile lies outside the checkout',
         f'carried in the archive as {args[0]}, run.sh names the copy: '
         f'{ok}', ok)
  output = s.root / 'packs' / 'kept.v1.tar.gz'
  lock = archive.claim(output)
  try:
    outcome, ok = _refusal_of(lambda: archive.claim(output),
                              'another pack is writing it now')
  finally:
    lock.close()
  yield ('a second pack to the same --output while one writes it', outcome,
         ok)
  stage = s.root / 'stage' / archive.stem(output)
  shutil.copytree(s.root / 'code2', stage / 'code', symlinks=True)
  full = OSError(errno.ENOSPC, 'No space left on device')
  with mock.patch.object(archive.tarfile, 'open', side_effect=full):
    outcome, ok = _refusal_of(lambda: archive.write_archive(stage, output),
                              r'--output=.*the disk filled while packing')
  left = sorted(p.name for p in output.parent.iterdir()
                if p.name.endswith('.part') or p.name == output.name)
  yield ('the disk full while packing an archive', f'{outcome}; left '
         f'behind: {left or "nothing"}; top folder {stage.name} (the whole '
         'stem)', ok and not left and stage.name == 'kept.v1')

  archive_out = s.root / 'packs' / 'checks.tar.gz'
  rc, text = _module('experiments.bundle', f'--output={archive_out}',
                     f'--work_dir={s.root / "bundle_work"}', '--',
                     '--only_check_args')
  outcome, ok = _refused(rc, text, r'wrote none of .* nothing was written '
                         'to --output')
  yield ('an archive of a command that writes no outputs (`-- '
         '--only_check_args`)', f'{outcome}; archive written: '
         f'{archive_out.exists()}', ok and not archive_out.exists() and
         'Traceback' not in text)

  # The archive's own check: the clean run as the packing machine wrote it,
  # then one byte of its metrics changed.
  unpacked = s.root / 'unpacked'
  shutil.copytree(clean, unpacked / 'out' / 'jit')
  (unpacked / 'bundle.json').write_text(json.dumps({'outputs': {'jit': {
      name: hashlib.sha256((clean / name).read_bytes()).hexdigest()
      for name in ('metrics.json', 'trajectories.jsonl')}}}))
  check = lambda: subprocess.run([sys.executable, '-c', archive.CHECK],
                                 cwd=unpacked, capture_output=True,
                                 text=True, check=False)
  same = check()
  metrics = unpacked / 'out' / 'jit' / 'metrics.json'
  metrics.write_bytes(metrics.read_bytes().replace(b'0', b'1', 1))
  changed = check()
  yield ('run.sh\'s check on outputs as packed, then with one byte of '
         'metrics.json changed', f'exit {same.returncode} '
         f'({same.stdout.count("match:")} match); then exit '
         f'{changed.returncode}: {changed.stdout.splitlines()[0]}',
         same.returncode == 0 and changed.returncode == 1 and
         'MISMATCH: out/jit/metrics.json' in changed.stdout)

  # A refusal after the folder is held leaves a finished run as it was.
  d = s.copy(clean, 'refused_over_finished')
  before = _snapshot(d)
  blocked = s.root / 'blocked_cache2'
  blocked.mkdir()
  text_cache = encoders.TextEncoder(shared=False).cache_path(blocked)
  text_cache.mkdir()
  rc, text, _ = s.run(d, '--noresume', '--rrf_k=1', cache_dir=blocked)
  outcome, ok = _refused(rc, text, 'is not a file')
  same = _snapshot(d) == before
  yield ('`--noresume --rrf_k=1` over a finished run, refused by its cache '
         '(a folder where the text cache goes)', f'{outcome}; the finished '
         f'run byte for byte as it was ({len(before)} files): {same}',
         ok and same)

  # One query repeated: no interval, mark or "ahead".
  d = s.root / 'one_query'
  rc, text, _ = s.run(d, '--num_test_triplets=1', '--query_repeats=12',
                      '--methods=recovr,umivr')
  tables = (d / 'tables.tex').read_text() if rc == 0 else ''
  report = (d / 'report.md').read_text() if rc == 0 else ''
  marked = '\\textbf' in tables or 'is ahead of' in report
  ok = (rc == 0 and 'No intervals: every session repeats one query' in
        tables and not marked)
  yield ('12 sessions of one query (`--num_test_triplets=1 '
         '--query_repeats=12`)', f'exit {rc}; tables.tex says there are no '
         f'intervals: {"No intervals" in tables}; a bold or "ahead" mark: '
         f'{marked}', ok)

  # Sizes before allocations: only the repeats the sessions need are made
  # (before, all 800,000 were tiled: 9,600,000 sessions' arrays).
  rc0, plain = _peak_run(s, s.root / 'repeats_none')
  d = s.root / 'repeats_needed'
  rc, peak = _peak_run(s, d, '--query_repeats=800000')
  same = rc == 0 and rc0 == 0 and _same(d, clean)
  yield ('`--query_repeats=800000` (9,600,000 sessions) with '
         '`--num_sessions=12`', f'exit {rc}; peak memory {peak:,.0f} MiB '
         f'against {plain:,.0f} MiB without repeats; outputs equal the run '
         f'without repeats: {same}', same and peak < plain + 100)
  d = s.root / 'too_many'
  rc, text, secs = s.run(d, '--query_repeats=1000000000')
  outcome, ok = _refused(rc, text, r'more than the 10,000,000 a run holds; '
                         r'pass at most --query_repeats=833333')
  yield ('`--query_repeats=1000000000`', f'{outcome} after {secs:.0f} s; '
         f'a folder made: {d.exists()}', ok and not d.exists())

  # Two writers of one fresh cache at once.
  shared = s.root / 'shared_cache'
  procs = [s.run(s.root / f'writer{i}', cache_dir=shared, wait=False)
           for i in range(2)]
  codes = [p.wait(timeout=900) for p in procs]
  for p in procs:
    p.stdout.close()
  same = all(_same(s.root / f'writer{i}', clean) for i in range(2)) if (
      codes == [0, 0]) else False
  stray = sorted(p.name for p in shared.rglob('*') if '.tmp' in p.name or
                 p.name.endswith('.part'))
  yield ('two runs writing one fresh --cache_dir at once', f'exits {codes}; '
         f'outputs equal a clean run: {same}; half-written files left: '
         f'{stray or "none"}', codes == [0, 0] and same and not stray)

  # The viewer rebuilds the run's data from flags.txt: an edited one is
  # refused, naming it.
  d = s.copy(clean, 'viewer_edited')
  flags_txt = d / 'flags.txt'
  flags_txt.write_text(flags_txt.read_text().replace(
      '--gallery_size=300', '--gallery_size=301'))
  server = _Server(None, None, command=['experiments.view',
                                        f'--run_dir={d}'])
  server.stop()
  edited = '--gallery_size=301' in flags_txt.read_text()
  outcome, ok = _refused(server.rc, server.text, r'flags.txt: it rebuilds '
                         r'other data than the run read')
  yield ('the viewer on a run whose flags.txt was edited since (another '
         '--gallery_size)', outcome, edited and ok)

  # One-line refusals.
  latin = s.root / 'latin.flags'
  latin.write_bytes(b'--seed=1\n# caf\xe9\n')
  rc, text = _module('experiments.run', f'--flagfile={latin}')
  outcome, ok = _refused(rc, text, r'not UTF-8 text \(byte 0xe9 at offset '
                         r'14\); save it as UTF-8')
  yield ('a flag file in Latin-1', outcome, ok and 'Traceback' not in text)
  rc, text = _module('experiments.run', '--noplots=false')
  outcome, ok = _refused(rc, text, '--noplots takes no value; write '
                         '--plots=false')
  yield ('`--noplots=false`', outcome, ok and 'Traceback' not in text)
  d = s.root / 'no_encoder'
  rc, text, secs = s.run(d, '--text_encoder_dir=/no/such/minilm')
  outcome, ok = _refused(rc, text, '--text_encoder_dir /no/such/minilm: no '
                         'such directory')
  yield ('`--text_encoder_dir` naming no folder', f'{outcome} after '
         f'{secs:.0f} s; a folder made: {d.exists()}',
         ok and not d.exists() and 'Traceback' not in text)
  weightless = encoders.weightless_copy(encoders.minilm_path(),
                                        s.root / 'weightless')
  d = s.root / 'weightless_run'
  rc, text, secs = s.run(d, f'--text_encoder_dir={weightless}',
                         cache_dir=s.root / 'empty_cache')
  outcome, ok = _refused(rc, text, '--text_encoder_dir')
  yield ('a MiniLM copy without weights and a cache without its texts',
         f'{outcome}; a folder made: {d.exists()}',
         ok and not d.exists() and 'Traceback' not in text)


# Straight to the instances (the cases try the instance pages' forms; the
# consent form goes through the same checks).
STUDY = ['--benchmark=v1', '--num_test_triplets=12', '--num_train_triplets=20',
         '--gallery_size=300', '--participants=ann,bob', '--instances=2',
         '--noparticipant_flow']


class _Server:
  """``python -m experiments.study`` in a subprocess on a free port, read
  until it serves (or exits: ``self.rc``)."""

  def __init__(self, s: Scratch, out, *args, command=None):
    with socket.socket() as sock:
      sock.bind(('127.0.0.1', 0))
      self.port = sock.getsockname()[1]
    command = command or ['experiments.study', *STUDY,
                          f'--cache_dir={s.cache}', f'--output_dir={out}']
    self.proc = subprocess.Popen(
        [sys.executable, '-m', *command, f'--port={self.port}', *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    self.text, self.rc = '', None
    for line in self.proc.stdout:
      self.text += line
      if 'open http' in line:
        break
    else:
      self.rc = self.proc.wait()
      return
    for _ in range(200):  # until uvicorn accepts
      try:
        socket.create_connection(('127.0.0.1', self.port), 0.2).close()
        break
      except OSError:
        time.sleep(0.1)

  def request(self, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=60)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    out = (r.status, r.read().decode(errors='replace'), r.getheader(
        'set-cookie') or '')
    conn.close()
    return out

  def stop(self):
    if self.rc is None:
      self.proc.terminate()
      self.proc.wait()
      self.proc.stdout.close()


def viewer_cases(clean: pathlib.Path):
  """The session viewer on the clean run: a foreign Host, numbers that are
  not ASCII digits or are too long, a session beyond the run."""
  server = _Server(None, None, command=['experiments.view',
                                        f'--run_dir={clean}', '--nomedia'])
  if server.rc is not None:
    yield ('the viewer starts', f'exit {server.rc}: '
           f'{_message(server.text)}', False)
    return
  try:
    status, _, _ = server.request('GET', '/')
    yield 'the viewer\'s index', f'HTTP {status}', status == 200
    status, body, _ = server.request('GET', '/',
                                     headers={'Host': 'attacker.example'})
    yield ('the index asked for under another Host (DNS rebinding)',
           f'HTTP {status}; shows sessions: {"/s/0" in body}',
           status == 400 and '/s/0' not in body)
    for what, path in (
        ('a superscript digit as the turn', '/s/0?turn=%C2%B2'),
        ('a 5,000-digit page number', '/?page=' + '9' * 5000),
        ('a session beyond the run', '/s/99999'),
        ('a session id that is not a number', '/s/%C2%B9')):
      status, _, _ = server.request('GET', path)
      yield f'the viewer asked for {what}', f'HTTP {status}', status == 400
  finally:
    server.stop()


def _form(fields) -> tuple[str, dict]:
  return urllib.parse.urlencode(fields), {
      'Content-Type': 'application/x-www-form-urlencoded'}


def study_cases(s: Scratch):
  """The study app: access, forged forms, limits, a second server, remote
  binding, a damaged log."""
  out = s.root / 'study'
  server = _Server(s, out)
  if server.rc is not None:
    yield 'the study server starts', f'exit {server.rc}: {_message(server.text)}', False
    return
  try:
    access = json.loads((out / 'logs' / 'access.json').read_text())
    mode = (out / 'logs' / 'access.json').stat().st_mode & 0o777
    yield ('the participants\' access codes on disk',
           f'access.json mode {mode:o}', mode == 0o600)
    status, body, _ = server.request('GET', '/p/ann')
    yield ('a participant\'s page without signing in',
           f'HTTP {status}; shows a video: {"<video" in body or ".gif" in body}',
           status == 403 and '.gif' not in body)
    status, _, cookie = server.request('GET', '/p/ann/join?code=guess')
    yield 'signing in with a guessed code', f'HTTP {status}', status == 403
    status, _, cookie = server.request(
        'GET', f'/p/ann/join?code={access["codes"]["ann"]}')
    cookie = cookie.split(';')[0]
    _, page, _ = server.request('GET', '/p/ann', headers={'Cookie': cookie})
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    view = {k: re.search(rf'name="{k}" value="(\d+)"', page).group(1)
            for k in ('instance', 'turn')}
    log = out / 'logs' / 'ann.jsonl'
    before = log.read_bytes()

    def post(fields, **headers):
      body, h = _form(fields)
      return server.request('POST', '/p/ann/feedback', body, {
          **h, 'Cookie': cookie, **headers})[0]

    good = dict(view, feedback='red', csrf=csrf)
    status = post(good, Origin='http://evil.example')
    yield ('a signed-in participant\'s form posted from another site',
           f'HTTP {status}; log unchanged: {log.read_bytes() == before}',
           status == 403 and log.read_bytes() == before)
    status = post(dict(good, csrf='forged'))
    yield ('a form without this study\'s CSRF token',
           f'HTTP {status}; log unchanged: {log.read_bytes() == before}',
           status == 403 and log.read_bytes() == before)
    report_dir = out / 'report'
    status = server.request('POST', '/admin/report', '', {
        'Cookie': cookie})[0]
    yield ('a participant posting the Table 4 build',
           f'HTTP {status}; build started: {report_dir.exists()}',
           status == 403 and not report_dir.exists())
    admin = f'recovr_study_admin={access["admin"]}'
    status = server.request('POST', '/admin/report', '', {
        'Cookie': admin, 'Origin': 'http://evil.example'})[0]
    yield ('the Table 4 build posted from another site with the admin\'s '
           'cookie', f'HTTP {status}; build started: {report_dir.exists()}',
           status == 403 and not report_dir.exists())
    bob = f'{cookie.split("=")[0]}={access["codes"]["bob"]}'
    status = post(good, Cookie=bob)
    yield ('ann\'s form sent with bob\'s access code',
           f'HTTP {status}; log unchanged: {log.read_bytes() == before}',
           status == 403 and log.read_bytes() == before)
    status = post(dict(good, feedback='x' * 2_000_000))
    yield ('a 2 MB feedback', f'HTTP {status}; log unchanged: '
           f'{log.read_bytes() == before}',
           status == 413 and log.read_bytes() == before)
    status = post(dict(good, feedback='red\x00\x1b[31m'))
    last = json.loads(log.read_text().splitlines()[-1])
    clean = '\x00' not in json.dumps(last) and '\x1b' not in last.get(
        'feedback', '')
    yield ('a feedback with NUL and ESC characters',
           f'HTTP {status}; logged without them: {clean}',
           status == 303 and clean)
    second = _Server(s, out)
    second.stop()
    yield ('a second study server on the same output directory',
           *_refused(second.rc, second.text, 'another study server'))
  finally:
    server.stop()
  remote = _Server(s, s.root / 'study_remote', '--host=0.0.0.0')
  remote.stop()
  yield ('`--host=0.0.0.0` without --allow_remote',
         *_refused(remote.rc, remote.text, 'allow_remote'))
  lines = log.read_text().splitlines()
  lines[-1] = lines[-1][:20] + '\x00' + lines[-1][20:]
  log.write_text('\n'.join(lines) + '\n')
  again = _Server(s, out)
  try:
    status, page, _ = again.request('GET', '/p/ann',
                                    headers={'Cookie': cookie})
    warned = 'was damaged at line' in again.text
    yield ('a damaged last line in a participant\'s log, then a restart',
           f'warning at start: {warned}; participant page HTTP {status}',
           again.rc is None and warned and status == 200)
  finally:
    again.stop()


def _import_covr(root: pathlib.Path, out: pathlib.Path):
  """``import_covr`` of ``root``'s ``emb/`` and ``ann.csv`` into ``out``."""
  return subprocess.run(
      [sys.executable, '-m', 'experiments.data.import_covr',
       f'--embeddings_dir={root / "emb"}', f'--annotations={root / "ann.csv"}',
       f'--output={out}', f'--reference_output={root / "r.npz"}'],
      capture_output=True, text=True, check=False)


def importer_cases(s: Scratch):
  """``experiments.data.import_covr`` on crafted ``.pth`` headers."""
  from recovr_jax.envs.files import torch_files  # pylint: disable=g-import-not-at-top
  data = np.arange(12, dtype=np.float32)
  for name, header in (('a negative stride', (0, (4,), (-1,))),
                       ('stride 0 over a 1 GiB size', (0, (1 << 28,), (0,))),
                       ('a stride far past the storage', (0, (3, 4),
                                                          (4, 1 << 28))),
                       ('a negative offset', (-4, (2,), (1,)))):
    root = s.root / f'import_{abs(hash(name))}'
    (root / 'emb' / '00').mkdir(parents=True)
    (root / 'ann.csv').write_text(
        'pth1,pth2,edit,txt1,txt2\n00/r,00/t,make it red,a,b\n')
    torch_files.save(root / 'emb' / '00' / 'r.pth', data.reshape(3, 4))
    torch_files.save(root / 'emb' / '00' / 't.pth', data, header=header)
    out = root / 'g.npz'
    done = _import_covr(root, out)
    outcome, ok = _refused(done.returncode, done.stdout + done.stderr,
                           r't\.pth')
    yield (f'import_covr: a feature file with {name}',
           outcome + f'; output written: {out.exists()}',
           ok and done.returncode == 1 and not out.exists())
  # Frame scores near float64's limit (CoVR's softmax pooling).
  root = s.root / 'import_scores'
  (root / 'emb' / '00').mkdir(parents=True)
  (root / 'ann.csv').write_text(
      'pth1,pth2,edit,txt1,txt2,scores\n00/r,00/t,make it red,a,b,'
      '"[1e308, -1e308, 1e308, 0]"\n')
  torch_files.save(root / 'emb' / '00' / 'r.pth', data.reshape(4, 3))
  torch_files.save(root / 'emb' / '00' / 't.pth', data.reshape(4, 3))
  out = root / 'g.npz'
  done = _import_covr(root, out)
  finite = False
  if done.returncode == 0 and out.exists():
    with np.load(out) as g:
      finite = bool(np.isfinite(g['video']).all())
  yield ('import_covr: frame scores near float64\'s limit',
         f'exit {done.returncode}; gallery finite: {finite}',
         done.returncode == 0 and finite)


def lora_cases(s: Scratch):
  """A LoRA adapter whose tensors adapt nothing the model has."""
  from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
  from recovr_jax import checksums  # pylint: disable=g-import-not-at-top
  shipped = pathlib.Path(__file__).resolve().parents[2] / 'recovr_jax' / \
      'checkpoints' / 'smollm2_world'
  for name, edit, pattern in (
      ('a projection renamed (q_proj -> qproj)', 'rename',
       r'adapter\.safetensors: tensor 0/qproj: not a Llama projection'),
      ('a layer the model does not have', 'layer',
       r'tensor 99/\.\.\.: the model has 30 layers'),
      ('adapter.safetensors deleted', 'delete',
       'has no adapter.safetensors')):
    d = s.root / f'lora_{edit}'
    shutil.copytree(shipped, d)
    path = d / 'adapter.safetensors'
    if edit == 'delete':
      path.unlink()
    else:
      tensors = st.load_file(str(path))
      for key in [k for k in tensors if k.startswith('0/q_proj/')]:
        new = (key.replace('q_proj', 'qproj') if edit == 'rename' else
               key.replace('0/', '99/', 1))
        tensors[new] = tensors.pop(key)
      st.save_file(tensors, str(path))
    checksums.write_manifest(d)
    rc, text, secs = s.run(s.root / f'lora_run_{edit}',
                           '--reasoner=smollm2_world',
                           f'--reasoner_adapter={d}')
    outcome, ok = _refused(rc, text, pattern)
    yield (f'--reasoner_adapter: {name}', outcome + f' after {secs:.0f} s '
           '(before any model loads)', ok and 'Traceback' not in text)


def _largest_file(directory: pathlib.Path) -> pathlib.Path:
  return max((p for p in directory.rglob('*') if p.is_file()),
             key=lambda p: p.stat().st_size)


def flip_bytes(directory: pathlib.Path, start: int, count: int):
  """Inverts ``count`` bytes from ``start`` of the largest file under
  ``directory`` (a checkpoint's data); returns that file."""
  path = _largest_file(directory)
  raw = bytearray(path.read_bytes())
  for i in range(start, min(start + count, len(raw))):
    raw[i] ^= 0xFF
  path.write_bytes(bytes(raw))
  return path


def _nan_composer(ckpt: pathlib.Path) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.benchmark import generator  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import training  # pylint: disable=g-import-not-at-top
  world = generator.make_world(generator.WorldConfig(
      num_test_triplets=4, num_train_triplets=4, gallery_size=50))
  _, composer = training.load_world_models(ckpt, world)
  composer = jax.tree.map(np.array, composer)
  jax.tree.leaves(composer)[0].flat[0] = np.nan
  encoders.save_params(ckpt / 'composer', composer,
                       encoders.load_metadata(ckpt / 'composer'))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  root = pathlib.Path(tempfile.mkdtemp(prefix='reliability-'))
  s = Scratch(root)
  clean = root / 'clean'
  rc, text, secs = s.run(clean)
  if rc:
    raise RuntimeError(f'the clean reference run failed:\n{text[-2000:]}')
  print(f'clean reference run: {secs:.0f} s', flush=True)
  rows = []
  repo = str(pathlib.Path(__file__).resolve().parents[2])
  groups = {'runner': lambda: cases(s, clean),
            'files': lambda: file_cases(s, clean),
            'processes': lambda: multi_process_cases(s),
            'study': lambda: study_cases(s),
            'viewer': lambda: viewer_cases(clean),
            'importer': lambda: importer_cases(s), 'lora': lambda: lora_cases(s),
            'faults': lambda: fault_cases(s, clean)}
  for case, outcome, ok in itertools.chain.from_iterable(
      groups[g]() for g in GROUPS if g in _GROUPS.value):
    outcome = outcome.replace(str(root), '<scratch>').replace(repo, '<repo>')
    print(f'[{"ok" if ok else "UNEXPECTED"}] {case}: {outcome}', flush=True)
    rows.append((case, outcome, ok))
  lines = ['| case | what the run does now | as intended |',
           '|---|---|---|']
  for case, outcome, ok in rows:
    outcome = outcome.replace('|', '\\|')
    lines.append(f'| {case} | {outcome} | {"yes" if ok else "NO"} |')
  table = '\n'.join(lines) + '\n'
  outputs.write_markdown(table)
  if not _KEEP.value:
    shutil.rmtree(root, ignore_errors=True)
  bad = [r[0] for r in rows if not r[2]]
  if bad:
    return f'{len(bad)} case(s) not as intended: {"; ".join(bad)}'
  return None


if __name__ == '__main__':
  cli.run(main)
