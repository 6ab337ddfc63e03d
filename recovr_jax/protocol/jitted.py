"""The jitted driver: whole sessions as one ``lax.scan`` over turns inside
``vmap`` over sessions, compiled once per shape.

It runs the protocol's skeleton (``session.feedback_turn``) on one session
in JAX, for methods that give a pure-JAX form of their step (``jax_form``:
every registered method) on the embedded world:

* the user is ``simulated_user.decide`` (``jax.random`` draws keyed by seed,
  session and turn), so it decides (action, named attributes, prefix)
  instead of writing words;
* what the method observes is what the host rules reasoner reads out of
  those words: with the lexicon's words and no noise, the named attributes'
  target values and the Rewrite prefix's rejection marker; otherwise (the
  user's own words, surface noise, answers, or a method that reads the words
  themselves) the parse held by the ``words.WordTable``, with the words'
  embeddings and the joined dialogue's (``words.DialogueTable``) for the
  baselines; the shown video's caption parsed, and from the start the
  modification text parsed;
* the methods' questions (ReCoVR's Question Asker behind AskStream's gate,
  IVR-QA's caption questions, UMIVR's split entropy) run after each ranking
  and reach the user as the attribute it reads in them;
* text encoding is a lookup in the ``phrase_table.PhraseTable`` of the
  reasoner's canonical texts. The tables fill themselves: a run that needs
  an entry a table lacks reports it, the host writes, parses or encodes it
  and the batch runs again (at most ``3T + 4`` passes).

With ``UserConfig(draws='jax')`` the host driver shows the same lists, turn
by turn (tested).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from recovr_jax.core import demotion
from recovr_jax.core import sharding
from recovr_jax.core import vectors
from recovr_jax.protocol import host
from recovr_jax.protocol import ranking
from recovr_jax.protocol import session as session_lib
from recovr_jax.protocol import words as words_lib
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas
from recovr_jax.world import generator as world_lib
from recovr_jax.world import lexicon
from recovr_jax.world import phrase_table
from recovr_jax.world import simulated_user

NUM_CODES = phrase_table.NUM_CODES
DEFAULT_CHUNK_SIZE = 64  # sessions per vmapped chunk of a compacted turn


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimArrays:
  """The world as tensors (Progress Memory, long-term part)."""
  gallery: jax.Array        # [N, D] float32 video embeddings
  attributes: jax.Array     # [N, A] int32 true attributes (the user's view)
  caption_attrs: jax.Array  # [N, A] int32 parsed captions (the reasoner's)
  reference: jax.Array      # [Q] int32 gallery ids
  target: jax.Array         # [Q] int32 gallery ids
  init_search: jax.Array    # [Q, A] int32 T2V initializer's assignment
  modification_attrs: jax.Array  # [Q, A] int32 modification texts, parsed
  modification: jax.Array   # [Q, D] float32 encoded modification texts
  # The attribute the user reads out of the rules reasoner's questions
  # (``lexicon.question_attribute``; -1 none): about attribute a saying its
  # value v (IVR-QA's), about a alone (UMIVR's), and its open question.
  asked_with_value: jax.Array  # [A, V] int32
  asked_plain: jax.Array       # [A] int32
  asked_open: jax.Array        # [] int32


@dataclasses.dataclass(frozen=True)
class SimConfig:
  """Static settings of a jitted run (hashable)."""
  loop: ranking.LoopConfig
  user: simulated_user.UserConfig
  form: object              # the method's ``jax_form`` (hashable)
  composer: object = 'sum'  # a flax Module applied to composer_params, or 'sum'
  # The user's words are tabulated (``protocol.words``): its own language or
  # surface noise, which the reasoner reads differently from what it named,
  # or a method that reads the words themselves.
  words: bool = False
  utterances: bool = False  # each utterance's embedding (MERLIN)
  dialogues: bool = False   # the joined dialogue's embedding (IVR, UMIVR)
  reasoner: str = 'rules'   # whose reading of the words is tabulated


@dataclasses.dataclass(frozen=True)
class SimEnvironment:
  """What a jitted run reads: arrays, the composer and the phrase table."""
  arrays: SimArrays
  composer: object
  composer_params: object
  table: phrase_table.PhraseTable
  captions: tuple[str, ...]
  encode_text: object = None
  modification_texts: tuple[str, ...] = ()
  # ``words.WordTable`` / ``DialogueTable`` per (user config, seed, T,
  # embeddings held), filled across batches.
  word_tables: dict = dataclasses.field(default_factory=dict)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimTrace:
  """A batch's run; per-turn fields are for turns 1..T, and stopped
  sessions' turns hold action stop, no mentions, sigma neu and code 0."""
  displayed: jax.Array   # [S, T+1, K] int32 shown lists
  top_scores: jax.Array  # [S, T+1] float32
  active: jax.Array      # [S, T] bool, the user had not stopped
  action: jax.Array      # [S, T] int32 index into simulated_user.ACTIONS
  mentioned: jax.Array   # [S, T, A] int32 named values, -1 not named
  sigma: jax.Array       # [S, T] int32
  search: jax.Array      # [S, T] int32 the Intent Decomposer's search code
  edit: jax.Array        # [S, T] int32 its edit code (0: empty)
  needed: jax.Array      # [S, T+1, 2] int32 table codes used (0: none)
  fired: jax.Array       # [S, T] bool rank-cap changed the list it capped
  word: jax.Array        # [S, T] int32 the decision's word-table key (-1)
  word_found: jax.Array  # [S, T] bool the word table held it
  dialogue_parent: jax.Array  # [S, T] int32 dialogue node before the turn
  dialogue_found: jax.Array   # [S, T] bool the dialogue table held its child
  asked: jax.Array       # [S, T] int32 attribute of the question answered


