r"""SmolLM2 reasoning speed against the machine's limits, measured in one run.

    python -m experiments.bench.bench_lm --output_json=results/bench_lm.json

Anchors, timed in the same process: memory bandwidth (a jitted sum over a
``--bandwidth_mb`` float32 array) and the matmul rate (a jitted float32
``--matmul_n``-square matmul). Then, on the converted SmolLM2-135M-Instruct:

* one cached decoding step (``constrained.Decoder``'s jitted step) at batch
  1/2/4/8/16 and cache length ``--cache_length``: seconds, its FLOPs (2 x
  the non-embedding parameters x batch, plus attention over the cache and
  the vocabulary head) as a share of the matmul rate, and its bytes (the
  weights once, the cache per row) as a share of the bandwidth;
* the batch-16 step's parts, each alone: every projection of the 30 layers
  chained, the vocabulary head, the attention over the cache; the rest of
  the step is its time minus theirs. From them, the share of the matmul
  rate the step would reach if its attention read the cache at the measured
  bandwidth (the other parts as measured), and with the projections and the
  head alone: how far this layout can go on this machine;
* the model's 30 gate projections alone at 16 and 64 rows, as ``X @ W``
  and as ``W @ X``: the rate XLA's CPU dot reaches on these shapes (the
  ceiling of a decoding step's share of the matmul rate);
* reasoning per ReCoVR turn: the Intent Decomposer, State Reflector and
  Question Asker answering ``--sessions`` sessions' requests of one turn
  (drawn on the train split as ``reasoner_training.sample_sessions`` draws
  them, world literals for the Reflector, as ``--reasoner=smollm2_world``
  runs), timed after a warm-up, divided by the sessions: seconds per turn,
  at each of ``--reasoner_batches`` (sessions per generation call), split
  into prompt prefill and decoding steps, with the prefill's floor (its
  FLOPs, without the vocabulary head, at the measured matmul rate).

Targets (issue 25): <= 0.35 s of reasoning per ReCoVR turn and a batch-16
step at >= 60% of the measured matmul rate.
"""

import pathlib
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import bench_common
from experiments.common import cli

_OUT = flags.DEFINE_string('output_json', 'results/bench_lm.json',
                           'Where to write the results.')
_CACHE_LENGTH = flags.DEFINE_integer('cache_length', 512,
                                     'Cache length of the step timings.')
_SESSIONS = flags.DEFINE_integer('sessions', 64,
                                 'Sessions of the per-turn timing.')
_BATCHES = flags.DEFINE_list(
    'reasoner_batches', ['16', '64'],
    'Sessions per generation call (--reasoner_batch) of the per-turn '
    'timings.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed repeats (median).')
_BANDWIDTH_MB = flags.DEFINE_integer('bandwidth_mb', 512,
                                     'Array size of the bandwidth anchor.')
_MATMUL_N = flags.DEFINE_integer('matmul_n', 2048,
                                 'Square size of the matmul anchor.')
_ADAPTER = flags.DEFINE_string(
    'adapter', None, 'LoRA adapter (default: the shipped smollm2_world).')
_PROJECTIONS_ONLY = flags.DEFINE_boolean(
    'projections_only', False,
    'Measure the anchors and the gate projections alone (about a minute) '
    'and write only those.')


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


def projection_chain(kernels, rows: int, repeats: int) -> dict:
  """Time of the model's gate projections alone, one after another (no
  attention, no norms), for ``rows`` rows in both operand orders: ``X @ W``
  (``[rows, in] @ [in, out]``, the transformers layout) and ``W @ X``
  (``[out, in] @ [in, rows]``, ``llama_decode``'s). Returns GFLOP/s of
  each: what XLA's CPU dot reaches on these shapes here."""
  outer = [jnp.asarray(np.ascontiguousarray(np.asarray(k).T)) for k in kernels]
  flops = 2 * rows * sum(int(np.prod(k.shape)) for k in kernels)

  def x_w(x, ws):
    return sum(jnp.sum(x @ w) for w in ws)

  def w_x(x, ws):
    return sum(jnp.sum(w @ x.T) for w in ws)

  x = jnp.ones((rows, kernels[0].shape[1]), jnp.float32)
  out = {'rows': rows}
  for name, fn, ws in (('x_at_w', x_w, outer), ('w_at_x', w_x, kernels)):
    jitted = jax.jit(fn)
    seconds, _ = bench_common.timings(lambda f=jitted, w=ws: f(x, w),
                                      repeats * 4)
    out[f'{name}_gflop_s'] = flops / seconds / 1e9
  return out


