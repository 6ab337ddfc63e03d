"""The archive's own parts (``experiments/bundle.py``): what of the
checkout travels, the flag files carried beside it, one pack per archive at
a time, the archive written whole, and the check ``run.sh`` ends with.
Imports no flags, so tests call it directly."""

import errno
import fcntl
import os
import pathlib
import shutil
import tarfile

from absl import app

# run.sh's last step (from the archive's top folder): its outputs against
# the packing machine's digests, a line per file; exit 1 on a mismatch.
CHECK = """
import hashlib, json, pathlib, sys
record = json.loads(pathlib.Path('bundle.json').read_text())
bad = 0
for simulation, files in record['outputs'].items():
  for name, want in sorted(files.items()):
    path = pathlib.Path('out', simulation, name)
    got = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    bad += got != want
    print(('match' if got == want else 'MISMATCH') + f': out/{simulation}/{name}')
if bad:
  sys.exit(f'{bad} output(s) differ from the packing machine\\'s (bundle.json); '
           'on another backend tied scores may order differently')
"""


def copy_code(root: pathlib.Path, files, code: pathlib.Path) -> None:
  """Copies ``files`` (paths under ``root``) into ``code``: a symbolic
  link to a file inside ``root`` stays a link (its target travels too, as
  a tracked file), one that leads outside is refused (its content is not
  the checkout's)."""
  root = root.resolve()
  for f in files:
    source, dest = root / f, code / f
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
      target = source.resolve()
      if not target.is_relative_to(root):
        raise app.UsageError(
            f'{f} is a link to {target}, outside the checkout: an archive '
            "carries the checkout's own files; put the file itself there")
      dest.symlink_to(os.readlink(source))
      continue
    shutil.copy2(source, dest)


def stem(output: pathlib.Path) -> str:
  """The archive's top folder: its whole name without ``.tar.gz``
  (``kept.v1.tar.gz`` -> ``kept.v1``)."""
  return output.name[:-len('.tar.gz')]


def carried_flagfiles(args, root: pathlib.Path, tracked) -> tuple[list, dict]:
  """``(args, carried)``: the run's flags for the archive, where a
  ``--flagfile`` the checkout does not track (outside it, or untracked) is
  carried in the archive's ``flags/`` (``carried``: its name there -> the
  file) and named from ``code/`` as ``../flags/<name>``; a tracked one is
  named by its path in the checkout. A carried flag file that names
  another flag file is refused (it would not travel)."""
  root, tracked = root.resolve(), set(tracked)
  out, carried = [], {}
  for arg in args:
    if not arg.startswith('--flagfile='):
      out.append(arg)
      continue
    path = (root / arg.split('=', 1)[1]).resolve()
    if path.is_relative_to(root) and str(path.relative_to(root)) in tracked:
      out.append(f'--flagfile={path.relative_to(root)}')
      continue
    if not path.is_file():
      raise app.UsageError(f'{arg}: no such file')
    if '--flagfile' in path.read_text(encoding='utf-8', errors='replace'):
      raise app.UsageError(
          f'{arg}: a flag file outside the checkout\'s tracked files that '
          'names other flag files; the archive carries one file: merge them')
    name = path.name
    while name in carried and carried[name] != path:
      name = '_' + name
    carried[name] = path
    out.append(f'--flagfile=../flags/{name}')
  return out, carried


def claim(output: pathlib.Path):
  """Holds ``output``'s lock for this process (a file beside it), or
  refuses: two packs to one archive would write over each other."""
  output.parent.mkdir(parents=True, exist_ok=True)
  lock = open(output.with_name(f'.{output.name}.lock'), 'w')
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    lock.close()
    raise app.UsageError(f'--output={output}: another pack is writing it '
                         'now; wait for it or name another --output')
  return lock


def write_archive(stage: pathlib.Path, output: pathlib.Path) -> None:
  """``stage`` as a gzipped tar at ``output``: written under a name of
  this process's, then renamed (a reader never sees half an archive); a
  full disk is one line naming ``--output`` and the space, nothing left."""
  part = output.with_name(f'.{output.name}.{os.getpid()}.part')
  try:
    with tarfile.open(part, 'w:gz') as tar:
      tar.add(stage, arcname=stage.name)
    part.replace(output)
  except OSError as e:
    part.unlink(missing_ok=True)
    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
      raise
    raise app.UsageError(
        f'--output={output}: the disk filled while packing '
        f'{size(stage) / 2 ** 20:,.0f} MiB (uncompressed; the archive is '
        'smaller); free space or name another --output') from e


def size(path: pathlib.Path) -> int:
  return (path.stat().st_size if path.is_file() else
          sum(f.stat().st_size for f in path.rglob('*') if f.is_file()))