class Unsupported(ValueError):
  """A setting the jitted driver cannot run; ``flag`` names what to change."""

  def __init__(self, flag: str, message: str):
    super().__init__(message)
    self.flag = flag


def check_supported(method, user: simulated_user.UserConfig,
                    ask_mode: str = 'never'):
  """Raises ``Unsupported`` naming what the jitted mode cannot run."""
  if method.jax_form is None:
    raise Unsupported('--methods', (
        f'method {method.name!r} runs only in the host loop (it has no '
        'jax_form)'))
  del user, ask_mode  # every user and ask policy (questions run in JAX)


def prepare(env: host.Environment) -> SimEnvironment:
  """The tensors of a world environment (checked, before any run)."""
  if env.attributes is None:
    raise ValueError('the jitted mode needs attribute labels (the embedded '
                     'world); this environment has none')
  if env.composer is None:
    raise ValueError('the jitted mode needs a pure JAX composer (a flax '
                     "Module or 'sum'); the environment has none")
  num_attrs = world_lib.NUM_ATTRIBUTES

  def assignment(parsed):
    row = np.full(num_attrs, -1, np.int32)
    for a, v in parsed.items():
      row[a] = v
    return row

  caption_attrs = np.stack([assignment(lexicon.parse(c))
                            for c in env.captions])
  init = rules.RulesReasoner(lexicon).t2v_init([
      schemas.T2VInitRequest(env.captions[r], m)
      for r, m in zip(env.reference, env.modification)])
  init_search = []
  for q, out in enumerate(init):
    parsed = lexicon.parse(out['search'])
    if out['search'] != lexicon.canonical_description(parsed):
      raise ValueError(f'query {q}: the T2V initializer wrote '
                       f'{out["search"]!r}, which is not a canonical '
                       'description; the jitted mode cannot represent it')
    init_search.append(assignment(parsed))
  modification = np.asarray(env.encode_text(list(env.modification)),
                            np.float32)
  arrays = SimArrays(
      gallery=jnp.asarray(env.gallery, jnp.float32),
      attributes=jnp.asarray(env.attributes, jnp.int32),
      caption_attrs=jnp.asarray(caption_attrs),
      reference=jnp.asarray(env.reference, jnp.int32),
      target=jnp.asarray(env.target, jnp.int32),
      init_search=jnp.asarray(np.stack(init_search)),
      modification_attrs=jnp.asarray(np.stack([
          assignment(lexicon.parse(m)) for m in env.modification])),
      modification=jnp.asarray(modification),
      **_question_tables())
  return SimEnvironment(arrays=arrays, composer=env.composer,
                        composer_params=env.composer_params,
                        table=phrase_table.PhraseTable(env.encode_text,
                                          env.gallery.shape[1]),
                        captions=tuple(env.captions),
                        encode_text=env.encode_text,
                        modification_texts=tuple(env.modification))


def _question_tables():
  """What the user reads out of each question the rules reasoner asks."""
  reasoner = rules.RulesReasoner(lexicon)

  def asked(question):
    a = lexicon.question_attribute(question)
    return -1 if a is None else a

  num_attrs = world_lib.NUM_ATTRIBUTES
  with_value = np.full((num_attrs, max(world_lib.NUM_VALUES)), -1, np.int32)
  for a in range(num_attrs):
    for v in range(world_lib.NUM_VALUES[a]):
      with_value[a, v] = asked(reasoner.attribute_question(a, v))
  plain = [asked(reasoner.attribute_question(a)) for a in range(num_attrs)]
  # The open question about captions that state nothing.
  open_question = reasoner.question([schemas.QuestionRequest(
      ('',), schemas.SessionMemory())])[0]['question']
  return dict(asked_with_value=jnp.asarray(with_value),
              asked_plain=jnp.asarray(plain, jnp.int32),
              asked_open=jnp.asarray(asked(open_question), jnp.int32))