def step_parts(params, shape, batch: int, length: int, repeats: int) -> dict:
  """Seconds of a decoding step's parts alone at ``batch`` rows and a
  ``length``-position cache, each jitted on its own: every projection of
  the 30 layers chained in ``llama_decode``'s order (``W @ X``), the
  vocabulary head, and the layers' attention over the cache
  (``llama_decode.attention``: scores, softmax, weighted sum)."""
  from recovr_jax.reasoning import llama_decode  # pylint: disable=g-import-not-at-top
  names = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')
  weights = [layer[n] for layer in params['layers'] for n in names]
  inputs = {w.shape[1]: jnp.ones((w.shape[1], batch), jnp.float32)
            for w in weights}

  def projections(ws, xs):
    return sum(jnp.sum(w @ xs[w.shape[1]]) for w in ws)

  def head(w, x):
    return jnp.sum(w @ x)

  cache = llama_decode.init_cache(shape, batch, length)
  groups = shape.heads // shape.kv_heads
  rows = jnp.ones((batch, shape.kv_heads, groups, shape.head_dim),
                  jnp.float32)
  keep = jnp.ones((batch, 1, groups, length), bool)
  scale = np.float32(1.0 / np.sqrt(shape.head_dim))

  def attention(rows, keys, values, keep):
    return sum(jnp.sum(llama_decode.attention(rows, k, v, keep, scale))
               for k, v in zip(keys, values))

  parts = {}
  for name, fn, args in (
      ('projections', projections, (weights, inputs)),
      ('head', head, (params['head'], inputs[shape.hidden])),
      ('attention', attention, (rows, cache['keys'], cache['values'],
                                keep))):
    jitted = jax.jit(fn)
    parts[f'{name}_s'], _ = bench_common.timings(
        lambda f=jitted, a=args: f(*a), repeats * 4)
  parts['cache_bytes'] = float(sum(x.nbytes for x in cache['keys'] +
                                   cache['values']))
  return parts


def lm_params(config) -> int:
  """Non-embedding parameters plus the vocabulary head (what a token's
  forward pass multiplies by)."""
  hidden, heads = config.hidden_size, config.num_attention_heads
  kv, head_dim = config.num_key_value_heads, hidden // heads
  per_layer = (hidden * heads * head_dim + 2 * hidden * kv * head_dim +
               heads * head_dim * hidden + 3 * hidden * config.intermediate_size)
  return config.num_hidden_layers * per_layer + config.vocab_size * hidden


