r"""SmolLM2 reasoning speed against the machine's limits, measured in one run.

    python -m experiments.bench_lm --output_json=results/bench_lm.json

Anchors, timed in the same process: memory bandwidth (a jitted sum over a
``--bandwidth_mb`` float32 array) and the matmul rate (a jitted float32
``--matmul_n``-square matmul). Then, on the converted SmolLM2-135M-Instruct:

* one cached decoding step (``constrained.Decoder``'s jitted step) at batch
  1/2/4/8/16 and cache length ``--cache_length``: seconds, its FLOPs (2 x
  the non-embedding parameters x batch, plus attention over the cache and
  the vocabulary head) as a share of the matmul rate, and its bytes (the
  weights once, the cache per row) as a share of the bandwidth;
* reasoning per ReCoVR turn: the Intent Decomposer, State Reflector and
  Question Asker answering ``--sessions`` sessions' requests of one turn
  (drawn on the train split as ``reasoner_training.sample_sessions`` draws
  them, world literals for the Reflector, as ``--reasoner=smollm2_world``
  runs), timed after a warm-up, divided by the sessions: seconds per turn.

Targets (issue 25): <= 0.35 s of reasoning per ReCoVR turn and a batch-16
step at >= 60% of the measured matmul rate.
"""

import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments import bench_common
from experiments import cli

_OUT = flags.DEFINE_string('output_json', 'results/bench_lm.json',
                           'Where to write the results.')
_CACHE_LENGTH = flags.DEFINE_integer('cache_length', 512,
                                     'Cache length of the step timings.')
_SESSIONS = flags.DEFINE_integer('sessions', 16,
                                 'Sessions of the per-turn timing.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed repeats (median).')
_BANDWIDTH_MB = flags.DEFINE_integer('bandwidth_mb', 512,
                                     'Array size of the bandwidth anchor.')
_MATMUL_N = flags.DEFINE_integer('matmul_n', 2048,
                                 'Square size of the matmul anchor.')
_ADAPTER = flags.DEFINE_string(
    'adapter', None, 'LoRA adapter (default: the shipped smollm2_world).')


