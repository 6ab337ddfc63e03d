r"""The main job: ReCoVR, ablations and baselines under one protocol.

    python -m experiments.run --flagfile=experiments/flagfiles/quickstart

Writes to --output_dir: the resolved flags, per-session trajectories (JSONL),
per-turn metrics per method (JSON and CSV), failure modes, the paired
bootstrap of recovr against the strongest baseline, a Markdown report and PNG
plots (when matplotlib is installed). Progress is checkpointed after every
batch; repeating the command resumes and gives identical results.
"""

import dataclasses
import json
import os
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax
import numpy as np

from recovr_jax import asking
from recovr_jax import fusion
from recovr_jax import loop
from recovr_jax import reasoning
from recovr_jax import reporting
from recovr_jax import resources
from recovr_jax import retrieval
from recovr_jax import session
from recovr_jax import simulator
from experiments import data_flags
from experiments import world_flags

_DATA = flags.DEFINE_enum('data', 'world', ['world', 'webvid_covr'],
                          'The embedded world, or WebVid-CoVR-style files.')
_ANNOTATIONS = flags.DEFINE_string(
    'annotations', None, 'webvid_covr: CSV with pth1, pth2, edit, txt1, txt2.')
_GALLERY = flags.DEFINE_string(
    'gallery_embeddings', None,
    'webvid_covr: .npz/.safetensors with ids, video and captions '
    '(experiments/embed_videos.py writes it).')
_CLIP_DIR = data_flags.CLIP_DIR  # webvid_covr: the CLIP of the gallery
_CHECKPOINT = flags.DEFINE_string(
    'checkpoint_dir', None, 'world: encoder checkpoints (default: shipped).')
_CACHE = flags.DEFINE_string('cache_dir', 'cache',
                             'Progress Memory cache of gallery embeddings.')
_REASONER = flags.DEFINE_enum('reasoner', 'rules', list(reasoning.BACKENDS),
                              'Reasoning backend.')
_REASONER_CKPT = flags.DEFINE_string(
    'reasoner_checkpoint', None,
    'flax_lm: a local Flax causal LM directory (default: the shipped one).')
_METHODS = flags.DEFINE_list(
    'methods', ['recovr', 'ivr', 'merlin', 'umivr', 'history_rewrite'],
    f'Methods to run; valid: {", ".join(loop.METHODS)}.')
_NUM_SESSIONS = flags.DEFINE_integer(
    'num_sessions', None, 'Sessions (test triplets) to run; default all.')
_BATCH = flags.DEFINE_integer('batch_size', 100, 'Sessions per batch.')
_OUTPUT = flags.DEFINE_string('output_dir', 'out/run', 'Output directory.')
_NUM_TURNS = flags.DEFINE_integer('num_turns', 5, 'T feedback turns.')
_WINDOW = flags.DEFINE_integer('window', 5, 'W, the TW-RRF window.')
_RRF_K = flags.DEFINE_float('rrf_k', 60.0, 'k, the RRF constant.')
_LIST = flags.DEFINE_integer('list_length', 100, 'K, the candidate pool.')
_RECENCY = flags.DEFINE_enum('recency', 'linear', list(fusion.RECENCIES),
                             'TW-RRF recency weights.')
_GAMMA = flags.DEFINE_float('gamma', 0.5, 'Decay of exp recency.')
_KAPPA_NEG = flags.DEFINE_integer('kappa_neg', 11, 'Rank-cap after neg.')
_KAPPA_NEU = flags.DEFINE_integer('kappa_neu', 4, 'Rank-cap after neu.')
_KAPPA_POS = flags.DEFINE_integer('kappa_pos', 2, 'Rank-cap after pos.')
_ALPHA = flags.DEFINE_float('merlin_alpha', 0.8, "MERLIN's slerp alpha.")
_ASK_MODE = flags.DEFINE_enum('ask_mode', 'never', list(asking.ASK_MODES),
                              'When ReCoVR asks a question.')
_ASK_THRESHOLD = flags.DEFINE_float('ask_threshold', 0.8,
                                    'Entropy gate of --ask_mode=entropy.')
_ASK_TAU = flags.DEFINE_float('ask_tau', 0.05,
                              'Softmax temperature of the entropy gate.')
_ASK_BUDGET = flags.DEFINE_integer('ask_budget', 2, 'Questions per session.')
_USER_SEED = flags.DEFINE_integer('user_seed', 0, "The user's seed.")
_MODIFY = flags.DEFINE_integer('modify_threshold', 2,
                               'm: Modify when at most m attributes differ.')
