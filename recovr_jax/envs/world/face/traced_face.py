"""The generated world's face for the jitted driver (``drivers.jit_runner``).

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
* the methods' questions reach the user as the attribute it reads in them
  (``plan.JaxMemory``'s tables, from the rules reasoner's questions);
* text encoding is a lookup in the ``phrase_table.PhraseTable`` of the
  reasoner's canonical texts. The tables fill turn by turn: the turn's
  ``hear`` stage reports the decisions whose words the word and dialogue
  tables lack, the host writes, parses and encodes them; its ``decide``
  stage reports the phrases its plans read, the host encodes those the
  table lacks; then the turn is ranked.

With ``UserConfig(draws='jax')`` the host driver shows the same lists, turn
by turn (tested).
"""

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import checksums
from recovr_jax.core import demotion
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.benchmark import words
from recovr_jax.envs.world.face import phrase_table
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.protocol import environment
from recovr_jax.protocol import traced
from recovr_jax.protocol import plan
from recovr_jax.protocol import records
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas

NUM_CODES = phrase_table.NUM_CODES


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class WorldArrays:
  """The world's own arrays (``JaxData.own``)."""
  attributes: jax.Array     # [N, A] int32 true attributes (the user's view)
  init_search: jax.Array    # [Q, A] int32 T2V initializer's assignment
  modification_attrs: jax.Array  # [Q, A] int32 modification texts, parsed


@dataclasses.dataclass(frozen=True)
class WorldFace(traced.Face):
  """The simulated user and the phrase and word tables, under ``jit``."""
  OBSERVATION: ClassVar[type] = plan.AttributeReading
  user: simulated_user.UserConfig
  num_turns: int
  # The user's words are tabulated (``words``): its own language or surface
  # noise, which the reasoner reads differently from what it named, or a
  # method that reads the words themselves.
  words: bool = False
  utterances: bool = False  # each utterance's embedding (MERLIN)
  dialogues: bool = False   # the joined dialogue's embedding (IVR, UMIVR)
  reader: str = 'rules'     # whose reading of the words is tabulated
  # That reader reads the words with the lexicon alone (the host rules'
  # reading); else with its own, so the words are always tabulated.
  lexical: bool = True
  num_attributes: int = generator.NUM_ATTRIBUTES  # 8 with the layout

  def start(self, data, tables, query):
    del tables
    own = data.own
    return plan.JaxStart(
        init_search=own.init_search[query],
        modification_attrs=own.modification_attrs[query],
        modification=data.modification[query],
        num_values=data.memory.asked_with_value.shape[1]), jnp.asarray(
            query, jnp.int32)  # the dialogue's root node

  def code(self, assignment):
    return phrase_table.code(assignment)

  def key(self, code, channel):
    return code + NUM_CODES if channel == plan.COVR else code

  def text(self, tables, key):
    index, rows = tables[0]
    return phrase_table.lookup(index, rows, key)

  def hear(self, data, tables, seed_key, query, turn, state, top1,
           question):
    attributes = data.own.attributes
    target_attrs = attributes[data.target[query]]
    action, named, prefix = simulated_user.decide(
        simulated_user.decision_key(seed_key, query, turn), target_attrs,
        attributes[top1], self.user, question)
    word, found = jnp.asarray(-1, jnp.int32), jnp.asarray(True)
    dialogue_found = found
    if self.words:  # the decision's words, and whether they are tabulated
      word = words.key(turn, action, named, prefix)
      found = words.lookup(tables[1], query, word)[0]
    if self.dialogues:
      dialogue_found = words.lookup_dialogue(
          tables[2], data.target.shape[0], state, word)[0]
    heard = dict(action=action, named=named, prefix=prefix, word=word)
    return heard, dict(query=jnp.asarray(query, jnp.int32), word=word,
                       word_found=found, dialogue_parent=state,
                       dialogue_found=dialogue_found)

  def read(self, data, tables, query, heard, state, top1, question):
    target_attrs = data.own.attributes[data.target[query]]
    action, word = heard['action'], heard['word']
    negative = (action == simulated_user.REWRITE) & jnp.asarray(
        simulated_user.NEGATIVE_REWRITE_PREFIX)[heard['prefix']]
    mentions = jnp.where(heard['named'], target_attrs, -1)
    found = jnp.asarray(True)
    label = jnp.asarray(-1, jnp.int32)
    utterance = jnp.zeros((1,), jnp.float32)
    dialogue, node, dialogue_found = utterance, state, found
    if self.words:
      # What the reasoner reads out of the words (a placeholder, the named
      # values, where the host has not tabulated this decision).
      found, parsed, parsed_negative, utterance, label = words.lookup(
          tables[1], query, word)
      mentions = jnp.where(found, parsed, mentions)
      negative = jnp.where(found, parsed_negative, negative)
    if self.dialogues:
      dialogue_found, node, dialogue = words.lookup_dialogue(
          tables[2], data.target.shape[0], state, word)
    obs = plan.JaxObservation(
        shown=top1, reference=data.reference[query], action=action,
        asked=question, info=plan.AttributeReading(
            mentions=mentions, negative=negative,
            shown_attrs=data.memory.caption_attrs[top1],
            utterance=utterance, dialogue=dialogue, label=label),
        num_values=data.memory.asked_with_value.shape[1])
    return obs, node, dict(mentioned=mentions,
                           query=jnp.asarray(query, jnp.int32), word=word,
                           word_found=found, dialogue_parent=state,
                           dialogue_found=dialogue_found)

  def record(self, outputs, active):
    return dict(mentioned=jnp.where(active, outputs['mentioned'], -1),
                query=jnp.where(active, outputs['query'], -1),
                word=jnp.where(active, outputs['word'], -1),
                word_found=outputs['word_found'] | ~active,
                dialogue_parent=jnp.where(active, outputs['dialogue_parent'],
                                          -1),
                dialogue_found=outputs['dialogue_found'] | ~active)

  def stopped(self):
    none = jnp.asarray(-1, jnp.int32)
    return dict(mentioned=jnp.full((self.num_attributes,), -1, jnp.int32),
                query=none, word=none, word_found=jnp.asarray(True),
                dialogue_parent=none, dialogue_found=jnp.asarray(True))