def anchors(repeats: int) -> dict:
  """Bandwidth (GB/s) and matmul rate (GFLOP/s) of this machine now."""
  x = jnp.ones((_BANDWIDTH_MB.value * (1 << 20) // 4,), jnp.float32)
  total = jax.jit(jnp.sum)
  t, _ = bench_common.timings(lambda: total(x), repeats)
  n = _MATMUL_N.value
  a = jnp.ones((n, n), jnp.float32)
  mm = jax.jit(jnp.matmul)
  tm, _ = bench_common.timings(lambda: mm(a, a), repeats)
  return {'bandwidth_gb_s': x.nbytes / t / 1e9,
          'matmul_gflop_s': 2 * n ** 3 / tm / 1e9,
          'bandwidth_array_mb': _BANDWIDTH_MB.value, 'matmul_n': n}


def step_costs(config, batch: int, length: int) -> tuple[float, float]:
  """``(flops, bytes)`` of one cached decoding step (float32)."""
  hidden, layers = config.hidden_size, config.num_hidden_layers
  heads = config.num_attention_heads
  kv = config.num_key_value_heads
  head_dim = hidden // heads
  inter, vocab = config.intermediate_size, config.vocab_size
  per_layer = (hidden * heads * head_dim + 2 * hidden * kv * head_dim +
               heads * head_dim * hidden + 3 * hidden * inter)
  weights = layers * per_layer + vocab * hidden     # the head is tied
  flops = batch * (2 * weights + layers * 4 * length * heads * head_dim)
  cache = 2 * layers * length * kv * head_dim * 4   # per row, float32
  return float(flops), float(weights * 4 + batch * cache)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  for flag in (_CACHE_LENGTH, _SESSIONS, _REPEATS, _BANDWIDTH_MB,
               _MATMUL_N):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  bench_common.full_speed_blas()
  from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import constrained  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
  from recovr_jax.experiment import config as config_lib  # pylint: disable=g-import-not-at-top
  from recovr_jax.world import captioner as captioner_lib  # pylint: disable=g-import-not-at-top
  from recovr_jax.world import generator as world_lib  # pylint: disable=g-import-not-at-top
  from recovr_jax.world import lexicon  # pylint: disable=g-import-not-at-top
  from recovr_jax.world import reasoner_training  # pylint: disable=g-import-not-at-top
  from recovr_jax.world import simulated_user  # pylint: disable=g-import-not-at-top
  repeats = _REPEATS.value
  bench_common.log('anchors: bandwidth and matmul')
  limits = anchors(repeats)
  adapter = _ADAPTER.value or chat_lm.DEFAULT_ADAPTER_DIR
  literals = {a: world_lib.VALUES[a] for a in world_lib.ATTRIBUTES}
  lm = chat_lm.ChatLMReasoner(
      str(gguf_llama.ensure_converted()), rules.RulesReasoner(lexicon),
      system=chat_lm.adapter_meta(adapter)['prompt']['system'],
      adapter=adapter, reflect_literals=literals,
      batch_size=_SESSIONS.value)
  decoder, config = lm.decoder, lm.config
  length = _CACHE_LENGTH.value
  steps = []
  for batch in (1, 2, 4, 8, 16):
    bench_common.log(f'decoding step at batch {batch}')
    cache = decoder.init_cache(batch, length)
    logits = jnp.zeros((batch, config.vocab_size), jnp.float32)
    content = np.full(batch, constrained.CONTENT_ANY, np.int32)
    ids = np.full((batch, constrained.MAX_IDS), -1, np.int32)
    mask = np.ones((batch, length), np.int32)
    positions = np.full(batch, length // 2, np.int32)
    state = {'cache': cache, 'logits': logits}

    def one(state=state, content=content, ids=ids, positions=positions,
            mask=mask):
      token, state['logits'], state['cache'] = decoder._step(  # pylint: disable=protected-access
          lm.params, state['logits'], content, ids, positions, mask,
          state['cache'])
      return token

    seconds, _ = bench_common.timings(one, repeats * 4)
    flops, nbytes = step_costs(config, batch, length)
    steps.append({
        'batch': batch, 'cache_length': length, 'seconds': seconds,
        'tokens_per_s': batch / seconds,
        'gflop_s': flops / seconds / 1e9,
        'share_of_matmul': flops / seconds / 1e9 / limits['matmul_gflop_s'],
        'gb_s': nbytes / seconds / 1e9,
        'share_of_bandwidth': nbytes / seconds / 1e9 /
                              limits['bandwidth_gb_s']})
  bench_common.log('requests of one turn on the train split')
  preset = config_lib.BENCHMARKS['v2']
  world = world_lib.make_world(world_lib.WorldConfig(
      renditions=preset['renditions']))
  writer = captioner_lib.Captioner(captioner_lib.DEFAULT_CAPTIONER_DIR)
  pool, captions = reasoner_training.caption_pool(world, writer, 200, 7)
  user = simulated_user.UserConfig(style='paper', language='own',
                                   phrasings='train')
  pairs = reasoner_training.sample_sessions(world, pool, captions, user,
                                            _SESSIONS.value, 11,
                                            num_turns=1)
  requests = {m: [r for k, r, _ in pairs if k == m]
              for m in ('intent', 'reflect', 'question')}
  for module, reqs in requests.items():  # warm-up: compiles
    lm.complete(module, reqs)
  timed = []
  for _ in range(repeats):
    start = time.perf_counter()
    for module, reqs in requests.items():
      lm.complete(module, reqs)
    timed.append(time.perf_counter() - start)
  per_turn = float(np.median(timed)) / _SESSIONS.value
  results = {
      'limits': limits, 'steps': steps,
      'turn': {'sessions': _SESSIONS.value,
               'requests': {m: len(r) for m, r in requests.items()},
               'seconds_per_turn': per_turn, 'target_s': 0.35,
               'met': per_turn <= 0.35},
      'batch16_step_share_of_matmul': steps[-1]['share_of_matmul'],
      'step_target_share': 0.6,
      'step_target_met': steps[-1]['share_of_matmul'] >= 0.6,
      'repeats': repeats}
  bench_common.write_results(_OUT.value, results)
  print(f'bandwidth {limits["bandwidth_gb_s"]:.1f} GB/s, matmul '
        f'{limits["matmul_gflop_s"]:.1f} GFLOP/s')
  for s in steps:
    print(f'batch {s["batch"]:2d}: {1e3 * s["seconds"]:7.1f} ms/step, '
          f'{100 * s["share_of_matmul"]:5.1f}% of the matmul rate, '
          f'{100 * s["share_of_bandwidth"]:5.1f}% of the bandwidth')
  print(f'reasoning per ReCoVR turn: {per_turn:.3f} s (target 0.35 s; '
        f'{_SESSIONS.value} sessions, intent + reflect + question)')


if __name__ == '__main__':
  cli.run(main)