_POLICY = flags.DEFINE_enum('user_policy', 'mixed', list(simulator.POLICIES),
                            "The user's policy.")
_NOISE = flags.DEFINE_float('noise_rate', 0.0, 'Surface noise per word.')
_DROP = flags.DEFINE_float('drop_rate', 0.0, 'Constraint dropping rate.')
_RESAMPLES = flags.DEFINE_integer('bootstrap_resamples', 10_000,
                                  'Paired bootstrap resamples.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the bootstrap.')
_RESUME = flags.DEFINE_bool('resume', True,
                            'Reuse finished batches in --output_dir.')
_SIMULATION = flags.DEFINE_enum(
    'simulation', 'host', ['host', 'jit'],
    'host: the user and the reasoner run in Python between jitted ranking '
    'steps (every method, backend and user). jit: whole sessions as one '
    'lax.scan inside vmap (the world, the rules reasoner, ReCoVR-family '
    'methods, noise-free users, no questions); implies --user_draws=jax.')
_JIT_CHUNK = flags.DEFINE_integer(
    'jit_chunk_size', 64,
    '--simulation=jit: each turn runs the sessions still searching in '
    'vmapped chunks of this many and skips the rest; 0: every session runs '
    'every turn (lax.scan inside vmap). Same results either way.')
_SESSION_SHARDS = flags.DEFINE_integer(
    'session_shards', 1,
    '--simulation=jit: split each batch\'s sessions over this many devices '
    '(world replicated). On a CPU, first export XLA_FLAGS=--xla_force_host_'
    'platform_device_count=<cores>.')
_USER_DRAWS = flags.DEFINE_enum(
    'user_draws', 'numpy', list(simulator.DRAWS),
    "Source of the user's random decisions. jax: the draws of the jitted "
    'mode, so a host run equals a --simulation=jit run list for list.')
_PLATFORM = flags.DEFINE_enum(
    'platform', 'auto', list(resources.PLATFORMS),
    'Device to run on; a requested gpu or tpu that JAX cannot find is an '
    'error, not a CPU run.')
SWEEPABLE = ('rrf_k', 'list_length', 'window', 'kappa_neg', 'kappa_neu',
             'kappa_pos', 'recency', 'gamma', 'merlin_alpha', 'noise_rate',
             'drop_rate', 'user_policy', 'modify_threshold', 'ask_mode',
             'ask_threshold', 'ask_budget', 'num_turns')
_SWEEP = flags.DEFINE_multi_string(
    'sweep', [],
    'One-factor-at-a-time sweep, repeatable: NAME=V1|V2|... runs every '
    f'value of NAME with the other flags fixed, each in --output_dir/'
    f'NAME=V, and writes sweep.md. Sweepable: {", ".join(SWEEPABLE)}.')


def _fail(msg):
  raise app.UsageError(msg)