@dataclasses.dataclass(frozen=True)
class JitEnvironment(traced.Environment):
  """The world's ``traced.Environment``: arrays, the composer, the phrase
  table and the word tables (per user config, seed, T and reader, filled
  across batches)."""
  data: plan.JaxData
  composer: object
  composer_params: object
  table: phrase_table.PhraseTable
  captions: tuple[str, ...]
  encode_text: object = None
  modification_texts: tuple[str, ...] = ()
  word_tables: dict = dataclasses.field(default_factory=dict)
  # Where the word tables are kept between runs (None: they are not).
  cache_dir: object = None

  def save_word_tables(self) -> int:
    """Keeps the word and dialogue tables' entries in ``cache_dir`` for
    later runs; returns how many entries were written."""
    return sum(t.save() for t in self.word_tables.values())

  @property
  def arrays(self):  # the world's arrays and Progress Memory's
    return self.data

  def filler(self, config, seed, num_sessions, run_sessions=None):
    return _Filler(self, config, seed, max(run_sessions or 0, num_sessions))


class _Filler:
  """The phrase, word and dialogue tables of one run, filled turn by turn
  (``traced.Filler``)."""

  def __init__(self, env, config, seed, num_sessions):
    self.env = env
    self.words = word_table(env, config, seed)
    self.dialogues = dialogue_table(env, config, seed)
    # Room in the tables for three entries per user turn of the run's
    # sessions (``num_sessions``: the whole run's, not the batch's; `main`,
    # 23 methods, writes about 2.4: the methods' decisions differ),
    # or as the table holds, and at least words.MIN_ENTRIES, so the
    # turns, and the methods after them, share one compiled program each
    # (the tables' shapes are its inputs), and a rerun of the same sessions
    # the program of the first. A table that fills anyway doubles.
    turns = max(3 * num_sessions * config.loop.num_turns, words.MIN_ENTRIES)
    self.least_words = (0 if self.words is None
                        else max(len(self.words), turns))
    self.least_nodes = (0 if self.dialogues is None
                        else max(len(self.dialogues), turns))
    # The tables of runs that hold none (made once: every call of the run's
    # program passes them).
    self.no_words = words.empty_arrays(
        int(env.data.own.attributes.shape[1]))
    self.no_dialogues = words.empty_dialogues()

  def arrays(self):
    return (self.env.table.arrays(),
            (self.no_words if self.words is None
             else self.words.arrays(self.least_words)),
            (self.no_dialogues if self.dialogues is None
             else self.dialogues.arrays(self.least_nodes)))

  def heard(self, turn: int, active, asks) -> str:
    """The turn's words (written and parsed) and dialogues (encoded) that
    the tables lack."""
    lexicon_words, dialogues = self.words, self.dialogues
    if lexicon_words is None:
      return ''
    no_word = active & ~asks['word_found']
    word = asks['word']
    written = lexicon_words.add(zip(asks['query'][no_word], word[no_word]))
    encoded = 0
    if dialogues is not None:  # after the words they join
      no_dialogue = active & ~asks['dialogue_found']
      encoded = dialogues.add(zip(asks['dialogue_parent'][no_dialogue],
                                  word[no_dialogue]))
    if not written and not encoded:
      return ''
    return (f'wrote and parsed {written} user turns '
            f'(table {len(lexicon_words)})' + (
                f', encoded {encoded} dialogues (table {len(dialogues)})'
                if dialogues is not None else ''))

  def planned(self, turn: int, active, needed) -> str:
    """The phrases (encoded) of the turn's plans that the table lacks."""
    del turn, active  # a stopped session's keys are 0
    table = self.env.table
    added = table.add(needed[needed > 0])
    return (f'encoded {added} new phrases (table {len(table)})' if added
            else '')


