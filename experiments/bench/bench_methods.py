r"""Every method in the jitted mode vs the same protocol one session at a time.

    python -m experiments.bench.bench_methods --output_json=results/bench_methods.json

On an embedded world whose gallery holds --gallery_size videos (its
ground-truth captions: captioning is not part of the loop timed here), for
each method of --methods (default: the 23 of the `main` flagfile) under the
paper's protocol (ReCoVR's Question Asker with every list, --ask_mode; IVR,
UMIVR and MERLIN ask every turn) and v2's user (its own words, the paper's
style; --user_language, --user_style):

* jit: ``drivers.jit_runner.run`` on --num_sessions sessions (whole sessions as
  ``lax.scan`` inside ``vmap``); the first call compiles and fills the
  phrase, word and dialogue tables (reported as ``first_call_s``), then the
  median of --repeats calls;
* per_session: the host driver (``drivers.host_driver.run_batch``: Python user and
  rules reasoner, jitted ranking) on one session at a time, the first
  --per_session_sessions sessions after a warm-up, timed once; its lists are
  compared with the jitted ones (the same jax draws: identical lists are
  counted, and a different R@1 is an error, since float32 rounding in
  MERLIN's slerp or the composer over another batch shape may reorder
  near-tied candidates but must not change what is found).

Text embeddings are cached in both (the jitted warm-up encodes every text
the per-session loop needs), so the timings measure the loop. The summary
ratio is the whole sweep's: per-session seconds per session times
--num_sessions, summed over methods, over the jitted seconds summed.
"""

import sys
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from experiments.bench import bench_common
from experiments.common import cli
from recovr_jax.drivers import jit_driver
from recovr_jax.drivers import jit_runner
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.face import traced_face
from recovr_jax.envs.world.user import simulated_user
from recovr_jax import methods
from recovr_jax.drivers import host_driver
from recovr_jax.protocol import ranking
from recovr_jax.protocol import traced
from recovr_jax.reasoning import asking
from recovr_jax.run import resources

_MAIN = ('recovr,covr_only,t2v_only,intent_only,no_rankcap,no_reflection,'
         'no_keep,no_avoid,covr_plain,t2v_plain,fixed_anchor,static_rrf,'
         'uniform_rrf,penalty_rrf,sim_max,sim_sum,ivr,merlin,umivr,'
         'history_rewrite,ivr_rankcap,umivr_rankcap,merlin_rankcap')
_METHODS = flags.DEFINE_list('methods', _MAIN.split(','), 'Methods to time.')
_SESSIONS = flags.DEFINE_integer('num_sessions', 1000, 'Jitted sessions S.')
_PER_SESSION = flags.DEFINE_integer(
    'per_session_sessions', 40, 'Sessions of the per-session loop (timed '
    'once; its rate is scaled to S).')
_TURNS = flags.DEFINE_integer('num_turns', 5, 'Feedback turns T.')
_GALLERY = flags.DEFINE_integer('gallery_size', 10_000, 'Gallery size N.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed jitted repeats.')
_ASK = flags.DEFINE_enum('ask_mode', 'always', list(asking.ASK_MODES),
                         "ReCoVR's Question Asker (the paper's: always).")
_LANGUAGE = flags.DEFINE_enum('user_language', 'own',
                              list(simulated_user.LANGUAGES),
                              "The user's words (v2: own).")
_STYLE = flags.DEFINE_enum('user_style', 'paper', list(simulated_user.STYLES),
                           "The user's style (v2: paper).")
_CACHE = flags.DEFINE_string('cache_dir', 'cache',
                             'Progress Memory cache of gallery embeddings.')
_OUTPUT = flags.DEFINE_string('output_json', 'results/bench_methods.json',
                              'Where to write the results.')