def validate_flags():
  """Everything that can be checked before any work."""
  unknown = [m for m in _METHODS.value if m not in loop.METHODS]
  if unknown or not _METHODS.value:
    _fail(f'unknown --methods {", ".join(unknown) or "(none)"}; valid: '
          f'{", ".join(loop.METHODS)}')
  if len(set(_METHODS.value)) != len(_METHODS.value):
    _fail('--methods lists a method twice')
  for flag in (_BATCH, _NUM_TURNS, _WINDOW, _LIST, _RESAMPLES, _KAPPA_NEG,
               _KAPPA_NEU, _KAPPA_POS):
    if flag.value < 1:
      _fail(f'--{flag.name} must be >= 1, got {flag.value}')
  if _SESSION_SHARDS.value < 1:
    _fail(f'--session_shards must be >= 1, got {_SESSION_SHARDS.value}')
  if _SESSION_SHARDS.value > 1 and _SIMULATION.value != 'jit':
    _fail('--session_shards needs --simulation=jit')
  if _SESSION_SHARDS.value > len(jax.devices()):
    _fail(f'--session_shards={_SESSION_SHARDS.value} but JAX sees '
          f'{len(jax.devices())} device(s); on a CPU export XLA_FLAGS='
          '--xla_force_host_platform_device_count=N first')
  if _JIT_CHUNK.value < 0:
    _fail(f'--jit_chunk_size must be >= 0, got {_JIT_CHUNK.value}')
  if _NUM_SESSIONS.value is not None and _NUM_SESSIONS.value < 1:
    _fail('--num_sessions must be >= 1')
  if _RRF_K.value < 0:
    _fail('--rrf_k must be >= 0')
  if _DATA.value == 'webvid_covr':
    for flag in (_ANNOTATIONS, _GALLERY, _CLIP_DIR):
      if not flag.value:
        _fail(f'--data=webvid_covr needs --{flag.name}')
    for flag in (_ANNOTATIONS, _GALLERY):
      if not os.path.isfile(flag.value):
        _fail(f'--{flag.name} {flag.value} does not exist')
    if not os.path.isdir(_CLIP_DIR.value):
      _fail(f'--clip_dir {_CLIP_DIR.value} is not a directory')
  if _REASONER_CKPT.value and not os.path.isdir(_REASONER_CKPT.value):
    _fail(f'--reasoner_checkpoint {_REASONER_CKPT.value} is not a directory')
  try:
    resources.select_device(_PLATFORM.value)
  except ValueError as e:
    _fail(str(e))
  draws = 'jax' if _SIMULATION.value == 'jit' else _USER_DRAWS.value
  try:
    user = simulator.UserConfig(
        modify_threshold=_MODIFY.value, policy=_POLICY.value,
        noise_rate=_NOISE.value, drop_rate=_DROP.value, draws=draws)
    ask = asking.AskPolicy(mode=_ASK_MODE.value, threshold=_ASK_THRESHOLD.value,
                           tau=_ASK_TAU.value, budget=_ASK_BUDGET.value)
    world = world_flags.world_config()
  except ValueError as e:
    _fail(str(e))
  if _SIMULATION.value == 'jit':
    _check_jit(user)
  out = pathlib.Path(_OUTPUT.value).absolute()
  try:
    out.mkdir(parents=True, exist_ok=True)
    probe = out / '.write_test'
    probe.write_text('ok')
    probe.unlink()
  except OSError as e:
    _fail(f'--output_dir {out} cannot be written: {e}')
  return out, user, ask, world


def _check_jit(user):
  """What --simulation=jit cannot run, named by flag."""
  from recovr_jax import simulation  # pylint: disable=g-import-not-at-top
  if _DATA.value != 'world':
    _fail('--simulation=jit needs --data=world')
  if _REASONER.value != 'rules':
    _fail('--simulation=jit needs --reasoner=rules')
  for name in _METHODS.value:
    try:
      simulation.check_supported(loop.METHODS[name], user, _ASK_MODE.value)
    except ValueError as e:
      flag = ('--noise_rate' if 'noise_rate' in str(e) else
              '--ask_mode' if 'ask_mode' in str(e) else '--methods')
      _fail(f'--simulation=jit: {e}; change {flag} or use '
            '--simulation=host')


def build_environment(world_config):
  from recovr_jax import encoders  # pylint: disable=g-import-not-at-top
  if _DATA.value == 'world':
    from recovr_jax import training  # pylint: disable=g-import-not-at-top
    from recovr_jax import world as world_lib  # pylint: disable=g-import-not-at-top
    world = world_lib.make_world(world_config)
    checkpoint = _CHECKPOINT.value or encoders.DEFAULT_CHECKPOINT_DIR
    video, composer = training.load_world_models(checkpoint, world)
    text = encoders.TextEncoder()
    return loop.world_environment(world, text, video, composer,
                                  cache_dir=_CACHE.value or None)
  from recovr_jax import clip_encoder  # pylint: disable=g-import-not-at-top
  from recovr_jax import data  # pylint: disable=g-import-not-at-top
  gallery = data.load_embeddings(_GALLERY.value)
  ann = data.load_covr_csv(_ANNOTATIONS.value, video_ids=gallery.ids)
  clip = clip_encoder.ClipEncoder(_CLIP_DIR.value)
  if clip.dim != gallery.video.shape[1]:
    _fail(f'--gallery_embeddings has dimension {gallery.video.shape[1]} but '
          f'the CLIP in --clip_dir projects to {clip.dim}')
  cache = {}

  def encode_text(texts):
    missing = sorted({t for t in texts if t not in cache})
    if missing:
      cache.update(zip(missing, clip.encode_text(missing)))
    return np.stack([cache[t] for t in texts]) if texts else np.zeros(
        (0, clip.dim), np.float32)

  index = gallery.index()
  captions = gallery.captions or tuple('' for _ in gallery.ids)
  return loop.Environment(
      gallery=gallery.video, captions=captions, attributes=None,
      reference=np.array([index[r] for r in ann.reference]),
      target=np.array([index[t] for t in ann.target]),
      modification=ann.edit, encode_text=encode_text,
      compose=lambda r, e: np.asarray(encoders.sum_composer(r, e)))


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