def compose(composer, params, reference, edit):
  """``composer`` (a flax Module, or 'sum') as a pure function of
  ``[..., D]`` inputs."""
  if isinstance(composer, str) and composer == 'sum':
    return vectors.sum_composer(reference, edit)
  return composer.apply(params, reference, edit)


_lookup = phrase_table.lookup


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SessionCarry:
  """One session's state between turns."""
  state: ranking.SessionState
  method: dict       # the method's jax_form state (e.g. search, keep [A])
  question: jax.Array  # [] int32 attribute the user reads in the question
                       # shown with the list (-1: none)
  asked: jax.Array     # [] int32 questions asked so far
  dialogue: jax.Array  # [] int32 the dialogue's node (``words``)


@dataclasses.dataclass(frozen=True)
class _Shared:
  """What every session of a batch reads (unbatched under vmap)."""
  arrays: SimArrays
  index: jax.Array
  rows: jax.Array
  composer_params: object
  seed_key: jax.Array
  words: tuple = ()      # ``WordTable.arrays()``
  dialogues: tuple = ()  # ``DialogueTable.arrays()``


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JaxObservation:
  """What a jitted method observes at a feedback turn (one session)."""
  mentions: jax.Array     # [A] int32 values the feedback names, -1 none
  negative: jax.Array     # [] bool, a rejection marker in the words
  shown_attrs: jax.Array  # [A] int32 the shown video's caption, parsed
  shown: jax.Array        # [] int32 gallery id of the shown top-1
  reference: jax.Array    # [] int32 v_ref
  action: jax.Array       # [] int32 the user's action (for the record)
  word: jax.Array         # [] int32 word-table key (-1: not tabulated)
  word_found: jax.Array   # [] bool
  utterance: jax.Array    # [D'] the words' embedding (``utterances``)
  dialogue: jax.Array     # [D'] the dialogue's embedding (``dialogues``)
  dialogue_parent: jax.Array  # [] int32 the dialogue's node before
  dialogue_node: jax.Array    # [] int32 and after the turn
  dialogue_found: jax.Array   # [] bool
  asked: jax.Array        # [] int32 the question's attribute (-1 none)
  # [] int32 the reasoner's reading of the user's decision from the words
  # (``frames.LABELS`` index; -1 none).
  label: jax.Array = None
  # V: values per attribute the environment's assignments range over (the
  # width of a plan's ``avoid [A, V]``).
  num_values: int = dataclasses.field(default=0, metadata=dict(static=True))


def _channel_codes(plan):
  """The plan's table codes: ``(search, edit, used search, used edit)``;
  code 0 (the empty text) marks an unused channel."""
  search_code = phrase_table.code(plan.search)
  edit_code = phrase_table.code(plan.edit)
  return (search_code, edit_code, search_code * plan.use_search,
          edit_code * plan.use_edit)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class JaxStart:
  """What a jitted method reads at turn 0 (one session)."""
  init_search: jax.Array         # [A] the T2V initializer's assignment
  modification_attrs: jax.Array  # [A] the modification text, parsed
  modification: jax.Array        # [D] the modification text, encoded
  # V: values per attribute (the width of a plan's ``avoid [A, V]``).
  num_values: int = dataclasses.field(default=0, metadata=dict(static=True))


def _session_start(config: SimConfig, shared: _Shared, query):
  """Turn 0 of one session: ``(carry, search code used)``."""
  lc, arrays = config.loop, shared.arrays
  ref = arrays.reference[query]
  method_state, search = config.form.init(JaxStart(
      init_search=arrays.init_search[query],
      modification_attrs=arrays.modification_attrs[query],
      modification=arrays.modification[query],
      num_values=arrays.asked_with_value.shape[1]))
  search_code = phrase_table.code(search) * config.form.t2v
  covr = compose(config.composer, shared.composer_params,
                 arrays.gallery[ref], arrays.modification[query])
  inputs = ranking.TurnInputs(
      queries=jnp.stack([_lookup(shared.index, shared.rows, search_code),
                         covr]),
      valid=jnp.stack([search_code > 0, jnp.asarray(config.form.covr)]),
      exclude=ref, sigma=jnp.asarray(demotion.SIGMA_NEU),
      stop=jnp.asarray(False))
  state = ranking.start_step(lc, arrays.gallery, ranking.init_state(lc),
                             inputs)
  none = jnp.asarray(-1, jnp.int32)
  return SessionCarry(state=state, method=method_state, question=none,
                      asked=jnp.asarray(0, jnp.int32),
                      dialogue=jnp.asarray(query, jnp.int32)), search_code