log = bench_common.log


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)
  bench_common.full_speed_blas()
  for flag in (_SESSIONS, _TURNS, _REPEATS, _PER_SESSION):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  if _PER_SESSION.value > _SESSIONS.value:
    raise app.UsageError('--per_session_sessions must be <= --num_sessions')
  bench_common.list_values(_METHODS, valid=methods.names())
  num_combos = len(generator.all_combos())
  if not 1000 <= _GALLERY.value <= 0.9 * num_combos:
    raise app.UsageError(f'--gallery_size must be in 1000..'
                         f'{int(0.9 * num_combos)}, got {_GALLERY.value}')
  device = resources.select_device('auto')
  s, n, p = _SESSIONS.value, _GALLERY.value, _PER_SESSION.value
  test_share = max(0.2, min(0.9, (n + 60) / num_combos))
  user_config = simulated_user.UserConfig(draws='jax', style=_STYLE.value,
                                          language=_LANGUAGE.value)
  log(f'world: gallery {n}, {s} sessions ({p} per-session), '
      f'{_TURNS.value} turns on {device.platform}')
  run = bench_common.world_run(
      generator.WorldConfig(test_share=test_share, gallery_size=n,
                            num_test_triplets=s, num_train_triplets=1),
      user_config, _CACHE.value)
  env, user, ctx, jit_env = run.env, run.user, run.ctx, run.built.jit_env
  base = ranking.LoopConfig(num_turns=_TURNS.value, num_ids=n)
  settings = methods.base.Settings(ask=asking.AskPolicy(mode=_ASK.value))
  sessions = np.arange(s)
  rows = {}
  for name in _METHODS.value:
    method = methods.make(name, settings)
    cfg = jit_driver.traced_config(
        lambda form, turns: traced_face.world_face(form, turns, user_config),
        method, base, traced.Reading('rules'), jit_env.composer)
    start = time.perf_counter()
    trace = jit_runner.run(jit_env, cfg, sessions, seed=0)
    first = time.perf_counter() - start
    t_jit, all_jit = bench_common.timings(
        lambda: jit_runner.run(jit_env, cfg, sessions, 0), _REPEATS.value)
    one = lambda q: host_driver.run_batch(env, method, np.asarray([q]), user,
                                          ctx, base).displayed[0]
    one(0)  # warm-up: the host's ranking compiled for one session
    start = time.perf_counter()
    per = np.stack([one(q) for q in range(p)])
    t_per = time.perf_counter() - start
    jitted = trace.displayed[:p]
    identical = int(np.all(per == jitted, axis=(1, 2)).sum())
    # Where lists differ: float32 rounding (MERLIN's slerp, the composer
    # MLP over another batch shape) can reorder near-tied candidates.
    differ = np.argwhere(per != jitted)
    first_difference = (None if not len(differ) else dict(
        session=int(differ[0][0]), turn=int(differ[0][1]),
        rank=int(differ[0][2]) + 1))
    targets = np.asarray(env.target)[:p]
    same_r1 = bool(np.array_equal(per[:, :, 0] == targets[:, None],
                                  jitted[:, :, 0] == targets[:, None]))
    rows[name] = dict(
        jit_s=t_jit, jit_all_s=all_jit, first_call_s=first,
        jit_sessions_per_s=s / t_jit, per_session_s=t_per,
        per_session_sessions_per_s=p / t_per,
        speedup=(t_per / p) / (t_jit / s),
        per_session_identical_lists=identical,
        per_session_first_difference=first_difference,
        per_session_same_r_at_1=same_r1)
    log(f'{name}: jit {s / t_jit:,.0f} sessions/s (first call {first:.1f} s),'
        f' per-session {p / t_per:,.1f} sessions/s, '
        f'{rows[name]["speedup"]:.1f}x; {identical}/{p} identical lists')
  jit_total = sum(r['jit_s'] for r in rows.values())
  per_total = sum(r['per_session_s'] / p * s for r in rows.values())
  results = dict(
      config=dict(num_sessions=s, per_session_sessions=p,
                  num_turns=_TURNS.value, gallery_size=n,
                  repeats=_REPEATS.value, ask_mode=_ASK.value,
                  user_language=_LANGUAGE.value, user_style=_STYLE.value,
                  device=str(device)),
      methods=rows, jit_total_s=jit_total,
      per_session_total_s_scaled=per_total,
      speedup_all_methods=per_total / jit_total,
      first_calls_total_s=sum(r['first_call_s'] for r in rows.values()))
  bench_common.write_results(_OUTPUT.value, results)
  # Same draws, same protocol: a different R@1 means the two modes do not
  # run the same thing, and the ratio would measure nothing (lists may
  # differ below the target by float32 rounding; they are counted above).
  differ = {m: r['per_session_first_difference'] for m, r in rows.items()
            if not r['per_session_same_r_at_1']}
  if differ:
    raise RuntimeError(f'per-session and jitted R@1 differ: {differ}')
  log(f'all methods: {results["speedup_all_methods"]:.1f}x the per-session '
      'loop')


if __name__ == '__main__':
  sys.setrecursionlimit(10_000)
  cli.run(main)