def step_costs(config, batch: int, length: int) -> tuple[float, float]:
  """``(flops, bytes)`` of one cached decoding step (float32)."""
  hidden, layers = config.hidden_size, config.num_hidden_layers
  head_dim = hidden // config.num_attention_heads
  kv = config.num_key_value_heads
  weights = lm_params(config)                       # the head is tied
  flops = batch * (2 * weights + layers * 4 * length * hidden)
  cache = 2 * layers * length * kv * head_dim * 4   # per row, float32
  return float(flops), float(weights * 4 + batch * cache)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  for flag in (_CACHE_LENGTH, _SESSIONS, _REPEATS, _BANDWIDTH_MB,
               _MATMUL_N):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  try:
    batches = [int(b) for b in _BATCHES.value]
  except ValueError:
    batches = []
  if not batches or min(batches) < 1 or len(set(batches)) != len(batches):
    raise app.UsageError('--reasoner_batches must be distinct integers >= 1, '
                         f'got {",".join(_BATCHES.value)!r}')
  bench_common.full_speed_blas()
  from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import constrained  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import llama_decode  # pylint: disable=g-import-not-at-top
  from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
  from recovr_jax.run import run_config  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import captioner  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.benchmark import generator  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.benchmark import lexicon  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.models import reasoner_training  # pylint: disable=g-import-not-at-top
  from recovr_jax.envs.world.user import simulated_user  # pylint: disable=g-import-not-at-top
  repeats = _REPEATS.value
  # The model and adapter are checked before anything is timed.
  problem = gguf_llama.smollm2_problem()
  if problem:
    raise app.UsageError(problem)
  adapter = _ADAPTER.value or chat_lm.DEFAULT_ADAPTER_DIR
  if not (pathlib.Path(adapter) / 'adapter.json').is_file():
    raise app.UsageError(f'--adapter {adapter}: not a LoRA adapter directory '
                         '(no adapter.json); experiments/train/train_adapter.py '
                         'writes one')
  from recovr_jax.reasoning import lora  # pylint: disable=g-import-not-at-top
  try:  # its files, tensors, layers and shapes
    lora.check(lora.load(adapter), f'--adapter {adapter}',
               chat_lm.model_config())
  except (OSError, ValueError) as e:
    raise app.UsageError(str(e)) from e
  bench_common.log('anchors: bandwidth and matmul')
  limits = anchors(repeats)
  literals = {a: generator.VALUES[a] for a in generator.ATTRIBUTES}
  lm = chat_lm.ChatLMReasoner(
      str(gguf_llama.ensure_converted()), rules.RulesReasoner(lexicon),
      system=chat_lm.adapter_meta(adapter)['prompt']['system'],
      adapter=adapter, reflect_literals=literals,
      batch_size=max(batches))
  bench_common.log('the gate projections alone, both operand orders')
  gates = [layer['gate'] for layer in lm.params['layers']]
  chains = [projection_chain(gates, rows, repeats) for rows in (16, 64)]
  for c in chains:
    for name in ('x_at_w', 'w_at_x'):
      c[f'{name}_share_of_matmul'] = (c[f'{name}_gflop_s'] /
                                      limits['matmul_gflop_s'])
  for c in chains:
    print(f'gate projections alone, {c["rows"]} rows: X @ W '
          f'{100 * c["x_at_w_share_of_matmul"]:.0f}%, W @ X '
          f'{100 * c["w_at_x_share_of_matmul"]:.0f}% of the matmul rate')
  if _PROJECTIONS_ONLY.value:
    bench_common.write_results(_OUT.value, {
        'limits': limits, 'projection_chains': chains, 'repeats': repeats})
    return
  decoder, config = lm.decoder, lm.config
  length = _CACHE_LENGTH.value
  steps = []
  for batch in (1, 2, 4, 8, 16, 64):
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
  batch16 = next(s for s in steps if s['batch'] == 16)
  bench_common.log('the batch-16 step\'s parts alone')
  parts = step_parts(lm.params, llama_decode.Shape.of(config), 16, length,
                     repeats)
  flops16, _ = step_costs(config, 16, length)
  floor = flops16 / (limits['matmul_gflop_s'] * 1e9)
  rest = batch16['seconds'] - (parts['projections_s'] + parts['head_s'] +
                               parts['attention_s'])
  # What the step's share would be with its attention reading the cache at
  # the measured bandwidth, every other part as measured; and with no
  # attention at all (the projections and the head alone).
  at_bandwidth = parts['cache_bytes'] / (limits['bandwidth_gb_s'] * 1e9)
  parts.update(
      rest_s=rest, attention_at_bandwidth_s=at_bandwidth,
      share_if_attention_at_bandwidth=floor / (
          parts['projections_s'] + parts['head_s'] + max(rest, 0.0) +
          at_bandwidth),
      share_of_projections_and_head_alone=floor / (
          parts['projections_s'] + parts['head_s']))
  bench_common.log('requests of one turn on the train split')
  preset = run_config.BENCHMARKS['v2']
  world = generator.make_world(generator.WorldConfig(
      renditions=preset['renditions']))
  writer = captioner.Captioner(captioner.DEFAULT_CAPTIONER_DIR)
  pool, captions = reasoner_training.caption_pool(world, writer, 200, 7)
  user = simulated_user.UserConfig(style='paper', language='own',
                                   phrasings='train')
  pairs = reasoner_training.sample_sessions(world, pool, captions, user,
                                            _SESSIONS.value, 11,
                                            num_turns=1)
  requests = {m: [r for k, r, _ in pairs if k == m]
              for m in ('intent', 'reflect', 'question')}
  prefill = decoder._prefill  # pylint: disable=protected-access
  split = {'prefill_s': 0.0, 'prefill_tokens': 0}

  def timed_prefill(*args):  # the prompts' share of a turn
    start = time.perf_counter()
    out = jax.block_until_ready(prefill(*args))
    split['prefill_s'] += time.perf_counter() - start
    split['prefill_tokens'] += int(np.asarray(args[1]).size)
    return out

  decoder._prefill = timed_prefill  # pylint: disable=protected-access
  per_batch = []
  for reasoner_batch in batches:
    lm.batch_size = reasoner_batch
    bench_common.log(f'one turn of {_SESSIONS.value} sessions at '
                     f'--reasoner_batch={reasoner_batch}')
    for module, reqs in requests.items():  # warm-up: compiles
      lm.complete(module, reqs)
    timed, prefills, tokens = [], [], []
    for _ in range(repeats):
      split.update(prefill_s=0.0, prefill_tokens=0)
      start = time.perf_counter()
      for module, reqs in requests.items():
        lm.complete(module, reqs)
      timed.append(time.perf_counter() - start)
      prefills.append(split['prefill_s'])
      tokens.append(split['prefill_tokens'])
    i = int(np.argsort(timed)[len(timed) // 2])  # the median repeat
    # A prompt token multiplies by every weight but the vocabulary head
    # (only the last position's logits are computed).
    flops = (2 * (lm_params(config) - config.vocab_size * config.hidden_size)
             * tokens[i])
    per_batch.append({
        'reasoner_batch': reasoner_batch,
        'seconds_per_turn': timed[i] / _SESSIONS.value,
        'prefill_s_per_turn': prefills[i] / _SESSIONS.value,
        'decode_s_per_turn': (timed[i] - prefills[i]) / _SESSIONS.value,
        'prefill_tokens_per_turn': tokens[i] / _SESSIONS.value,
        'prefill_floor_s_per_turn': flops / (limits['matmul_gflop_s'] * 1e9)
                                    / _SESSIONS.value})
  best = min(per_batch, key=lambda r: r['seconds_per_turn'])
  per_turn = best['seconds_per_turn']
  results = {
      'limits': limits, 'steps': steps, 'projection_chains': chains,
      'turn': {'sessions': _SESSIONS.value,
               'requests': {m: len(r) for m, r in requests.items()},
               'by_reasoner_batch': per_batch,
               'seconds_per_turn': per_turn,
               'reasoner_batch': best['reasoner_batch'],
               'target_s': 0.35, 'met': per_turn <= 0.35},
      'batch16_step_share_of_matmul': batch16['share_of_matmul'],
      'batch16_step_parts': parts,
      'step_target_share': 0.6,
      'step_target_met': batch16['share_of_matmul'] >= 0.6,
      'repeats': repeats}
  bench_common.write_results(_OUT.value, results)
  print(f'bandwidth {limits["bandwidth_gb_s"]:.1f} GB/s, matmul '
        f'{limits["matmul_gflop_s"]:.1f} GFLOP/s')
  for s in steps:
    print(f'batch {s["batch"]:2d}: {1e3 * s["seconds"]:7.1f} ms/step, '
          f'{100 * s["share_of_matmul"]:5.1f}% of the matmul rate, '
          f'{100 * s["share_of_bandwidth"]:5.1f}% of the bandwidth')
  print(f'batch-16 step parts alone at cache length {length}: projections '
        f'{1e3 * parts["projections_s"]:.1f} ms, head '
        f'{1e3 * parts["head_s"]:.1f} ms, attention '
        f'{1e3 * parts["attention_s"]:.1f} ms (its cache read at the '
        f'bandwidth: {1e3 * at_bandwidth:.1f} ms), the rest '
        f'{1e3 * rest:.1f} ms; the step\'s share with the attention at the '
        f'bandwidth {100 * parts["share_if_attention_at_bandwidth"]:.0f}%, '
        'with the projections and head alone '
        f'{100 * parts["share_of_projections_and_head_alone"]:.0f}% '
        '(target 60%)')
  for r in per_batch:
    print(f'reasoning per ReCoVR turn at --reasoner_batch='
          f'{r["reasoner_batch"]}: {r["seconds_per_turn"]:.3f} s (prefill '
          f'{r["prefill_s_per_turn"]:.3f} s of {r["prefill_tokens_per_turn"]:.0f}'
          f' tokens, its floor {r["prefill_floor_s_per_turn"]:.3f} s; '
          f'decoding {r["decode_s_per_turn"]:.3f} s); target 0.35 s, '
          f'{_SESSIONS.value} sessions, intent + reflect + question')


if __name__ == '__main__':
  cli.run(main)
