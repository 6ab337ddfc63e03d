"""The interactive loop: ReCoVR, its ablations and the adapted baselines
under one protocol (DESIGN sections 1 and 5).

The host side does the text (the user, the reasoning modules, encoding),
batched across sessions; the ranking core (``session.turn_step``) is one
jitted function vmapped over the batch. Every method gets the same user,
targets, Turn-0 ranking and stopping rule.
"""

import dataclasses
import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import asking
from recovr_jax import demotion
from recovr_jax import lexicon
from recovr_jax import query_update
from recovr_jax import reasoning
from recovr_jax import session as session_lib

T2V, COVR = 0, 1
_SIGMA = {'neg': demotion.SIGMA_NEG, 'neu': demotion.SIGMA_NEU,
          'pos': demotion.SIGMA_POS}
_ACTION_SIGMA = {'rewrite': demotion.SIGMA_NEG, 'modify': demotion.SIGMA_NEU,
                 'answer': demotion.SIGMA_NEU, 'stop': demotion.SIGMA_NEU}


@dataclasses.dataclass(frozen=True)
class Method:
  """A method under the shared protocol."""
  name: str
  family: str                 # 'recovr', 'ivr', 'merlin', 'umivr', 'rewrite'
  t2v: bool = False           # uses the T2V channel
  covr: bool = True           # uses the CoVR channel
  reflection: bool = False    # State Reflector on (else sigma neutral)
  rank_cap: bool = False
  dynamic_anchor: bool = False
  fusion: str | None = None   # None: the single CoVR list is shown
  asks: bool = False          # asks a question every turn (UMIVR)


def _recovr(name, **changes):
  base = dict(family='recovr', t2v=True, covr=True, reflection=True,
              rank_cap=True, dynamic_anchor=True, fusion='tw_rrf')
  base.update(changes)
  return Method(name=name, **base)


METHODS = {m.name: m for m in (
    _recovr('recovr'),
    _recovr('covr_only', t2v=False),
    _recovr('t2v_only', covr=False),
    _recovr('intent_only', reflection=False, rank_cap=False),
    _recovr('no_rankcap', rank_cap=False),
    _recovr('no_reflection', reflection=False),
    _recovr('fixed_anchor', dynamic_anchor=False),
    _recovr('static_rrf', fusion='static_rrf'),
    _recovr('uniform_rrf', fusion='uniform_rrf'),
    _recovr('penalty_rrf', fusion='penalty_rrf'),
    _recovr('sim_max', fusion='sim_max'),
    _recovr('sim_sum', fusion='sim_sum'),
    Method('ivr', 'ivr'),
    Method('merlin', 'merlin'),
    Method('umivr', 'umivr', asks=True),
    Method('history_rewrite', 'rewrite'),
    Method('ivr_rankcap', 'ivr', rank_cap=True),
    Method('umivr_rankcap', 'umivr', rank_cap=True, asks=True),
)}
BASELINES = ('ivr', 'merlin', 'umivr', 'history_rewrite', 'ivr_rankcap',
             'umivr_rankcap')


@dataclasses.dataclass(frozen=True)
class Environment:
  """What the loop reads: the gallery (Progress Memory, long-term part),
  the composed queries to answer, and the encoders."""
  gallery: np.ndarray                  # [G, D] float32 video embeddings
  captions: tuple[str, ...]            # [G]
  attributes: np.ndarray | None        # [G, A] for the simulated user;
                                       # None: a caption-based user
  reference: np.ndarray                # [Q] gallery ids
  target: np.ndarray                   # [Q] gallery ids
  modification: tuple[str, ...]        # [Q]
  encode_text: Callable[[Sequence[str]], np.ndarray]
  compose: Callable[[np.ndarray, np.ndarray], np.ndarray]
  # The same composer as a pure JAX function, for the jitted mode
  # (``simulation.compose``): 'mlp' with its params, 'sum', or None.
  composer: str | None = None
  composer_params: object = None


@dataclasses.dataclass(frozen=True)
class Protocol:
  """The loop's settings beyond the ranking core's."""
  merlin_alpha: float = query_update.MERLIN_ALPHA
  ask: asking.AskPolicy = asking.AskPolicy()
  question_candidates: int = 10   # top results the Question Asker reads


@dataclasses.dataclass
class BatchResult:
  """Per-session records of one batch."""
  displayed: np.ndarray        # [S, T+1, K] int32 shown lists per turn
  top_scores: np.ndarray       # [S, T+1] float32 score of each shown top-1
  records: list[list[dict]]    # [S][turn] feedback, action, sigma, question


@functools.partial(jax.jit, static_argnames=('config',))
def _start(config, gallery, states, inputs):
  step = functools.partial(session_lib.start_step, config)
  return jax.vmap(step, in_axes=(None, 0, 0))(gallery, states, inputs)


@functools.partial(jax.jit, static_argnames=('config',))
def _turn(config, gallery, states, inputs):
  # config and gallery shared; state and inputs per session.
  step = functools.partial(session_lib.turn_step, config)
  return jax.vmap(step, in_axes=(None, 0, 0))(gallery, states, inputs)


