"""drivers.jit_runner on a toy environment written here: the driver knows no
data source (two attributes, a user who names what differs)."""

import dataclasses
import itertools
from unittest import mock

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import methods
from recovr_jax.core import fusion
from recovr_jax.methods import base
from recovr_jax.protocol import traced
from recovr_jax.drivers import jit_loop
from recovr_jax.drivers import jit_runner
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.drivers import stepped
from recovr_jax.reasoning import asking

A, V = 2, 3                  # attributes, values per attribute
CODES = (V + 1) ** A         # partial assignments, the empty one included
VIDEOS = np.array(list(itertools.product(range(V), repeat=A)), np.int32)


def _encode(assignment):
  """A partial assignment's text: its values one-hot, L2-normalised."""
  x = np.zeros(A * V, np.float32)
  for a, v in enumerate(assignment):
    if v >= 0:
      x[a * V + v] = 1.0
  return x / max(np.linalg.norm(x), 1e-6)


def _decode(code):
  return [(code // (V + 1) ** (A - 1 - a)) % (V + 1) - 1 for a in range(A)]


@dataclasses.dataclass(frozen=True)
class ToyFace:
  """The user names the target's values the shown video lacks."""
  OBSERVATION = plan.AttributeReading

  def start(self, data, tables, query):
    del tables
    return plan.JaxStart(
        init_search=jnp.full((A,), -1, jnp.int32),
        modification_attrs=data.own[query],
        modification=data.modification[query],
        num_values=V), jnp.zeros((), jnp.int32)

  def code(self, assignment):
    radix = (V + 1) ** jnp.arange(A - 1, -1, -1)
    return jnp.sum((assignment + 1) * radix).astype(jnp.int32)

  def key(self, code, channel):
    return code + CODES * channel

  def text(self, tables, key):
    return tables[key % CODES]

  def hear(self, data, tables, seed_key, query, turn, state, top1,
           question):
    del data, tables, seed_key, query, turn, state, top1, question
    return {}, {}

  def read(self, data, tables, query, heard, state, top1, question):
    del tables, heard
    target = jnp.asarray(VIDEOS)[data.target[query]]
    shown = jnp.asarray(VIDEOS)[top1]
    mentions = jnp.where(target != shown, target, -1).astype(jnp.int32)
    empty = jnp.zeros((1,), jnp.float32)
    obs = plan.JaxObservation(
        shown=top1, reference=data.reference[query],
        action=jnp.asarray(plan.MODIFY, jnp.int32), asked=question,
        info=plan.AttributeReading(
            mentions=mentions, negative=jnp.asarray(False),
            shown_attrs=shown, utterance=empty, dialogue=empty,
            label=jnp.asarray(-1, jnp.int32)),
        num_values=V)
    return obs, state + 1, {'mentioned': mentions}

  def record(self, outputs, active):
    return {'mentioned': jnp.where(active, outputs['mentioned'], -1)}

  def stopped(self):
    return {'mentioned': jnp.full((A,), -1, jnp.int32)}


@dataclasses.dataclass(frozen=True)
class ToyEnvironment:
  data: plan.JaxData
  composer: object = 'sum'
  composer_params: object = None
  lazy: bool = False  # the texts encoded when a turn first needs them
  made: list = dataclasses.field(default_factory=list)  # its fillers

  def filler(self, config, seed, num_sessions, run_sessions=None):
    del config, seed, num_sessions, run_sessions
    self.made.append(_LazyFiller() if self.lazy else _Filler())
    return self.made[-1]


class _Filler:
  """Every text is encoded up front: nothing to add."""

  def arrays(self):
    return jnp.asarray(np.stack([_encode(_decode(c)) for c in range(CODES)]))

  def heard(self, turn, active, asks):
    del turn, active, asks
    return ''

  def planned(self, turn, active, needed):
    del turn, active
    assert (needed < 2 * CODES).all()
    return ''


class _LazyFiller:
  """A text is encoded when a turn's plans first need it (zeros until
  then); it logs each call and what it was given."""

  def __init__(self):
    self.codes, self.calls = {0}, []
    self.shapes = set()  # of the keys each call was given

  def arrays(self):
    return jnp.asarray(np.stack([_encode(_decode(c)) if c in self.codes
                                 else np.zeros(A * V, np.float32)
                                 for c in range(CODES)]))

  def heard(self, turn, active, asks):
    self.calls.append(('heard', turn))
    assert isinstance(active, np.ndarray) and asks == {}, (active, asks)
    return ''

  def planned(self, turn, active, needed):
    assert isinstance(needed, np.ndarray)
    self.shapes.add(needed.shape)
    # A stopped session asks for nothing.
    assert (needed[~active] == 0).all()
    new = {int(k) % CODES for k in np.ravel(needed)} - self.codes
    self.codes |= new
    self.calls.append(('planned', turn, len(new)))
    return f'encoded {len(new)}' if new else ''


def _environment(pairs, lazy=False):
  gallery = np.stack([_encode(v) for v in VIDEOS])
  reference, target = (np.array(x, np.int32) for x in zip(*pairs))
  # The modification names the target's values the reference lacks.
  change = np.where(VIDEOS[target] != VIDEOS[reference], VIDEOS[target], -1)
  memory = plan.JaxMemory(
      caption_attrs=jnp.asarray(VIDEOS), asked_with_value=jnp.tile(
          jnp.arange(A)[:, None], (1, V)).astype(jnp.int32),
      asked_plain=jnp.arange(A, dtype=jnp.int32),
      asked_open=jnp.asarray(-1, jnp.int32))
  return ToyEnvironment(plan.JaxData(
      gallery=jnp.asarray(gallery), memory=memory,
      reference=jnp.asarray(reference), target=jnp.asarray(target),
      modification=jnp.asarray(np.stack([_encode(c) for c in change])),
      own=jnp.asarray(change)), lazy=lazy)


def _with_constants():
  """``jit_loop.simulate_batch`` compiled with its config as a constant (a
  static argument): a function of its own, so ``jit_loop.simulate``'s cache
  counts only its own programs."""
  def constants(config, *args):
    return jit_loop.simulate_batch(config, *args)
  return jax.jit(constants, static_argnums=0)


class ToyEnvironmentTest(absltest.TestCase):

  def test_recovr_finds_every_target_and_both_schedules_agree(self):
    pairs = [(r, t) for r in range(len(VIDEOS)) for t in range(len(VIDEOS))
             if r != t][::5]
    env = _environment(pairs)
    ask = base.Settings(ask=asking.AskPolicy(mode='always', budget=1))
    config = traced.JitConfig(
        loop=ranking.LoopConfig(num_turns=3, list_length=5,
                                num_ids=len(VIDEOS)),
        face=ToyFace(), form=methods.make('recovr', ask).jax_form)
    sessions = np.arange(len(pairs))
    plain = jit_runner.run(env, config, sessions, seed=0, chunk_size=None)
    compact = jit_runner.run(env, config, sessions, seed=0, chunk_size=3)
    jax.tree.map(np.testing.assert_array_equal, compact, plain)
    targets = np.array([t for _, t in pairs])
    top1 = plain.displayed[:, :, 0]
    # The user names every value that differs, so the T2V text of turn 1 is
    # the target's whole assignment: every session ends on its target.
    np.testing.assert_array_equal(top1[:, -1], targets)
    self.assertLess((top1[:, 0] == targets).mean(), 1.0)
    # Sessions that found their target stopped; their turns record nothing.
    found = np.cumsum(top1[:, :-1] == targets[:, None], axis=1) > 0
    np.testing.assert_array_equal(plain.active, ~found)
    self.assertTrue((plain.own['mentioned'][~plain.active] == -1).all())
    chex.assert_shape(plain.own['mentioned'], (len(pairs), 3, A))
    # The Question Asker asks after a feedback turn's ranking, at most once
    # (budget 1): no question at turn 1, one at turn 2 if still searching.
    self.assertTrue((plain.asked[:, 0] == -1).all())
    np.testing.assert_array_equal(plain.asked[:, 1] >= 0, plain.active[:, 1])
    self.assertTrue((plain.asked[:, 2] == -1).all())
    # Turn 1's T2V text is the target's whole assignment (code 0, nothing,
    # for the sessions that stopped at turn 0).
    code = jax.vmap(ToyFace().code)(jnp.asarray(VIDEOS[targets]))
    np.testing.assert_array_equal(plain.search[:, 0],
                                  np.where(plain.active[:, 0], code, 0))
    self.assertTrue(plain.active[:, 0].any())


  def test_turns_run_stage_by_stage_and_equal_the_whole_scan(self):
    # The tables start empty and fill as the turns' plans need them; each
    # turn runs its stages once, in the module's order, the host's hooks
    # between them, and the trace equals simulate_batch's (the whole
    # lax.scan of the protocol's skeleton, the oracle) on the tables at
    # the end.
    pairs = [(r, t) for r in range(len(VIDEOS)) for t in range(len(VIDEOS))
             if r != t][::3]
    env = _environment(pairs, lazy=True)
    config = traced.JitConfig(
        loop=ranking.LoopConfig(num_turns=3, list_length=5,
                                num_ids=len(VIDEOS)),
        face=ToyFace(), form=methods.make('recovr').jax_form)
    sessions = np.arange(len(pairs))
    real_call = jit_runner._Programs.__call__  # pylint: disable=protected-access
    for chunk_size in (None, 4):
      with self.subTest(chunk_size=chunk_size):
        logged, stages = [], []

        def counted(programs, stage, tables, turn, *rest):
          stages.append((stage, turn))
          return real_call(programs, stage, tables, turn, *rest)

        with mock.patch.object(jit_runner._Programs, '__call__', counted):  # pylint: disable=protected-access
          trace = jit_runner.run(env, config, sessions, seed=0,
                                 chunk_size=chunk_size, log=logged.append)
        filler = env.made[-1]
        self.assertEqual(stages, [('start', 0), ('start_show', 0)] + [
            (stage, t) for t in (1, 2, 3)
            for stage in ('hear', 'decide', 'show')])
        self.assertEqual([c[:2] for c in filler.calls], [('planned', 0)] + [
            (hook, t) for t in (1, 2, 3) for hook in ('heard', 'planned')])
        self.assertGreater(filler.calls[2][2], 0)  # turn 1's new texts
        self.assertTrue(logged[0].startswith('turn 1: encoded'), logged)
        # Each hook was given the turn at hand only: [S, 2] keys.
        self.assertEqual(filler.shapes, {(len(sessions), 2)})
        whole = jax.tree.map(np.asarray, jit_loop.simulate(
            config, env.data, filler.arrays(), None,
            jnp.asarray(sessions, jnp.int32), jax.random.key(0)))
        jax.tree.map(np.testing.assert_array_equal, trace, whole)
        # And the lists equal those with every text encoded up front.
        eager = jit_runner.run(dataclasses.replace(env, lazy=False), config,
                               sessions, seed=0, chunk_size=chunk_size)
        jax.tree.map(np.testing.assert_array_equal, trace, eager)

  def test_a_turn_copies_a_fixed_number_of_arrays_to_the_host(self):
    # The host reads a turn through Programs.to_host alone: turn 0's asks,
    # each feedback turn's two (hear's, decide's), and the trace once at
    # the end, whatever the sessions, turns or chunks; nothing else
    # copies from the device (jax.device_get is called only inside it).
    pairs = [(r, t) for r in range(len(VIDEOS)) for t in range(len(VIDEOS))
             if r != t]
    real_get = jax.device_get
    for num, turns, chunk_size in ((8, 3, None), (30, 3, 4), (30, 5, 7)):
      with self.subTest(num=num, turns=turns, chunk_size=chunk_size):
        env = _environment(pairs[:num], lazy=True)
        config = traced.JitConfig(
            loop=ranking.LoopConfig(num_turns=turns, list_length=5,
                                    num_ids=len(VIDEOS)),
            face=ToyFace(), form=methods.make('recovr').jax_form)
        gets = []

        def counted(tree):
          gets.append(len(jax.tree.leaves(tree)))
          return real_get(tree)

        with mock.patch.object(jax, 'device_get', counted):
          jit_runner.run(env, config, np.arange(num), seed=0,
                         chunk_size=chunk_size)
        self.assertLen(gets, 1 + 2 * turns + 1)
        # hear's asks: active alone (the toy asks for nothing); decide's:
        # needed; the trace: every turn's outputs.
        self.assertEqual(gets[1:-1], [1, 1] * turns)

  def test_live_buckets_give_the_same_trace_with_less_work(self):
    # With buckets, a feedback turn plans and ranks only the sessions
    # still searching, gathered into a power-of-two bucket, and scatters
    # them back: the trace equals every session running every turn, and
    # the scored rows shrink with the sessions that stopped.
    pairs = [(r, t) for r in range(len(VIDEOS)) for t in range(len(VIDEOS))
             if r != t][::2]
    env = _environment(pairs, lazy=True)
    config = traced.JitConfig(
        loop=ranking.LoopConfig(num_turns=4, list_length=5,
                                num_ids=len(VIDEOS)),
        face=ToyFace(), form=methods.make('recovr').jax_form)
    sessions = np.arange(len(pairs))
    plain = jit_runner.run(env, config, sessions, seed=0, chunk_size=None)
    sizes = []
    real = jit_runner.bucket
    with mock.patch.object(jit_runner, 'MIN_BUCKET', 2), \
        mock.patch.object(jit_runner, 'bucket',
                          lambda n, s: sizes.append((n, real(n, s))) or
                          real(n, s)):
      bucketed = jit_runner.run(env, config, sessions, seed=0,
                                chunk_size=None, buckets=True)
    jax.tree.map(np.testing.assert_array_equal, bucketed, plain)
    live = plain.active.sum(axis=0)
    self.assertEqual([n for n, _ in sizes], live.tolist())
    for n, rows in sizes:  # the next power of two, at most the batch
      self.assertEqual(rows, min(len(pairs), max(2, 1 << max(n - 1, 0)
                                                 .bit_length())))
    self.assertLess(sizes[-1][1], len(pairs))  # some sessions stopped
    self.assertEqual(jit_runner.bucket(0, 100), jit_runner.MIN_BUCKET)
    self.assertEqual(jit_runner.bucket(17, 100), 32)
    self.assertEqual(jit_runner.bucket(90, 100), 100)

  def test_chunks_are_chosen_by_backend(self):
    # The flag's default: chunks on a CPU, none on an accelerator (where a
    # chunk's lax.cond has the host read its predicate); 0: none.
    self.assertEqual(jit_runner.chunk_size(None, 'cpu'),
                     jit_runner.DEFAULT_CHUNK_SIZE)
    self.assertIsNone(jit_runner.chunk_size(None, 'gpu'))
    self.assertIsNone(jit_runner.chunk_size(None, 'tpu'))
    self.assertIsNone(jit_runner.chunk_size(0, 'cpu'))
    self.assertEqual(jit_runner.chunk_size(7, 'gpu'), 7)

  def test_numeric_settings_are_traced_and_compile_once(self):
    # rrf_k, gamma, kappa and the ask policy's numbers are arguments of the
    # compiled program, not constants in it: configs that differ only in
    # them share one program, and each gives what a program compiled with
    # its numbers as constants gives, to the bit.
    pairs = [(r, t) for r in range(len(VIDEOS)) for t in range(len(VIDEOS))
             if r != t][::7]
    env = _environment(pairs)
    queries = jnp.arange(len(pairs), dtype=jnp.int32)
    tables = _Filler().arrays()
    constants = _with_constants()
    before = jit_loop.simulate.compiled._cache_size()  # pylint: disable=protected-access
    traces = []
    for rrf_k, kappa, threshold in ((60.0, (11, 4, 2), 0.8),
                                    (0.5, (2, 2, 1), 0.3)):
      ask = base.Settings(ask=asking.AskPolicy(
          mode='entropy', threshold=threshold, budget=2))
      config = traced.JitConfig(
          loop=ranking.LoopConfig(num_turns=3, list_length=5, rrf_k=rrf_k,
                                  recency='exp', gamma=0.7, kappa=kappa,
                                  num_ids=len(VIDEOS)),
          face=ToyFace(), form=methods.make('recovr', ask).jax_form)
      args = (env.data, tables, None, queries, jax.random.key(0))
      trace = jit_loop.simulate(config, *args)
      jax.tree.map(np.testing.assert_array_equal, trace,
                   constants(config, *args))
      traces.append(trace)
    self.assertEqual(jit_loop.simulate.compiled._cache_size() - before, 1)  # pylint: disable=protected-access
    # The numbers reach the program: the two configs rank differently.
    self.assertFalse(np.array_equal(traces[0].scores, traces[1].scores))

  def test_recovr_and_its_ablations_share_one_program(self):
    # The ReCoVR family's switches (the channels, State Reflection, the
    # anchor, keep, avoid and rank-cap: config_pytree.switch) and its fusion
    # variant (config_pytree.choice) are arguments of the compiled program:
    # the ablations and fusion variants share ReCoVR's, and each gives what
    # a program compiled with its switches and fusion as constants gives,
    # to the bit.
    pairs = [(r, t) for r in range(len(VIDEOS)) for t in range(len(VIDEOS))
             if r != t][::4]
    env = _environment(pairs)
    base_loop = ranking.LoopConfig(num_turns=3, list_length=5,
                                   num_ids=len(VIDEOS))
    args = (env.data, _Filler().arrays(), None,
            jnp.arange(len(pairs), dtype=jnp.int32), jax.random.key(0))
    constants = _with_constants()
    names = ('recovr', 'covr_only', 't2v_only', 'intent_only', 'no_rankcap',
             'no_reflection', 'no_keep', 'no_avoid', 'covr_plain',
             't2v_plain', 'fixed_anchor', 'static_rrf', 'uniform_rrf',
             'penalty_rrf', 'sim_max', 'sim_sum')
    before = jit_loop.simulate.compiled._cache_size()  # pylint: disable=protected-access
    traces = {}
    for name in names:
      method = methods.make(name)
      config = traced.JitConfig(loop=method.ranking(base_loop),
                                face=ToyFace(), form=method.jax_form)
      traces[name] = jit_loop.simulate(config, *args)
      jax.tree.map(lambda a, b, n=name: np.testing.assert_array_equal(
          a, b, err_msg=n), traces[name], constants(config, *args))
    self.assertEqual(jit_loop.simulate.compiled._cache_size() - before, 1)  # pylint: disable=protected-access
    # The switches and the fusion reach the program: the ablations and the
    # fusion variants rank differently.
    differ = [n for n in names[1:] if not np.array_equal(
        traces[n].displayed, traces['recovr'].displayed)]
    self.assertGreaterEqual(len(differ), 5, differ)
    self.assertGreaterEqual(len(set(differ) & set(fusion.METHODS)), 3,
                            differ)
    scores = {n: traces[n].top_scores.tobytes() for n in fusion.METHODS[1:]}
    self.assertLen(set(scores.values()), len(scores))  # each its own

  def test_a_form_that_reads_another_observation_is_refused(self):
    # The stepped face's form reads the host's tabulated plan, which the
    # toy's face does not give: refused before anything is traced.
    loop = ranking.LoopConfig(num_turns=3, list_length=5,
                              num_ids=len(VIDEOS))
    with self.assertRaisesRegex(
        traced.Unsupported, 'reads TabulatedStep observations; this '
        "source's face gives AttributeReading"):
      traced.JitConfig(loop=loop, face=ToyFace(),
                       form=stepped.TabulatedForm())


if __name__ == '__main__':
  absltest.main()