def _turn_outputs(carry, active, action, mentions, sigma, search, edit,
                  use_search, use_edit, word, word_found, dialogue_parent,
                  dialogue_found, asked):
  state = carry.state
  return dict(shown=state.shown_ids, top=state.shown_scores[0],
              active=active, action=action, mentioned=mentions, sigma=sigma,
              search=search, edit=edit, use_search=use_search,
              use_edit=use_edit, fired=state.fired[state.turn] & active,
              word=word, word_found=word_found,
              dialogue_parent=dialogue_parent, dialogue_found=dialogue_found,
              asked=asked)


class _JitDriver:
  """``session.Driver`` for one session in JAX (traced under vmap)."""

  def __init__(self, config: SimConfig, shared: _Shared, query):
    self.config, self.shared, self.query = config, shared, query
    arrays = shared.arrays
    self.reference = arrays.reference[query]
    self.target = arrays.target[query]

  def still_searching(self, carry):
    return session_lib.searching(carry.state, self.target)

  def respond(self, carry, turn, active):
    del active
    arrays = self.shared.arrays
    target_attrs = arrays.attributes[self.target]
    top1 = jnp.maximum(carry.state.shown_ids[0], 0)
    action, named, prefix = simulated_user.decide(
        simulated_user.decision_key(self.shared.seed_key, self.query, turn),
        target_attrs, arrays.attributes[top1], self.config.user,
        carry.question)
    negative = (action == simulated_user.REWRITE) & jnp.asarray(
        simulated_user.NEGATIVE_REWRITE_PREFIX)[prefix]
    mentions = jnp.where(named, target_attrs, -1)
    word, found = jnp.asarray(-1, jnp.int32), jnp.asarray(True)
    label = jnp.asarray(-1, jnp.int32)
    utterance = jnp.zeros((1,), jnp.float32)
    dialogue, node, dialogue_found = utterance, carry.dialogue, found
    if self.config.words:
      # What the reasoner reads out of the words (a placeholder, the named
      # values, until the host has tabulated this decision).
      word = words_lib.key(self.query, turn, action, named, prefix,
                           self.config.loop.num_turns)
      found, parsed, parsed_negative, utterance, label = words_lib.lookup(
          *self.shared.words, word)
      mentions = jnp.where(found, parsed, mentions)
      negative = jnp.where(found, parsed_negative, negative)
    if self.config.dialogues:
      dialogue_found, node, dialogue = words_lib.lookup_dialogue(
          self.shared.dialogues, arrays.target.shape[0], carry.dialogue,
          word)
    return JaxObservation(
        mentions=mentions, negative=negative,
        shown_attrs=arrays.caption_attrs[top1], shown=top1,
        reference=self.reference, action=action, word=word,
        word_found=found, utterance=utterance, dialogue=dialogue,
        dialogue_parent=carry.dialogue, dialogue_node=node,
        dialogue_found=dialogue_found, asked=carry.question, label=label,
        num_values=arrays.asked_with_value.shape[1])

  def plan(self, carry, obs, active):
    method_state, plan = self.config.form.step(carry.method, obs)
    # A session that stopped keeps its method state.
    method_state = jax.tree.map(lambda old, new: jnp.where(active, new, old),
                                carry.method, method_state)
    return dataclasses.replace(
        carry, method=method_state,
        dialogue=jnp.where(active, obs.dialogue_node, carry.dialogue)), plan

  def rank(self, carry, plan, active):
    shared = self.shared
    _, _, use_search, use_edit = _channel_codes(plan)
    if plan.edit_embedding is None:  # the edit is a phrase of the table
      edit, edit_valid = (_lookup(shared.index, shared.rows,
                                  use_edit + NUM_CODES), use_edit > 0)
    else:  # the method's own text embedding (the dialogue, MERLIN's text)
      edit, edit_valid = plan.edit_embedding, jnp.asarray(plan.use_edit)
    covr_query = compose(self.config.composer, shared.composer_params,
                         shared.arrays.gallery[plan.anchor], edit)
    inputs = ranking.TurnInputs(
        queries=jnp.stack([_lookup(shared.index, shared.rows, use_search),
                           covr_query]),
        valid=jnp.stack([use_search > 0, edit_valid]),
        exclude=self.reference, sigma=plan.sigma, stop=~active,
        penalty=self.config.form.penalty(plan.avoid,
                                         shared.arrays.caption_attrs))
    state = ranking.turn_step(self.config.loop, shared.arrays.gallery,
                              carry.state, inputs)
    return dataclasses.replace(carry, state=state)

  def ask(self, carry, active):
    """The method's question shown with the list just ranked, as the
    attribute the user reads in it."""
    kind = getattr(self.config.form, 'question', None)
    if kind is None:
      return carry
    arrays, state = self.shared.arrays, carry.state
    if kind == 'asker':  # ReCoVR's Question Asker
      return self._ask_recovr(carry, active)
    if kind == 'split':  # UMIVR: the most informative split of the top k
      k = self.config.form.candidates
      ids, scores = state.shown_ids[:k], state.shown_scores[:k]
      values = jnp.where(ids[:, None] >= 0,
                         arrays.caption_attrs[jnp.maximum(ids, 0)], -1)
      h = asking.expected_split_entropy(
          jnp.where(ids >= 0, scores, -jnp.inf).astype(jnp.float32),
          values.T, self.config.form.tau)
      asked = arrays.asked_plain[jnp.argmin(h)]
    else:  # IVR-QA's question about a video's caption
      video = state.shown_ids[0] if kind == 'shown' else self.reference
      values = arrays.caption_attrs[video]
      stated = values >= 0
      count = jnp.sum(stated)
      nth = carry.asked % jnp.maximum(count, 1)
      a = jnp.argmax(stated & (jnp.cumsum(stated) == nth + 1))
      asked = jnp.where(count > 0,
                        arrays.asked_with_value[a, jnp.maximum(values[a], 0)],
                        arrays.asked_open)
    return dataclasses.replace(
        carry, question=jnp.where(active, asked, -1).astype(jnp.int32),
        asked=carry.asked + active.astype(jnp.int32))

  def _ask_recovr(self, carry, active):
    """AskStream's gate (``asking.should_ask``) and the rules reasoner's
    question: the attribute, not kept yet, whose values are the most
    uncertain (entropy of their counts) among the top candidates' captions."""
    form, arrays, state = self.config.form, self.shared.arrays, carry.state
    policy = form.ask
    ask = active & (carry.asked < policy.budget)
    if policy.mode == 'entropy':
      ask &= asking.normalized_entropy(state.shown_scores,
                                       policy.tau) > policy.threshold
    ids = state.shown_ids[:form.candidates]
    values = jnp.where(ids[:, None] >= 0,
                       arrays.caption_attrs[jnp.maximum(ids, 0)], -1)  # [k, A]
    num_values = arrays.asked_with_value.shape[1]
    counts = jnp.sum(values.T[:, :, None] == jnp.arange(num_values),
                     axis=1)                                      # [A, V]
    counts = jnp.sort(counts, axis=1)  # the host sums them in sorted order
    total = jnp.sum(counts, axis=1, keepdims=True)
    share = counts / jnp.maximum(total, 1)
    h = -jnp.sum(jnp.where(counts > 0, share * jnp.log(
        jnp.where(counts > 0, share, 1.0)), 0.0), axis=1)
    fixed = carry.method['keep'] >= 0
    best = jnp.where(fixed.all(), 0,
                     jnp.argmax(jnp.where(fixed, -jnp.inf, h)))
    asked = jnp.where(ask, arrays.asked_plain[best], -1).astype(jnp.int32)
    return dataclasses.replace(carry, question=asked,
                               asked=carry.asked + ask.astype(jnp.int32))

  def record(self, carry, obs, plan, active):
    zero = jnp.zeros((), jnp.int32)
    return _turn_outputs(
        carry, active, jnp.where(active, obs.action, simulated_user.STOP),
        jnp.where(active, obs.mentions, -1),
        jnp.where(active, plan.sigma, demotion.SIGMA_NEU),
        *(jnp.where(active, c, zero) for c in _channel_codes(plan)),
        jnp.where(active, obs.word, -1), obs.word_found | ~active,
        jnp.where(active, obs.dialogue_parent, -1),
        obs.dialogue_found | ~active, jnp.where(active, obs.asked, -1))