def _save_batch(out, method, b, result, sessions, errors, stats):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  arrays, records = _batch_paths(out, method, b)
  arrays.parent.mkdir(parents=True, exist_ok=True)
  # The displayed lists go through orbax (absolute path, restore target);
  # the records are JSON. Both are written before the marker file appears.
  ckpt_dir = arrays.with_suffix('')
  with ocp.StandardCheckpointer() as ckpt:
    ckpt.save(ckpt_dir, {'displayed': result.displayed,
                         'top_scores': result.top_scores}, force=True)
  tmp = records.with_suffix('.tmp')
  tmp.write_text(json.dumps({'sessions': sessions.tolist(),
                             'records': result.records, 'errors': errors,
                             'reasoning_stats': stats}))
  tmp.replace(records)


def _load_batch(out, method, b, shape):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  arrays, records = _batch_paths(out, method, b)
  if not records.exists():
    return None
  target = {'displayed': jax.ShapeDtypeStruct(shape, np.int32),
            'top_scores': jax.ShapeDtypeStruct(shape[:2], np.float32)}
  with ocp.StandardCheckpointer() as ckpt:
    restored = ckpt.restore(arrays.with_suffix(''), target)
  meta = json.loads(records.read_text())
  return (loop.BatchResult(displayed=np.asarray(restored['displayed']),
                           top_scores=np.asarray(restored['top_scores']),
                           records=meta['records']),
          meta['errors'], meta['reasoning_stats'])


def parse_sweep(specs):
  """``['NAME=V1|V2']`` -> ``[(NAME, [V1, V2])]``, checked."""
  out = []
  for spec in specs:
    name, sep, values = spec.partition('=')
    if not sep or not values:
      _fail(f'--sweep {spec!r}: expected NAME=V1|V2|...')
    if name not in SWEEPABLE:
      _fail(f'--sweep {name!r} is not sweepable; valid: {", ".join(SWEEPABLE)}')
    vals = values.split('|')
    for v in vals:
      try:
        flags.FLAGS[name].parser.parse(v)
      except ValueError as e:
        _fail(f'--sweep {name}={v}: {e}')
    out.append((name, vals))
  return out


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  sweep = parse_sweep(_SWEEP.value)
  if not sweep:
    run_once()
    return
  # Every setting of the sweep is checked before the first run starts.
  for name, values in sweep:
    original = flags.FLAGS[name].value
    try:
      for value in values:
        flags.FLAGS[name].value = flags.FLAGS[name].parser.parse(value)
        try:
          validate_flags()
        except app.UsageError as e:
          _fail(f'--sweep {name}={value}: {e}')
    finally:
      flags.FLAGS[name].value = original
  base_dir = _OUTPUT.value
  rows = []
  try:
    for name, values in sweep:
      original = flags.FLAGS[name].value
      for value in values:
        flags.FLAGS[name].value = flags.FLAGS[name].parser.parse(value)
        flags.FLAGS['output_dir'].value = os.path.join(base_dir,
                                                       f'{name}={value}')
        print(f'== sweep {name}={value}', flush=True)
        rows.append((name, value, run_once()))
      flags.FLAGS[name].value = original
  finally:
    flags.FLAGS['output_dir'].value = base_dir
  lines = ['# Sweep (one factor at a time)', '',
           '| setting | method | ' + ' | '.join(
               f'R@1 T{t}' for t in range(len(next(iter(
                   rows[0][2].values()))['R@1']))) + ' | BRI last |',
           '|---|---|' + '---:|' * (len(next(iter(
               rows[0][2].values()))['R@1']) + 1)]
  for name, value, per_method in rows:
    for method, m in per_method.items():
      lines.append(f'| {name}={value} | {method} | ' + ' | '.join(
          f'{100 * v:.1f}' for v in m['R@1']) + f" | {m['BRI'][-1]:.3f} |")
  summary = '\n'.join(lines) + '\n'
  pathlib.Path(base_dir).mkdir(parents=True, exist_ok=True)
  (pathlib.Path(base_dir) / 'sweep.md').write_text(summary)
  print(summary)