_entropy = jax.jit(jax.vmap(asking.normalized_entropy, in_axes=(0, None)))


def loop_config(method: Method, base: session_lib.LoopConfig):
  """The ranking core's config for ``method``."""
  return dataclasses.replace(
      base, fusion_method=method.fusion, rank_cap=method.rank_cap,
      window=base.window if method.fusion else 1)


def run_batch(env: Environment, method: Method, sessions: np.ndarray,
              user, reasoner, base: session_lib.LoopConfig,
              protocol: Protocol = Protocol()) -> BatchResult:
  """Runs ``method`` on the composed queries ``sessions`` (indices).

  Args:
    env: the environment.
    method: the method.
    sessions: ``[S]`` indices into ``env``'s queries; they also seed the
      user's draws, so a session meets the same user under every method.
    user: a ``simulator.SimulatedUser``.
    reasoner: a reasoning backend (``rules`` or ``flax_lm``).
    base: the ranking core's hyperparameters (T, W, K, k, kappa, ...).
    protocol: merlin alpha, ask policy.
  """
  config = loop_config(method, base)
  s = len(sessions)
  d = env.gallery.shape[1]
  gallery = jnp.asarray(env.gallery)
  ref = np.asarray(env.reference)[sessions]
  tgt = np.asarray(env.target)[sessions]
  mods = [env.modification[i] for i in sessions]
  ref_emb = env.gallery[ref]
  covr0 = np.asarray(env.compose(ref_emb, env.encode_text(mods)))
  memories = [reasoning.SessionMemory() for _ in range(s)]
  t2v0 = np.zeros((s, d), np.float32)
  t2v_valid = np.zeros(s, bool)
  if method.t2v:
    init = reasoner.t2v_init([reasoning.T2VInitRequest(env.captions[r], m)
                              for r, m in zip(ref, mods)])
    searches = [o['search'] for o in init]
    memories = [reasoning.SessionMemory(search=q) for q in searches]
    t2v_valid = np.array([bool(q) for q in searches])
    t2v0 = np.asarray(env.encode_text(searches))

  def inputs(t2v, t2v_ok, covr, covr_ok, sigma, stop):
    return session_lib.TurnInputs(
        queries=jnp.asarray(np.stack([t2v, covr], axis=1), jnp.float32),
        valid=jnp.asarray(np.stack([t2v_ok, covr_ok], axis=1)),
        exclude=jnp.asarray(ref, jnp.int32),
        sigma=jnp.asarray(sigma, jnp.int32), stop=jnp.asarray(stop))

  init_state = session_lib.init_state(config)
  states = jax.tree.map(lambda x: jnp.broadcast_to(x, (s,) + x.shape),
                        init_state)
  states = _start(config, gallery, states, inputs(
      t2v0, t2v_valid & method.t2v, covr0, np.full(s, method.covr),
      np.full(s, demotion.SIGMA_NEU), np.zeros(s, bool)))
  shown = [np.asarray(states.shown_ids)]
  top_scores = [np.asarray(states.shown_scores[:, 0])]
  records = [[{'turn': 0, 'action': None, 'feedback': mods[i],
               'sigma': None, 'question': None}] for i in range(s)]

  answers = [[m] for m in mods]                 # IVR / UMIVR query text
  merlin_query = covr0.copy()                   # MERLIN's running query
  dialogue = [[m] for m in mods]                # full-history rewrite
  questions = [None] * s
  asked = np.zeros(s, int)
  stopped = np.zeros(s, bool)
  for turn in range(1, config.num_turns + 1):
    top1 = shown[-1][:, 0]
    stopped |= top1 == tgt
    active = np.flatnonzero(~stopped)
    feedback, extras = {}, {}
    for i in active:
      feedback[i] = _respond(user, env, int(sessions[i]), turn, int(tgt[i]),
                             int(top1[i]), questions[i])
    t2v = np.zeros((s, d), np.float32)
    covr = np.zeros((s, d), np.float32)
    t2v_ok = np.zeros(s, bool)
    covr_ok = np.zeros(s, bool)
    sigma = np.full(s, demotion.SIGMA_NEU)
    if len(active):
      texts = [feedback[i].text for i in active]
      if method.family == 'recovr':
        shown_caps = [env.captions[top1[i]] for i in active]
        intents = reasoner.intent([reasoning.IntentRequest(
            txt, cap, memories[i]) for txt, cap, i in zip(texts, shown_caps,
                                                          active)])
        intent_valid = getattr(reasoner, 'last_first_pass', None)
        if method.reflection:
          reflections = reasoner.reflect([reasoning.ReflectRequest(
              txt, cap, memories[i]) for txt, cap, i in zip(texts, shown_caps,
                                                            active)])
          reflect_valid = getattr(reasoner, 'last_first_pass', None)
        else:
          reflect_valid = None
          reflections = [{'sigma': 'neu', 'keep': [], 'avoid': []}
                         for _ in active]
        searches = [o['search'] for o in intents]
        edits = [o['edit'] for o in intents]
        t2v[active] = env.encode_text(searches)
        t2v_ok[active] = [method.t2v and bool(q) for q in searches]
        anchors = top1[active] if method.dynamic_anchor else ref[active]
        covr[active] = env.compose(env.gallery[anchors],
                                   env.encode_text(edits))
        covr_ok[active] = [method.covr and bool(e) for e in edits]
        for j, i in enumerate(active):
          sigma[i] = _SIGMA[reflections[j]['sigma']]
          memories[i] = reasoning.update_memory(memories[i], intents[j],
                                                reflections[j])
          extras[i] = {'search': searches[j], 'edit': edits[j]}
          if intent_valid is not None:
            extras[i]['valid'] = {'intent': intent_valid[j]}
            if reflect_valid is not None:
              extras[i]['valid']['reflect'] = reflect_valid[j]
      else:
        for i in active:
          answers[i].append(feedback[i].text)
          dialogue[i].append(feedback[i].text)
        if method.family in ('ivr', 'umivr'):
          query_texts = [' [SEP] '.join(answers[i]) for i in active]
          covr[active] = env.compose(ref_emb[active],
                                     env.encode_text(query_texts))
        elif method.family == 'merlin':
          answer_emb = env.encode_text(texts)
          for j, i in enumerate(active):
            merlin_query[i] = np.asarray(query_update.slerp(
                merlin_query[i], answer_emb[j], protocol.merlin_alpha))
          covr[active] = merlin_query[active]
        else:  # full-history rewrite: one edit regenerated from the dialogue
          rewritten = []
          for i in active:
            mentions = {}
            for utterance in dialogue[i]:
              mentions.update(lexicon.parse(utterance))
            rewritten.append(lexicon.canonical_edit(mentions) or mods[i])
          covr[active] = env.compose(ref_emb[active],
                                     env.encode_text(rewritten))
        covr_ok[active] = True
        for i in active:
          sigma[i] = _ACTION_SIGMA[feedback[i].action]
    states = _turn(config, gallery, states,
                   inputs(t2v, t2v_ok, covr, covr_ok, sigma, stopped.copy()))
    shown.append(np.asarray(states.shown_ids))
    top_scores.append(np.asarray(states.shown_scores[:, 0]))

    # Questions shown with this turn's list, answered (or not) next turn.
    new_questions = [None] * s
    if len(active) and (method.asks or protocol.ask.mode != 'never'):
      if method.asks:
        ask = list(active)
      else:
        entropy = np.asarray(_entropy(states.shown_scores[active],
                                      protocol.ask.tau))
        ask = [i for j, i in enumerate(active) if asking.should_ask(
            protocol.ask, float(entropy[j]), int(asked[i]))]
      if ask:
        top = np.asarray(states.shown_ids)[ask, :protocol.question_candidates]
        out = reasoner.question([reasoning.QuestionRequest(
            tuple(env.captions[g] for g in row if g >= 0), memories[i])
            for row, i in zip(top, ask)])
        for i, o in zip(ask, out):
          new_questions[i] = o['question']
          asked[i] += 1
    for i in range(s):
      if i in feedback:
        rec = {'turn': turn, 'action': feedback[i].action,
               'feedback': feedback[i].text,
               'sigma': demotion.SIGMAS[sigma[i]], 'question': questions[i],
               **extras.get(i, {})}
      else:
        rec = {'turn': turn, 'action': 'stopped', 'feedback': '',
               'sigma': None, 'question': None}
      rec['asked'] = new_questions[i]
      records[i].append(rec)
    questions = new_questions
  return BatchResult(displayed=np.stack(shown, axis=1),
                     top_scores=np.stack(top_scores, axis=1),
                     records=records)


