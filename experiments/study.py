r"""The human-feedback study app (paper section 4.4, appendix D.3).

    python -m experiments.study --flagfile=experiments/flagfiles/study

serves a local web page (http://127.0.0.1:8765/ by default) where each
participant signs in with an id from --participants and answers up to
--instances composed queries of the test split, at most --num_turns feedback
turns each (default here 3), with the method of --methods (one; default
here recovr) and the reasoner of --reasoner, over the same environment, loop and flags as
``experiments/run.py`` (every runner flag applies). Every turn is appended
to ``<output_dir>/logs/<participant>.jsonl`` before the participant sees
its result; restarting the command continues every participant where they
stopped. ``python -m experiments.study_report`` turns the logs into
Table 4.
"""

import dataclasses
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.common import run_flags
from recovr_jax import drivers
from recovr_jax.protocol import data_source
from recovr_jax.run import assemble
from recovr_jax.run import integrity
from recovr_jax.run import run_config
from recovr_jax.run import runner
from recovr_jax.run import validation
from recovr_jax.study import study

_HOST = flags.DEFINE_string(
    'host', '127.0.0.1', 'Address the study app listens on (127.0.0.1: '
    'this machine only). Any other address needs --allow_remote.')
_REMOTE = flags.DEFINE_bool(
    'allow_remote', False,
    'Let --host be an address other machines reach (every page shows its '
    'target; participants still need their access codes).')
_PORT = flags.DEFINE_integer('port', 8765, 'Port of the study app.')
_PARTICIPANTS = flags.DEFINE_list(
    'participants', ['p01', 'p02', 'p03', 'p04', 'p05'],
    'The participant ids that may sign in (letters, digits, _ and -); '
    'participant j of the list gets slice j of one seeded permutation of '
    'the test split, so no two share an instance.')
_INSTANCES = flags.DEFINE_integer(
    'instances', 20, 'Composed queries per participant (paper: 20).')
_FLOW = flags.DEFINE_bool(
    'participant_flow', True,
    'Instructions and consent (logged) before the first instance, one '
    'practice instance (its own query, left out of Table 4) and a debrief '
    'with a completion code at the end. Off: straight to the instances '
    '(an experimenter instructs in person).')
_FRAMES_DIR = flags.DEFINE_string(
    'frames_dir', None,
    '--data=files: <frames_dir>/<video id>/ frame images shown as '
    'animations; a video without a folder is shown by its caption.')
_VIDEO_SIZE = flags.DEFINE_integer(
    'video_size', 192, 'Pixels of the longer side of a shown video.')
_DEBRIEF = flags.DEFINE_string(
    'debrief', None, 'The debrief\'s contact and withdrawal text (who to '
    'write to, how to withdraw); default: recovr_jax.study.study.DEBRIEF '
    '(write to the researcher who sent the link, quoting the participant '
    'id).')

# The study's own defaults where the runner's flags are not given (paper
# section 4.4: ReCoVR, up to three turns); set on the config, not on the
# process-wide flags.
STUDY_DEFAULTS = {'methods': ('recovr',), 'num_turns': 3,
                  'output_dir': 'out/study'}