def prepare(env: environment.Environment, cache_dir=None) -> JitEnvironment:
  """The tensors of a world environment (checked, before any run);
  ``cache_dir``: where its word tables are kept between runs."""
  if env.attributes is None:
    raise ValueError('the jitted mode needs attribute labels (the embedded '
                     'world); this environment has none')
  if env.composer is None:
    raise ValueError('the jitted mode needs a pure JAX composer (a flax '
                     "Module or 'sum'); the environment has none")
  num_attrs = np.asarray(env.attributes).shape[1]  # 8 with the layout
  lexicon_words = lexicon.for_attributes(num_attrs)

  def assignment(parsed):
    row = np.full(num_attrs, -1, np.int32)
    for a, v in parsed.items():
      row[a] = v
    return row

  caption_attrs = np.stack([assignment(lexicon_words.parse(c))
                            for c in env.captions])
  # Per distinct query (they repeat under --query_repeats), then per session.
  query = (np.arange(len(env.target)) if env.query is None
           else np.asarray(env.query))
  first = np.unique(query, return_index=True)[1]
  distinct = [(env.reference[i], env.modification[i]) for i in first]
  init = rules.RulesReasoner(lexicon_words).t2v_init([
      schemas.T2VInitRequest(env.captions[r], m) for r, m in distinct])
  init_search = []
  for q, out in enumerate(init):
    parsed = lexicon_words.parse(out['search'])
    if out['search'] != lexicon_words.canonical_description(parsed):
      raise ValueError(f'query {q}: the T2V initializer wrote '
                       f'{out["search"]!r}, which is not a canonical '
                       'description; the jitted mode cannot represent it')
    init_search.append(assignment(parsed))
  modification = np.asarray(env.encode_text([m for _, m in distinct]),
                            np.float32)[query]
  data = plan.JaxData(
      gallery=jnp.asarray(env.gallery, jnp.float32),
      memory=plan.JaxMemory(caption_attrs=jnp.asarray(caption_attrs),
                                **_question_tables(lexicon_words, num_attrs)),
      reference=jnp.asarray(env.reference, jnp.int32),
      target=jnp.asarray(env.target, jnp.int32),
      modification=jnp.asarray(modification),
      own=WorldArrays(
          attributes=jnp.asarray(env.attributes, jnp.int32),
          init_search=jnp.asarray(np.stack(init_search)[query]),
          modification_attrs=jnp.asarray(np.stack([
              assignment(lexicon_words.parse(m))
              for _, m in distinct])[query])))
  return JitEnvironment(data=data, composer=env.composer,
                        composer_params=env.composer_params,
                        table=phrase_table.PhraseTable(env.encode_text,
                                                       env.gallery.shape[1]),
                        captions=tuple(env.captions),
                        encode_text=env.encode_text,
                        modification_texts=tuple(env.modification),
                        cache_dir=cache_dir)