def _respond(user, env, session, turn, target, shown, question):
  """The user's feedback; caption-based users read captions instead."""
  if env.attributes is None:
    return user.respond(session, turn, target, shown, env.captions[target],
                        env.captions[shown])
  return user.respond(session, turn, target, shown, env.attributes[target],
                      env.attributes[shown], question=question)


def world_environment(world, text_encoder, video_params, composer_params,
                      cache_dir=None) -> Environment:
  """The environment of the embedded world with the shipped encoders."""
  from recovr_jax import encoders  # pylint: disable=g-import-not-at-top
  from recovr_jax import training  # pylint: disable=g-import-not-at-top
  memory = training.gallery_memory(world, video_params, text_encoder,
                                   cache_dir)
  composer = encoders.Composer()
  compose_fn = jax.jit(lambda r, e: composer.apply(composer_params, r, e))

  def compose(reference, edit):
    return np.asarray(compose_fn(jnp.asarray(reference, jnp.float32),
                                 jnp.asarray(edit, jnp.float32)))

  return Environment(
      gallery=memory.video, captions=memory.captions,
      attributes=world.gallery_attributes,
      reference=np.asarray(world.test.reference),
      target=np.asarray(world.test.target), modification=world.test.edit,
      encode_text=text_encoder, compose=compose, composer='mlp',
      composer_params=composer_params)