def study_config(config) -> study.StudyConfig:
  """The ``StudyConfig`` of the flags (log directory under --output_dir)."""
  try:
    participants = study.check_participant_ids(_PARTICIPANTS.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  if _INSTANCES.value < 1:
    raise app.UsageError(f'--instances must be >= 1, got {_INSTANCES.value}')
  return study.StudyConfig(
      participants=participants, instances=_INSTANCES.value,
      log_dir=str(pathlib.Path(config.output_dir).absolute() / 'logs'),
      seed=config.seed, flow=_FLOW.value,
      debrief=_DEBRIEF.value or study.DEBRIEF)


def config_from_flags():
  """The runner's ``RunConfig`` of the flags with ``STUDY_DEFAULTS`` for
  the runner flags not given."""
  config = run_flags.config_from_flags()
  given = lambda name: not flags.FLAGS[name].using_default_value
  if not given('methods'):
    config = dataclasses.replace(config, methods=STUDY_DEFAULTS['methods'])
  if not given('num_turns'):
    config = dataclasses.replace(config, loop=dataclasses.replace(
        config.loop, num_turns=STUDY_DEFAULTS['num_turns']))
  if not given('output_dir'):
    config = dataclasses.replace(config,
                                 output_dir=STUDY_DEFAULTS['output_dir'])
  return config


def checked_config():
  """``config_from_flags()``, checked for a study (before any model loads)."""
  config = config_from_flags()
  if len(config.methods) != 1:
    raise app.UsageError(
        '--methods: a study talks to one method, got '
        f'{",".join(config.methods)}')
  source = run_config.source(config)
  if not drivers.choose(config.simulation, source).STEPWISE:
    raise app.UsageError('--simulation=jit runs simulated users only; a '
                         'study needs --simulation=host')
  if getattr(config.data, 'start', 'composed') != 'composed':
    raise app.UsageError('--start=text: a study shows each participant a '
                         'reference video and asks for changes to it; it '
                         'runs composed sessions only (--start=composed)')
  if _VIDEO_SIZE.value < 16:
    raise app.UsageError(f'--video_size must be >= 16, got '
                         f'{_VIDEO_SIZE.value}')
  if _FRAMES_DIR.value and isinstance(source, data_source.OwnMedia):
    raise app.UsageError('--frames_dir is for data whose videos are frame '
                         f'folders, not --data={config.data.NAME} (it renders '
                         'its own)')
  if _FRAMES_DIR.value and not pathlib.Path(_FRAMES_DIR.value).is_dir():
    raise app.UsageError(f'--frames_dir {_FRAMES_DIR.value} is not a '
                         'directory')
  if not 1 <= _PORT.value <= 65535:
    raise app.UsageError(f'--port must be in 1..65535, got {_PORT.value}')
  if not cli.is_loopback(_HOST.value) and not _REMOTE.value:
    raise app.UsageError(
        f'--host={_HOST.value} opens the study to the network (every page '
        'shows its target); pass --allow_remote to mean it')
  try:
    validation.validate(config, source)
  except validation.ConfigError as e:
    raise app.UsageError(str(e)) from e
  return config


def make_study(config, built=None, participants_are='human'):
  """``(study, media)`` of a checked config (loads data and models unless
  ``built``, a ``runner.build`` of the same data, is given).
  ``participants_are``: who writes the feedback, kept in every log's header
  and in the report's column names (``experiments/bench/bench_study.py`` scripts
  them)."""
  if built is None:
    print('loading the environment and models (the first time on a '
          'machine this encodes the gallery: a few minutes)', flush=True)
    built = runner.build(config, run_config.source(config))
  return assembled_study(assemble.assemble(config, built), participants_are)


def assembled_study(run_, participants_are='human'):
  """``(study, media)`` of an assembled run (``run.assemble.Run``) of a
  checked config."""
  from recovr_jax.study import media  # pylint: disable=g-import-not-at-top
  config, env, source = run_.config, run_.env, run_.source
  sconfig = study_config(config)
  identity = {'identity': integrity.resolved_config(config, source)['identity'],
              'data': config.data.NAME, 'participants_are': participants_are}
  try:
    user_study = study.Study(env, run_.method(config.methods[0]), run_.ctx,
                            run_.loop, sconfig, identity)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  gallery_media = media.of_run(source, run_.built, _FRAMES_DIR.value,
                           _VIDEO_SIZE.value)
  source.save_caches(run_.built)
  return user_study, gallery_media


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  cli.require(('fastapi', 'uvicorn', 'PIL'), 'the study app', 'study')
  config = checked_config()
  study_config(config)  # participant errors before the models load
  cli.check_port(_HOST.value, _PORT.value)
  run_flags.use_compilation_cache(config)
  user_study, gallery_media = make_study(config)
  import uvicorn  # pylint: disable=g-import-not-at-top
  from recovr_jax.study import app as app_lib  # pylint: disable=g-import-not-at-top
  print(f'study of {config.methods[0]} ({config.reasoner.name} reasoner): '
        f'{len(user_study.queues)} participants x '
        f'{user_study.config.instances} '
        f'instances, up to {user_study.base.num_turns} turns each; logs in '
        f'{user_study.log_dir}', flush=True)
  for pid, lost in user_study.recovered.items():
    print(f'warning: participant {pid}: the log was damaged at line '
          f'{lost["from_line"]}; continuing from the lines before it, '
          f'{lost["lines"]} line(s) kept in {lost["kept_aside"]}', flush=True)
  if not cli.is_loopback(_HOST.value):
    print(f'warning: --host={_HOST.value}: the study is reachable from the '
          'network (--allow_remote); only participants with their codes can '
          'sign in', flush=True)
  print(f'participant links (codes in {user_study.log_dir / study.ACCESS_FILE}'
        ', readable by you only):', flush=True)
  for pid in user_study.queues:
    print(f'  {pid}: http://{_HOST.value}:{_PORT.value}/p/{pid}/join?code='
          f'{user_study.code(pid)}', flush=True)
  print(f'administration (who has finished, damaged logs, Table 4): '
        f'http://{_HOST.value}:{_PORT.value}/admin/join?token='
        f'{user_study.admin_token()}', flush=True)
  print(f'open http://{_HOST.value}:{_PORT.value}/ (Ctrl-C stops; '
        'restarting continues every participant)', flush=True)
  from recovr_jax.study import report_job  # pylint: disable=g-import-not-at-top
  # Table 4 from the administration page: the report command with this
  # server's own flags, in a child process (experiments/study_report.py).
  report = report_job.ReportJob(
      [sys.executable, '-m', 'experiments.study_report', *sys.argv[1:]],
      user_study.log_dir.parent / 'report')
  uvicorn.run(app_lib.make_app(user_study, gallery_media, report), host=_HOST.value,
              port=_PORT.value, log_level='warning')


if __name__ == '__main__':
  cli.run(main, (('Study app', ['port', 'host', 'allow_remote',
                                'participants', 'instances',
                                'participant_flow', 'frames_dir',
                                'video_size', 'debrief']),) +
          run_flags.HELP_GROUPS, run_flags.HELP_DEFAULTS, own=1)