def _session_turn(config: SimConfig, shared: _Shared, query,
                  carry: SessionCarry, turn):
  """Feedback turn ``turn`` of one session: ``(carry, outputs)``."""
  return session_lib.feedback_turn(_JitDriver(config, shared, query), carry,
                                   turn)


def _stopped_turn(carry: SessionCarry):
  """``_session_turn`` of a session that has stopped, without the work."""
  carry = dataclasses.replace(carry,
                              state=ranking.carry_forward(carry.state))
  zero = jnp.zeros((), jnp.int32)
  return carry, _turn_outputs(
      carry, jnp.asarray(False), zero + simulated_user.STOP,
      jnp.full((world_lib.NUM_ATTRIBUTES,), -1, jnp.int32),
      zero + demotion.SIGMA_NEU, zero, zero, zero, zero, zero - 1,
      jnp.asarray(True), zero - 1, jnp.asarray(True), zero - 1)


def _plain_turns(config, shared, queries, carry):
  """Every session runs every turn: ``lax.scan`` inside ``vmap``."""
  def one(query, carry):
    step = lambda c, t: _session_turn(config, shared, query, c, t)
    return jax.lax.scan(step, carry, jnp.arange(1, config.loop.num_turns + 1))
  return jax.vmap(one)(queries, carry)