def _question_tables(lexicon_words, num_attrs: int):
  """What the user reads out of each question the rules reasoner asks
  (over ``words``, the lexicon of ``num_attrs`` attributes)."""
  reasoner = rules.RulesReasoner(lexicon_words)

  def asked(question):
    a = lexicon_words.question_attribute(question)
    return -1 if a is None else a

  num_values = generator.num_values(num_attrs)
  with_value = np.full((num_attrs, max(num_values)), -1, np.int32)
  for a in range(num_attrs):
    for v in range(num_values[a]):
      with_value[a, v] = asked(reasoner.attribute_question(a, v))
  plain = [asked(reasoner.attribute_question(a)) for a in range(num_attrs)]
  # The open question about captions that state nothing.
  open_question = reasoner.question([schemas.QuestionRequest(
      ('',), schemas.SessionMemory())])[0]['question']
  return dict(asked_with_value=jnp.asarray(with_value),
              asked_plain=jnp.asarray(plain, jnp.int32),
              asked_open=jnp.asarray(asked(open_question), jnp.int32))


def world_face(form: plan.JaxForm, num_turns: int,
               user: simulated_user.UserConfig,
               reading: traced.Reading = traced.Reading('rules'),
               num_attributes: int = generator.NUM_ATTRIBUTES) -> WorldFace:
  """The world's face for a method's jitted form ``form`` (its sigma rule
  already the reader's, ``JaxForm.with_sigma_rule``) over ``num_turns``
  feedback turns: ``user``'s draws as inside ``jit``, and the words
  tabulated when ``reading`` is not the lexicon's alone or the user's
  words differ from what it named. ``num_attributes``: the world's (8 with
  the layout)."""
  needs, asks = form.needs, plan.asks(form)
  return WorldFace(
      user=dataclasses.replace(user, draws='jax'), num_turns=num_turns,
      reader=reading.key, lexical=reading.lexical,
      # Answers' words are always read from the table.
      words=(user.language != 'lexicon' or user.noise_rate > 0
             or bool(needs) or asks or not reading.lexical),
      utterances='utterances' in needs, dialogues='dialogues' in needs,
      num_attributes=num_attributes)


def word_table(env: JitEnvironment, config: traced.JitConfig, seed: int,
               parse=None, label=None, identity: str = ''):
  """The ``words.WordTable`` of ``config``'s user and ``seed`` (None when
  its words need no tabulating). ``parse``: what ``config``'s reasoner
  reads the words with; required to make the table of a reasoner that
  reads with more than the lexicon (later calls find it made); ``label``: its reading of the
  user's decision (``words -> frames.LABELS`` index), if it has one;
  ``identity``: the reader's (``traced.Reading.identity``). With the
  environment's ``cache_dir``, the table starts from what earlier runs
  with the same user, seed, T, reader, world and code kept, and keeps its
  entries there (``JitEnvironment.save_word_tables``)."""
  face = config.face
  if not face.words:
    return None
  key = (face.user, seed, config.loop.num_turns, face.reader)
  if key not in env.word_tables:
    if not face.lexical and parse is None:
      raise ValueError(f'the word table of reader {face.reader!r} '
                       'needs the parse it reads the words with')
    attributes = np.asarray(env.data.own.attributes)
    target = np.asarray(env.data.target)
    store = None
    if env.cache_dir is not None:
      # A GPU's (or a TF32 run's) readings and embeddings apart; nothing
      # added on a CPU (``encoders.numerics``), so its tables stay.
      numerics = encoders.numerics()
      store = words.store_path(
          env.cache_dir, face.user, seed, config.loop.num_turns, face.reader,
          face.lexical, identity, attributes, target,
          checksums.source_digest(), *([numerics] if numerics else []))
    env.word_tables[key] = words.WordTable(
        simulated_user.SimulatedUser(face.user, seed), attributes, target,
        config.loop.num_turns, parse=parse, label=label, store=store)
  table = env.word_tables[key]
  if face.utterances:  # shared with the methods that do not need them
    table.hold_embeddings(env.encode_text, int(env.data.gallery.shape[1]))
  return table


def dialogue_table(env: JitEnvironment, config: traced.JitConfig, seed: int):
  """The ``words.DialogueTable`` of ``config``'s user and ``seed`` (None
  unless the method reads the joined dialogue)."""
  face = config.face
  if not face.dialogues:
    return None
  key = ('dialogues', face.user, seed, config.loop.num_turns,
         face.reader)
  if key not in env.word_tables:
    table = word_table(env, config, seed)
    store = None
    if table.store is not None:  # kept beside the words its nodes join
      store = words.store_path(env.cache_dir, 'dialogues', table.store.name,
                               env.modification_texts)
    env.word_tables[key] = words.DialogueTable(
        env.modification_texts, table, env.encode_text,
        int(env.data.gallery.shape[1]), store=store)
  return env.word_tables[key]