_ENVIRONMENTS = {}


def run_once():
  """One run with the current flags; returns the per-method metrics."""
  out, user_config, ask, world_config = validate_flags()
  start = time.time()
  base = session.LoopConfig(
      num_turns=_NUM_TURNS.value, window=_WINDOW.value,
      list_length=_LIST.value, rrf_k=_RRF_K.value, recency=_RECENCY.value,
      gamma=_GAMMA.value,
      kappa=(_KAPPA_NEG.value, _KAPPA_NEU.value, _KAPPA_POS.value))
  protocol = loop.Protocol(merlin_alpha=_ALPHA.value, ask=ask)
  (out / 'flags.txt').write_text(flags.FLAGS.flags_into_string())
  resolved = {'base': dataclasses.asdict(base),
              'protocol': {'merlin_alpha': protocol.merlin_alpha,
                           'ask': dataclasses.asdict(ask)},
              'user': dataclasses.asdict(user_config),
              'world': dataclasses.asdict(world_config),
              'methods': _METHODS.value, 'data': _DATA.value,
              'reasoner': _REASONER.value, 'simulation': _SIMULATION.value}
  resolved_path = out / 'resolved_config.json'
  if resolved_path.exists() and _RESUME.value and json.loads(
      resolved_path.read_text()) != json.loads(json.dumps(resolved)):
    _fail(f'{out} holds a run with other settings; use another --output_dir '
          'or --noresume')
  resolved_path.write_text(reporting.dumps(resolved))

  key = (_DATA.value, json.dumps(dataclasses.asdict(world_config)),
         _CHECKPOINT.value, _ANNOTATIONS.value, _GALLERY.value,
         _CLIP_DIR.value)
  if key not in _ENVIRONMENTS:  # sweeps reuse the gallery and text caches
    _ENVIRONMENTS[key] = build_environment(world_config)
  env = _ENVIRONMENTS[key]
  base = dataclasses.replace(base, num_ids=len(env.gallery))
  n, d = env.gallery.shape
  try:
    resources.check_fits(
        resources.session_batch_bytes(
            min(_BATCH.value, len(env.target)), base.num_channels, n, d,
            base.list_length, base.window, retrieval.DEFAULT_BLOCK_SIZE),
        f'a batch of {_BATCH.value} sessions', '--batch_size')
  except ValueError as e:
    _fail(str(e))
  sim_env = None
  if _SIMULATION.value == 'jit':
    from recovr_jax import simulation  # pylint: disable=g-import-not-at-top
    if (key, 'jit') not in _ENVIRONMENTS:
      _ENVIRONMENTS[key, 'jit'] = simulation.prepare(env)
    sim_env = _ENVIRONMENTS[key, 'jit']
  if _DATA.value == 'world':
    user = simulator.SimulatedUser(user_config, seed=_USER_SEED.value)
    reasoner = reasoning.make_reasoner(_REASONER.value, _REASONER_CKPT.value)
  else:
    user = simulator.CaptionUser(drop_rate=_DROP.value, seed=_USER_SEED.value)
    reasoner = (reasoning.RulesReasoner(free_text=True)
                if _REASONER.value == 'rules' else
                reasoning.make_reasoner(_REASONER.value, _REASONER_CKPT.value))
  total = len(env.target)
  num = min(_NUM_SESSIONS.value or total, total)
  sessions = np.arange(num)
  batches = [sessions[i:i + _BATCH.value]
             for i in range(0, num, _BATCH.value)]
  print(f'{num} sessions x {len(_METHODS.value)} methods, gallery '
        f'{len(env.gallery)} videos, {_NUM_TURNS.value} turns', flush=True)

  progress = Progress(num * len(_METHODS.value))
  displayed, trajectories, reasoning_stats = {}, [], {}
  for name in _METHODS.value:
    method = loop.METHODS[name]
    parts = []
    for b, batch in enumerate(batches):
      shape = (len(batch), _NUM_TURNS.value + 1, _LIST.value)
      loaded = _load_batch(out, name, b, shape) if _RESUME.value else None
      if loaded is None:
        errors = {}
        if sim_env is not None:
          result = _run_jit(sim_env, method, batch, user_config, base)
        else:
          try:
            result = loop.run_batch(env, method, batch, user, reasoner, base,
                                    protocol)
          except Exception as e:  # pylint: disable=broad-except
            # A batch whose reasoning raises is run session by session,
            # and the sessions that raise are recorded with their error.
            logging.warning('batch %d of %s raised %r; retrying per session',
                            b, name, e)
            result = _per_session(env, method, batch, user, reasoner, base,
                                  protocol, shape, errors)
        stats = getattr(reasoner, 'validity', lambda: {})()
        _save_batch(out, name, b, result, batch, errors, stats)
      else:
        result, errors, stats = loaded
      parts.append(result)
      reasoning_stats[name] = stats
      for i, sess in enumerate(batch):
        trajectories.append({
            'method': name, 'session': int(sess),
            'reference': int(env.reference[sess]),
            'target': int(env.target[sess]),
            'error': errors.get(str(i)) or errors.get(i),
            'turns': [dict(rec, top10=result.displayed[i, t, :10].tolist())
                      for t, rec in enumerate(result.records[i])]})
      progress.update(len(batch), name)
    displayed[name] = np.concatenate([p.displayed for p in parts])

  targets = np.asarray(env.target)[sessions]
  per_method = {m: reporting.method_metrics(d, targets)
                for m, d in displayed.items()}
  failures = {m: reporting.failure_table(d, targets)
              for m, d in displayed.items()}
  boot = None
  strongest = reporting.strongest_baseline(per_method, loop.BASELINES)
  if 'recovr' in displayed and strongest:
    boot = reporting.bootstrap(displayed['recovr'], displayed[strongest],
                               targets, _RESAMPLES.value, _SEED.value)
    boot.update(a='recovr', b=strongest, num_resamples=_RESAMPLES.value)

  (out / 'metrics.json').write_text(reporting.dumps(per_method))
  (out / 'metrics.csv').write_text(reporting.metrics_csv(per_method))
  (out / 'failure_modes.json').write_text(reporting.dumps(failures))
  (out / 'bootstrap.json').write_text(reporting.dumps(boot))
  with (out / 'trajectories.jsonl').open('w') as f:
    for row in trajectories:
      f.write(json.dumps(row, sort_keys=True) + '\n')
  header = (f'# recovr_jax run\n\n{num} sessions, gallery {len(env.gallery)} '
            f'videos, T = {_NUM_TURNS.value}, W = {_WINDOW.value}, K = '
            f'{_LIST.value}, k = {_RRF_K.value:g}, kappa = {base.kappa}, '
            f'reasoner {_REASONER.value}, user {user_config}.')
  report = reporting.markdown(per_method, failures, boot, header)
  if any(reasoning_stats.values()):
    report += '\n### Reasoning validity\n\n```\n' + reporting.dumps(
        reasoning_stats) + '\n```\n'
  (out / 'report.md').write_text(report)
  plots = reporting.plot(per_method, str(out / 'plot_'))
  print(report)
  if not plots:
    print('(matplotlib not installed: no plots; pip install ".[plots]")')
  print(f'wrote {out} in {time.time() - start:.0f}s')
  return per_method


