r"""The session viewer: a finished run's sessions turn by turn, in a browser.

    python -m experiments.view --run_dir=out/quickstart

serves http://127.0.0.1:8766/: the sessions with each method's target rank
per turn, filtered by method, outcome (found, not found, a failure mode)
and turn; a session's page shows the reference and the target, and per turn
(two methods side by side) the feedback, the question, the reasoner's
replies, rank-cap firing, the target's rank and the shown top 10, as
animations on the world and ids and captions on files
(``recovr_jax.study.viewer``); on the world, also the target's true
values and per turn what the user named (replayed) and what the reasoner's
search states, each marked against the target's. It rebuilds the run's data from its
``flags.txt`` to show the videos (the gallery's cache makes that quick);
``--nomedia`` shows ids from the run's files only.

    python -m experiments.view --run_dir=out/quickstart --export_session=3 \
        --export_methods=recovr,umivr --export_to=session_3.html

writes one session's page as a single HTML file that opens without the
server (its animations inside it, as base64 GIFs), and exits.
"""

import pathlib

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.common import run_flags

_RUN_DIR = flags.DEFINE_string('run_dir', None,
                               'A finished run directory (experiments.run '
                               '--output_dir, or one member of a sweep).')
_BESIDE = flags.DEFINE_string(
    'beside_run_dir', None, 'A second finished run of the same sessions '
    '(e.g. the same flags with another --reasoner), held beside --run_dir: '
    'its methods are listed as <method>@<its folder name>, to be compared '
    "session by session. The videos are --run_dir's.")
_HOST = flags.DEFINE_string(
    'host', '127.0.0.1', 'Address the viewer listens on (127.0.0.1: this '
    'machine only). Any other address needs --allow_remote.')
_REMOTE = flags.DEFINE_bool(
    'allow_remote', False, 'Let --host be an address other machines reach '
    '(the pages show every session, its target and the videos).')
_PORT = flags.DEFINE_integer('port', 8766, 'Port of the viewer.')
_MEDIA = flags.DEFINE_bool(
    'media', True, "Rebuild the run's data from its flags.txt to show the "
    'videos (animations on the world or with --frames_dir, captions on '
    'files); off: video ids only, nothing loaded.')
_FRAMES_DIR = flags.DEFINE_string(
    'frames_dir', None, '--data=files runs: <frames_dir>/<video id>/ '
    'frame images shown as animations (as the study shows them).')
_VIDEO_SIZE = flags.DEFINE_integer(
    'video_size', 128, 'Pixels of the longer side of a shown video.')

_EXPORT = flags.DEFINE_string(
    'export_session', None, 'Write one session\'s page as a single HTML '
    'file that opens without the server (its animations inside it) to '
    '--export_to, and exit: the session id, its methods with '
    '--export_methods.')
_EXPORT_TO = flags.DEFINE_string(
    'export_to', None, 'The .html file --export_session writes (default: '
    'session_<id>.html in the current folder).')
_EXPORT_METHODS = flags.DEFINE_list(
    'export_methods', [], 'One or two methods side by side on the exported '
    'page (default: the run\'s first).')

_OWN = ('run_dir', 'beside_run_dir', 'host', 'allow_remote', 'port', 'media',
        'frames_dir', 'video_size', 'export_session', 'export_to',
        'export_methods')


def _run_config(run_dir: pathlib.Path):
  """The run's ``RunConfig``, from the flags it wrote (``flags.txt``)."""
  path = run_dir / 'flags.txt'
  if not path.is_file():
    raise app.UsageError(f'{path} does not exist: --run_dir must be a run '
                         'directory (or pass --nomedia)')
  args = flags.FLAGS.read_flags_from_files([f'--flagfile={path}'],
                                           force_gnu=False)
  flags.FLAGS(['view'] + [a for a in args if _given(a)], known_only=True)
  return run_flags.config_from_flags()


def _given(arg: str) -> bool:
  """Whether ``--name=value`` (or ``--[no]name``) of a ``flags.txt``, which
  lists every flag, sets a run flag of this process to other than its
  default (only those are passed on: a flag given is a flag checked)."""
  name, eq, text = arg.lstrip('-').partition('=')
  value = True
  if not eq and name not in flags.FLAGS and name.startswith('no'):
    name, value = name[2:], False
  if name in _OWN or name not in flags.FLAGS:
    return False
  flag = flags.FLAGS[name]
  if eq:
    try:
      value = flag.parser.parse(text)
    except (ValueError, TypeError):
      return True   # parsed, and refused, by absl itself
  return value != flag.default