def _compact_turns(config, shared, queries, carry, chunk_size):
  """``lax.scan`` over turns; each turn sorts the sessions still searching
  to the front and runs ``vmap``-ed chunks of ``chunk_size`` of them, skipping
  (``lax.cond``) chunks with none. Stopped sessions only carry forward, so
  the work follows the sessions that are still searching."""
  s = queries.shape[0]
  num_chunks = -(-s // chunk_size)
  pad = num_chunks * chunk_size - s
  targets = shared.arrays.target[queries]
  batched_turn = jax.vmap(functools.partial(_session_turn, config, shared),
                          in_axes=(0, 0, None))
  batched_stop = jax.vmap(_stopped_turn)

  def turn_fn(carry, turn):
    active = session_lib.searching(carry.state, targets)  # the stop rule
    order = jnp.argsort(~active, stable=True)  # searching sessions first
    order = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)])
    chunked = lambda x: x[order].reshape((num_chunks, chunk_size) +
                                         x.shape[1:])
    xs = (jnp.arange(num_chunks) * chunk_size < jnp.sum(active),
          chunked(queries), jax.tree.map(chunked, carry))

    def chunk_fn(_, x):
      busy, q, c = x
      return None, jax.lax.cond(busy, lambda: batched_turn(q, c, turn),
                                lambda: batched_stop(c))

    _, out = jax.lax.scan(chunk_fn, None, xs)
    # Row r of the chunked result is session order[r]; back to session order.
    inverse = jnp.zeros((s,), order.dtype).at[order[:s]].set(
        jnp.arange(s, dtype=order.dtype))
    return jax.tree.map(lambda y: y.reshape((-1,) + y.shape[2:])[inverse],
                        out)

  carry, outs = jax.lax.scan(turn_fn, carry,
                             jnp.arange(1, config.loop.num_turns + 1))
  # [T, S, ...] -> [S, T, ...] as the plain path returns them.
  return carry, jax.tree.map(lambda y: jnp.swapaxes(y, 0, 1), outs)


def simulate_batch(config: SimConfig, arrays: SimArrays, index, rows,
                   composer_params, queries, seed_key, words=(), dialogues=(),
                   chunk_size: int | None = None) -> SimTrace:
  """A batch of sessions, one per entry of ``queries`` ``[S]``.

  ``chunk_size=None``: ``lax.scan`` over turns inside ``vmap`` over sessions
  (every session computes every turn). An int: the compacted schedule of
  ``_compact_turns`` (same results; work only for sessions still searching).
  ``words``, ``dialogues``: ``WordTable.arrays()`` when ``config.words``,
  ``DialogueTable.arrays()`` when ``config.dialogues``.
  """
  shared = _Shared(arrays, index, rows, composer_params, seed_key,
                   tuple(words), tuple(dialogues))
  # World, table and composer shared; one query per session.
  carry, search0 = jax.vmap(functools.partial(_session_start, config,
                                              shared))(queries)
  shown0, top0 = carry.state.shown_ids, carry.state.shown_scores[:, 0]
  if chunk_size is None:
    carry, outs = _plain_turns(config, shared, queries, carry)
  else:
    carry, outs = _compact_turns(config, shared, queries, carry, chunk_size)
  edit_needed = outs['use_edit'] + jnp.where(outs['use_edit'] > 0,
                                             NUM_CODES, 0)
  needed = jnp.concatenate([
      jnp.stack([search0, jnp.zeros_like(search0)], axis=1)[:, None],
      jnp.stack([outs['use_search'], edit_needed], axis=2)], axis=1)
  return SimTrace(
      displayed=jnp.concatenate([shown0[:, None], outs['shown']], axis=1),
      top_scores=jnp.concatenate([top0[:, None], outs['top']], axis=1),
      active=outs['active'], action=outs['action'],
      mentioned=outs['mentioned'], sigma=outs['sigma'],
      search=outs['search'], edit=outs['edit'], needed=needed,
      fired=outs['fired'], word=outs['word'], word_found=outs['word_found'],
      dialogue_parent=outs['dialogue_parent'],
      dialogue_found=outs['dialogue_found'], asked=outs['asked'])