def batch_result(env: JitEnvironment, trace: traced.JitTrace,
                 table: words.WordTable | None = None,
                 sessions=None) -> environment.BatchResult:
  """The host loop's ``BatchResult``, its records as columns
  (``records.RecordColumns``, built from the trace's arrays a column at a
  time); records hold what the reasoner read (``mentioned``: what the user
  named, unless its words were tabulated) and, with ``table``, the words
  (``feedback``). With the batch's ``sessions`` turn 0 holds the
  modification text as ``feedback``, as the host's does."""
  own = trace.own
  names = generator.attribute_names(np.shape(own['mentioned'])[-1])
  active = np.asarray(trace.active, bool)
  num, later = active.shape
  width = later + 1

  def column(first, per_turn, stopped):
    """``[S, T+1]`` object values, flattened: turn 0's ``first`` (one per
    session), a feedback turn's ``per_turn`` ``[S, T]`` where the session
    is active, ``stopped`` where it is not."""
    out = np.empty((num, width), object)
    out[:, 0] = first
    out[:, 1:] = per_turn
    out[:, 1:][~active] = stopped
    return out.ravel().tolist()

  def on_active(values, make):
    """``[S, T]`` object values: ``make(v)`` of ``values``' entry (a
    scalar, or a row where ``values`` is ``[S, T, A]``) at each turn where
    the session is active, made once per distinct entry; None elsewhere."""
    out = np.full((num, later), None, object)
    if active.any():
      picked = np.asarray(values)[active]
      distinct, where = np.unique(picked, axis=0 if picked.ndim > 1 else None,
                                  return_inverse=True)
      made = np.empty(len(distinct), object)
      made[:] = [make(v) for v in distinct.tolist()]
      out[active] = made[np.ravel(where)]
    return out

  first = (None if sessions is None else
           [env.modification_texts[int(s)] for s in sessions])
  if table is None:
    feedback = np.full((num, later), None, object)
  else:
    feedback = on_active(np.stack([own['query'], own['word']], axis=-1),
                         lambda qk: table.words(*qk))
  # Whether a question was shown with turn t's list (the host records its
  # text under ``asked``; here the user's reading of it is
  # ``question_attribute`` at the next turn).
  questioned = np.diff(np.asarray(trace.questions), axis=1, prepend=0) > 0
  on_turns = np.concatenate([np.zeros((num, 1), bool), active], axis=1)
  after_start = np.ones((num, width), bool)
  after_start[:, 0] = False
  every = lambda value: [value] * (num * width)
  columns = {
      'turn': np.tile(np.arange(width), num).tolist(),
      'action': column(None, on_active(
          trace.action, lambda c: simulated_user.ACTIONS[c]), 'stopped'),
      'feedback': column(first, feedback, ''),
      'sigma': column(None, on_active(trace.sigma,
                                      lambda c: demotion.SIGMAS[c]), None),
      'rank_cap_fired': column(False, np.asarray(trace.fired, bool), False),
      'question': every(None),
      'mentioned': column(None, on_active(
          own['mentioned'], lambda row: generator.value_names(
              {a: v for a, v in enumerate(row) if v >= 0}, len(names))),
                          None),
      'asked': every(None),
      'questioned': column(False, questioned, False),
      # The attribute of the question the user read at this turn.
      'question_attribute': column(None, on_active(
          trace.asked, lambda a: names[a] if a >= 0 else None), None),
      'search': column(None, on_active(trace.search,
                                       phrase_table.phrase_text), None),
      'edit': column(None, on_active(
          np.asarray(trace.edit) + NUM_CODES, phrase_table.phrase_text),
                     None),
  }
  active_only = on_turns.ravel().tolist()
  present = {k: active_only for k in ('rank_cap_fired', 'mentioned',
                                      'question_attribute', 'search',
                                      'edit')}
  present['questioned'] = after_start.ravel().tolist()
  return environment.BatchResult(
      displayed=trace.displayed, top_scores=trace.top_scores,
      records=records.RecordColumns(num, width, columns, present),
      scores=np.asarray(trace.scores)[..., :environment.SHOWN])