def _videos(run_dir, run):
  """``viewer.Videos`` of the rebuilt run (ids, captions, animations),
  checked against the ids the run's trajectories hold."""
  from recovr_jax.run import run_config  # pylint: disable=g-import-not-at-top
  from recovr_jax.run import runner  # pylint: disable=g-import-not-at-top
  from recovr_jax.run import validation  # pylint: disable=g-import-not-at-top
  from recovr_jax.study import media  # pylint: disable=g-import-not-at-top
  from recovr_jax.study import viewer  # pylint: disable=g-import-not-at-top
  config = _run_config(run_dir)
  print('loading the run\'s data to show its videos (--nomedia: ids only)',
        flush=True)
  try:
    built = runner.build(config, run_config.source(config))
  except (validation.ConfigError, ValueError, FileNotFoundError) as e:
    raise app.UsageError(f'{run_dir}: its data cannot be rebuilt ({e}); '
                         'pass --nomedia to see ids only') from e
  env, source = built.env, built.source
  from recovr_jax.run import integrity  # pylint: disable=g-import-not-at-top
  problem = viewer.rebuilt_problem(run_dir,
                                   integrity.resolved_config(config, source))
  if problem:
    raise app.UsageError(problem)
  ids = tuple(env.video_ids) if env.video_ids is not None else None
  for row in run.rows.values():
    want = row.get('target_id')
    if want is not None and ids is not None and (
        ids[row['target']] != want):
      raise app.UsageError(
          f'{run_dir}: session {row["session"]} names target {want!r} at '
          f'gallery row {row["target"]}, but the rebuilt data has '
          f'{ids[row["target"]]!r} there: the data changed since the run '
          '(pass --nomedia to see ids only)')
  gallery_media = media.of_run(source, built, _FRAMES_DIR.value,
                           _VIDEO_SIZE.value)
  from recovr_jax.study import world_truth  # pylint: disable=g-import-not-at-top
  return (viewer.Videos(ids=ids, captions=tuple(env.captions), media=gallery_media),
          world_truth.of_run(config, built))


def _export(pages) -> None:
  """``--export_session``'s page, written to ``--export_to``."""
  from recovr_jax.study import viewer  # pylint: disable=g-import-not-at-top
  a, b = (list(_EXPORT_METHODS.value) + ['', ''])[:2]
  try:
    html = pages.static_page(_EXPORT.value, a, b)
  except viewer.BadRequest as e:
    raise app.UsageError(f'--export_session / --export_methods: {e}') from e
  out = pathlib.Path(_EXPORT_TO.value or f'session_{_EXPORT.value}.html')
  if out.is_dir():
    raise app.UsageError(f'--export_to={out} is a folder; name an .html '
                         'file')
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(html, encoding='utf-8')
  print(f'wrote {out} ({out.stat().st_size / 1024:,.0f} KiB): session '
        f'{_EXPORT.value}, opens without the server', flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  cli.require(('fastapi', 'uvicorn', 'jinja2'), 'the viewer', 'study')
  if not _RUN_DIR.value:
    raise app.UsageError('--run_dir is required')
  if not 1 <= _PORT.value <= 65535:
    raise app.UsageError(f'--port must be in 1..65535, got {_PORT.value}')
  if _VIDEO_SIZE.value < 16:
    raise app.UsageError(f'--video_size must be >= 16, got '
                         f'{_VIDEO_SIZE.value}')
  if _FRAMES_DIR.value and not pathlib.Path(_FRAMES_DIR.value).is_dir():
    raise app.UsageError(f'--frames_dir {_FRAMES_DIR.value} is not a '
                         'directory')
  if not cli.is_loopback(_HOST.value) and not _REMOTE.value:
    raise app.UsageError(
        f'--host={_HOST.value} opens the viewer to the network; pass '
        '--allow_remote to mean it')
  from recovr_jax import readers  # pylint: disable=g-import-not-at-top
  from recovr_jax.study import viewer  # pylint: disable=g-import-not-at-top
  run_dir = pathlib.Path(_RUN_DIR.value)
  try:
    run = viewer.load(run_dir)
  except (FileNotFoundError, readers.FileError) as e:
    raise app.UsageError(f'--run_dir: {e}') from e
  if _BESIDE.value:
    try:
      run = viewer.beside(run, viewer.load(_BESIDE.value))
    except (FileNotFoundError, readers.FileError, ValueError) as e:
      raise app.UsageError(f'--beside_run_dir: {e}') from e
  if _EXPORT.value is None:
    cli.check_port(_HOST.value, _PORT.value)
  elif len(_EXPORT_METHODS.value) > 2:
    raise app.UsageError(f'--export_methods: one or two methods, got '
                         f'{len(_EXPORT_METHODS.value)}')
  videos, truth = (_videos(run_dir, run) if _MEDIA.value
                   else (viewer.Videos(), None))
  if _EXPORT.value is not None:
    _export(viewer.Viewer(run, videos, truth))
    return
  import uvicorn  # pylint: disable=g-import-not-at-top
  print(f'{len(run.sessions)} sessions x {len(run.methods)} methods of '
        f'{run_dir}: open http://{_HOST.value}:{_PORT.value}/ (Ctrl-C '
        'stops)', flush=True)
  # Requests naming this machine (and --host) only, unless it is open to
  # the network on purpose (--allow_remote: any name it is reached by).
  hosts = (('*',) if _REMOTE.value else
           tuple(dict.fromkeys(viewer.LOCAL_HOSTS + (_HOST.value,))))
  uvicorn.run(viewer.make_app(viewer.Viewer(run, videos, truth), hosts),
              host=_HOST.value,
              port=_PORT.value, log_level='warning')


if __name__ == '__main__':
  cli.run(main, (('Viewer', list(_OWN)),))