simulate = jax.jit(simulate_batch, static_argnames=('config', 'chunk_size'))


@functools.lru_cache(maxsize=16)
def _over_sessions(config, chunk_size, mesh):
  """``simulate_batch`` with the sessions split over the mesh's session
  axis and everything else replicated."""
  body = functools.partial(simulate_batch, config, chunk_size=chunk_size)
  shared, split = P(), P(sharding.SESSION_AXIS)
  return jax.jit(jax.shard_map(
      body, mesh=mesh, in_specs=(shared, shared, shared, shared, split,
                                 shared, shared, shared),
      out_specs=split, check_vma=False))


def sim_config(method, base: ranking.LoopConfig,
               user: simulated_user.UserConfig, composer,
               reasoner: str = 'rules', sigma: str = 'rules') -> SimConfig:
  """``reasoner``: the host backend whose reading the jitted mode
  reproduces ('rules': the lexicon; another: its reader, so the words are
  always tabulated, read by ``word_table``'s ``parse``); ``sigma``: its
  Reflector's rule (``JaxForm.sigma_rule``)."""
  needs = getattr(method.jax_form, 'needs', ())
  asks = getattr(method.jax_form, 'question', None) is not None
  form = method.jax_form
  if hasattr(form, 'sigma_rule'):
    form = dataclasses.replace(form, sigma_rule=sigma)
  return SimConfig(loop=method.ranking(base),
                   user=dataclasses.replace(user, draws='jax'),
                   form=form, composer=composer, reasoner=reasoner,
                   # Answers' words are always read from the table.
                   words=(user.language != 'lexicon' or user.noise_rate > 0
                          or bool(needs) or asks or reasoner != 'rules'),
                   utterances='utterances' in needs,
                   dialogues='dialogues' in needs)


def word_table(env: SimEnvironment, config: SimConfig, seed: int,
               parse=None, label=None):
  """The ``words.WordTable`` of ``config``'s user and ``seed`` (None when
  its words need no tabulating). ``parse``: what ``config.reasoner``
  reads the words with; required to make the table of a reasoner other
  than 'rules' (later calls find it made); ``label``: its reading of the
  user's decision (``words -> frames.LABELS`` index), if it has one."""
  if not config.words:
    return None
  key = (config.user, seed, config.loop.num_turns, config.reasoner)
  if key not in env.word_tables:
    if config.reasoner != 'rules' and parse is None:
      raise ValueError(f'the word table of reasoner {config.reasoner!r} '
                       'needs the parse it reads the words with')
    arrays = env.arrays
    env.word_tables[key] = words_lib.WordTable(
        simulated_user.SimulatedUser(config.user, seed),
        np.asarray(arrays.attributes), np.asarray(arrays.target),
        config.loop.num_turns, parse=parse, label=label)
  table = env.word_tables[key]
  if config.utterances:  # shared with the methods that do not need them
    table.hold_embeddings(env.encode_text, int(env.arrays.gallery.shape[1]))
  return table


def dialogue_table(env: SimEnvironment, config: SimConfig, seed: int):
  """The ``words.DialogueTable`` of ``config``'s user and ``seed`` (None
  unless the method reads the joined dialogue)."""
  if not config.dialogues:
    return None
  key = ('dialogues', config.user, seed, config.loop.num_turns,
         config.reasoner)
  if key not in env.word_tables:
    env.word_tables[key] = words_lib.DialogueTable(
        env.modification_texts, word_table(env, config, seed),
        env.encode_text, int(env.arrays.gallery.shape[1]))
  return env.word_tables[key]