def _run_jit(sim_env, method, batch, user_config, base):
  from recovr_jax import sharding  # pylint: disable=g-import-not-at-top
  from recovr_jax import simulation  # pylint: disable=g-import-not-at-top
  mesh = None
  if _SESSION_SHARDS.value > 1:
    mesh = sharding.make_mesh(gallery_shards=1,
                              session_shards=_SESSION_SHARDS.value)
  config = simulation.sim_config(method, base, user_config,
                                 sim_env.composer)
  trace = simulation.run(sim_env, config, batch, _USER_SEED.value,
                         log=lambda msg: print(f'[{method.name}] {msg}',
                                               flush=True),
                         chunk_size=_JIT_CHUNK.value or None, mesh=mesh)
  return simulation.batch_result(sim_env, trace)


def _per_session(env, method, batch, user, reasoner, base, protocol, shape,
                 errors):
  displayed = np.full(shape, -1, np.int32)
  top_scores = np.full(shape[:2], -np.inf, np.float32)
  records = []
  for i, sess in enumerate(batch):
    try:
      r = loop.run_batch(env, method, np.array([sess]), user, reasoner, base,
                         protocol)
      displayed[i], top_scores[i] = r.displayed[0], r.top_scores[0]
      records.append(r.records[0])
    except Exception as e:  # pylint: disable=broad-except
      errors[str(i)] = f'{type(e).__name__}: {e}'
      records.append([])
  return loop.BatchResult(displayed=displayed, top_scores=top_scores,
                          records=records)


if __name__ == '__main__':
  app.run(main)