def run(env: SimEnvironment, config: SimConfig, sessions, seed: int,
        log=None, chunk_size: int | None = DEFAULT_CHUNK_SIZE,
        mesh=None) -> SimTrace:
  """Runs ``sessions`` (query indices), filling the phrase table as needed.

  ``chunk_size``: see ``simulate``. ``mesh``: a ``sharding.make_mesh`` mesh
  whose ``session`` axis splits the sessions over devices (world, table and
  composer replicated); None runs on the default device. Returns the trace
  as NumPy arrays. With ``config.words`` the user's words are tabulated
  too (``word_table``), so a run takes up to about twice as many passes.
  """
  if chunk_size is not None and chunk_size < 1:
    raise ValueError(f'chunk_size must be >= 1 or None, got {chunk_size}')
  table = word_table(env, config, seed)
  dialogues = dialogue_table(env, config, seed)
  if table is not None:
    words_lib.check_capacity(int(env.arrays.target.shape[0]),
                             config.loop.num_turns)
  queries = jnp.asarray(sessions, jnp.int32)
  seed_key = jax.random.key(seed)
  if mesh is not None:  # pad to a multiple of the session shards
    shards = mesh.shape[sharding.SESSION_AXIS]
    padded = jnp.concatenate([queries, jnp.broadcast_to(
        queries[-1:], (-len(queries) % shards,))])
  # Room in the tables for as many entries as these sessions have user
  # turns (or as the table holds), so the passes below share one compiled
  # program, and a rerun of the same sessions the program of the first.
  turns = len(queries) * config.loop.num_turns
  least_words = 0 if table is None else max(len(table), turns)
  least_nodes = 0 if dialogues is None else max(len(dialogues), turns)
  # Each pass settles at least one more turn of every session: its words
  # (when tabulated), its dialogue, then the phrases its plan needs.
  for attempt in range(3 * config.loop.num_turns + 4):
    index, rows = env.table.arrays()
    words = (words_lib.empty_arrays() if table is None
             else table.arrays(least_words))
    dialogue_arrays = (words_lib.empty_dialogues() if dialogues is None
                       else dialogues.arrays(least_nodes))
    if mesh is None:
      trace = simulate(config, env.arrays, index, rows, env.composer_params,
                       queries, seed_key, words, dialogue_arrays,
                       chunk_size=chunk_size)
    else:
      # Replicated on every device of the mesh (a copy per device).
      shared = jax.device_put((env.arrays, index, rows, env.composer_params,
                               seed_key, words, dialogue_arrays),
                              NamedSharding(mesh, P()))
      trace = _over_sessions(config, chunk_size, mesh)(
          *shared[:4], jax.device_put(padded, NamedSharding(
              mesh, P(sharding.SESSION_AXIS))), *shared[4:])
      trace = jax.tree.map(lambda x: x[:len(queries)], trace)
    trace = jax.tree.map(np.asarray, trace)
    written = encoded = 0
    if table is not None:
      keys, pairs = words_lib.first_missing(trace, dialogues is not None)
      written = table.add(keys)
      if dialogues is not None:
        encoded = dialogues.add(pairs)
    needed = trace.needed
    added = env.table.add(needed[needed > 0])
    if not added and not written and not encoded:
      settled = trace.word_found & trace.dialogue_found
      if not settled[trace.active].all():  # cannot happen
        raise RuntimeError('the word or dialogue table did not settle')
      return trace
    if log is not None:
      log(f'pass {attempt + 1}: encoded {added} new phrases '
          f'(table {len(env.table)})' + (
              f', wrote and parsed {written} user turns (table '
              f'{len(table)})' if table is not None else '') + (
                  f', encoded {encoded} dialogues (table {len(dialogues)})'
                  if dialogues is not None else ''))
  raise RuntimeError('the phrase table did not settle')  # cannot happen


def batch_result(env: SimEnvironment, trace: SimTrace,
                 table: words_lib.WordTable | None = None,
                 sessions=None) -> host.BatchResult:
  """The host loop's ``BatchResult``; records hold what the reasoner read
  (``mentioned``: what the user named, unless its words were tabulated) and,
  with ``table``, the words (``feedback``). With the batch's ``sessions``
  turn 0 holds the modification text as ``feedback``, as the host's does."""
  names = world_lib.ATTRIBUTES
  records = []
  for i in range(trace.displayed.shape[0]):
    first = (None if sessions is None else
             env.modification_texts[int(sessions[i])])
    rows = [{'turn': 0, 'action': None, 'feedback': first, 'sigma': None,
             'question': None, 'asked': None}]
    for t in range(trace.active.shape[1]):
      if not trace.active[i, t]:
        rows.append({'turn': t + 1, 'action': 'stopped', 'feedback': '',
                     'sigma': None, 'question': None, 'asked': None})
        continue
      rows.append({
          'turn': t + 1,
          'action': simulated_user.ACTIONS[int(trace.action[i, t])],
          'feedback': (table.words(trace.word[i, t])
                       if table is not None else None),
          'mentioned': {names[a]: world_lib.VALUES[names[a]][int(v)]
                        for a, v in enumerate(trace.mentioned[i, t])
                        if v >= 0},
          'sigma': demotion.SIGMAS[int(trace.sigma[i, t])],
          'rank_cap_fired': bool(trace.fired[i, t]),
          'question': None, 'asked': None,
          # The attribute of the question the user read at this turn.
          'question_attribute': (names[int(trace.asked[i, t])]
                                 if trace.asked[i, t] >= 0 else None),
          'search': phrase_table.phrase_text(int(trace.search[i, t])),
          'edit': phrase_table.phrase_text(int(trace.edit[i, t]) + NUM_CODES)})
    records.append(rows)
  return host.BatchResult(displayed=trace.displayed,
                          top_scores=trace.top_scores, records=records)
