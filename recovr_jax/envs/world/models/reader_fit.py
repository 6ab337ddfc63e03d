"""Reading the user on the world: the grounding reader's prototypes, its
training utterances and its threshold fit (docs/definitions.md §10).

Everything here is drawn from the world's train split and the user's
training phrasings (``user_language``'s split): a reader built here never
meets a test query, a test target or a held-out phrasing before it is
evaluated.
"""

import collections
import copy
import functools
import hashlib
import json
import os
import pathlib

from absl import logging
import numpy as np

from recovr_jax import checksums
from recovr_jax import readers
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world.user import user_language
from recovr_jax.reasoning import frames
from recovr_jax.reasoning import grounding
from recovr_jax.reasoning import rules_core
from recovr_jax.reasoning import schemas

A = generator.ATTRIBUTES
# The threshold fit's utterances (train split, training phrasings); fixed
# before any result was looked at.
FIT_UTTERANCES = 2000
FIT_SEED = 1
# The shipped grounded backend's reader: span lengths 1-3 and the templates
# '{}' / 'a video of {}' chosen by the threshold fit's own score (values
# read right minus wrong, leave-one-phrase-out, train split only); WordNet
# walked to depth 2 (of 0-2), a 0.2 penalty on spans WordNet knows but
# relates to no value (of 0, 0.1, 0.2) and abstention chosen on the dev
# split (docs/reading.md, "The grounded reader v3"); the abstention
# threshold itself is fitted on the train split.
GROUNDED_OPTIONS = {'max_span': 1, 'template': '{}', 'related_depth': 2,
                    'unrelated_penalty': 0.2, 'abstain': True,
                    'agree': False, 'wordnet_prototypes': False,
                    'wordnet_glosses': False, 'lm_spans': None,
                    'lm_margin': 0.0, 'lm_tuned': False, 'head_spans': None,
                    'head_min_prob': 0.5}
# ``lm_spans``: None; 'read' (SmolLM2 names the value of a span neither the
# lexicon nor WordNet reads, ``span_lm``); 'agree' (only where it names the
# span's nearest value by similarity too); 'veto' (a span WordNet relates to
# a value reads nothing where SmolLM2 names another).
# ``lm_margin``: the least lead SmolLM2's value needs over the next choice
# (``SpanLM(margin=...)``); ``lm_tuned``: SmolLM2 with a LoRA adapter fitted
# in-process on ``generated_pairs`` (``SpanLM.tune``) instead of the listed
# values and examples. ``head_spans``: the same three uses of a span
# classifier over MiniLM embeddings (``fit_span_head``), trained on
# ``generated_pairs``; ``head_min_prob``: the least probability its value
# needs. ``wordnet_glosses``: with ``wordnet_prototypes``, the glosses are
# prototypes too. Each of these needs the option it qualifies
# (``NEEDS``).
LM_SPANS = (None, 'read', 'agree', 'veto')
NEEDS = {'lm_margin': 'lm_spans', 'lm_tuned': 'lm_spans',
         'head_min_prob': 'head_spans',
         'wordnet_glosses': 'wordnet_prototypes'}
# The grounded Reflector's sigma: chosen by ``sigma_agreement`` on 2,000
# validation utterances of the train split (rules 57.8%, paper 97.4%,
# frames 99.5%).
GROUNDED_SIGMA = 'frames'


@functools.cache
def prototypes(phrasings: str = 'train') -> tuple[grounding.Prototype, ...]:
  """Every phrase of the lexicon, then (``'train'``) the user's training
  phrasings, or (``'lexicon'``) none of the user's own: the zero-shot
  reader's prototypes."""
  if phrasings not in ('train', 'lexicon'):
    raise ValueError(f"prototypes: phrasings must be 'train' or 'lexicon', "
                     f'got {phrasings!r}')
  out = [grounding.Prototype(a, v, ' '.join(words))
         for words, (a, v) in sorted(lexicon.phrase_table().items())]
  if phrasings == 'train':
    seen = {(p.attribute, p.value, p.phrase) for p in out}
    for a, name in enumerate(A):
      for value, phrases in user_language.bank(name, 'train').items():
        v = generator.VALUES[name].index(value)
        for phrase in phrases:
          for surface in (phrase if isinstance(phrase, tuple) else (phrase,)):
            if (a, v, surface) not in seen:
              seen.add((a, v, surface))
              out.append(grounding.Prototype(a, v, surface))
  return tuple(out)


@functools.cache
def wordnet_prototypes(phrasings: str = 'train', glosses: bool = False
                       ) -> tuple[grounding.Prototype, ...]:
  """``prototypes(phrasings)`` and, per value, the lemmas of the most
  frequent WordNet sense of its name in each part of speech (``glosses``:
  and that sense's gloss, its first definition without the examples, the
  held-out words taken out): phrasings generated from WordNet, none holding
  a word of the dev or test phrasings (held out), none that the lexicon
  reads or that two values share."""
  from recovr_jax.reasoning import wordnet  # pylint: disable=g-import-not-at-top
  net = wordnet.WordNet()
  base = prototypes(phrasings)
  held = set()
  for _, _, phrase in user_language.held_out_phrasings():
    for surface in (phrase if isinstance(phrase, tuple) else (phrase,)):
      held.update(lexicon.words(surface))
  known = {p.phrase for p in base}
  found = collections.defaultdict(set)
  for a, name in enumerate(A):
    for v, value in enumerate(generator.VALUES[name]):
      first = {}  # the most frequent sense per part of speech
      for pos, offset in net.synsets(value):
        first.setdefault(pos, offset)
      for pos, offset in first.items():
        for lemma in net.synset(pos, offset).lemmas:
          phrase = lemma.replace('_', ' ')
          words = lexicon.words(phrase)
          if words and not held.intersection(words) and phrase not in known:
            found[phrase].add((a, v))
        if glosses:
          gloss = net.synset(pos, offset).gloss
          words = [w for w in lexicon.words(gloss.replace('(', ' ').replace(
              ')', ' ')) if w not in held]
          if grounding.content(lexicon, words):
            found[' '.join(words)].add((a, v))
  extra = [grounding.Prototype(a, v, phrase)
           for phrase, values in sorted(found.items()) if len(values) == 1
           for a, v in values]
  return base + tuple(extra)


def training_utterances(world, num: int = FIT_UTTERANCES,
                        seed: int = FIT_SEED, style: str = 'paper',
                        with_decisions: bool = False):
  """``(texts, truths)``: ``num`` clean utterances of the user in its own
  words restricted to the training phrasings, on (target, shown) pairs of
  the world's train split; ``truths`` are the values each names.
  ``with_decisions``: also ``(actions, questions, shown)``, the user's
  decision, the question shown (None: none, half the time) and the shown
  video's attributes.

  The shown video differs from the target in k attributes, k uniform in
  1..7 (two random combinations differ in almost all seven, so the user
  would nearly always Rewrite; in a session the shown video is often
  close and the user edits it, in its own frames)."""
  combos = world.combos[world.train_combos]
  index = {tuple(c): i for i, c in enumerate(combos)}
  user = simulated_user.SimulatedUser(simulated_user.UserConfig(
      style=style, language='own', phrasings='train'), seed=seed)
  rng = np.random.default_rng(seed)
  texts, truths, actions, questions, shown_all = [], [], [], [], []
  for i in range(num):
    target = combos[rng.integers(len(combos))]
    shown = None
    while shown is None or tuple(shown) not in index:
      shown = target.copy()
      for a in rng.permutation(len(A))[:rng.integers(1, len(A) + 1)]:
        shown[a] = (shown[a] + rng.integers(1, generator.NUM_VALUES[a])) % (
            generator.NUM_VALUES[a])
    question = (lexicon.question_text(rng, int(rng.integers(len(A))))
                if rng.random() < 0.5 else None)
    fb = user.respond(i, 1, 0, 1, target, shown, question=question)
    texts.append(fb.text)
    truths.append(dict(fb.mentioned))
    actions.append(fb.action)
    questions.append(question)
    shown_all.append(shown)
  if with_decisions:
    return texts, truths, actions, questions, shown_all
  return texts, truths


@functools.cache
def training_phrases() -> lexicon.ExtraPhrases:
  """The user's training phrasings as phrases read exactly."""
  own = [p for p in prototypes('train') if p not in prototypes('lexicon')]
  return lexicon.ExtraPhrases((p.phrase, p.attribute, p.value) for p in own)


@functools.cache
def dictionary(model_dir: str | None = None) -> frozenset:
  """The whole lower-case words of MiniLM's tokenizer (``model_dir``,
  default the shipped one), minus single letters. Read from its
  ``tokenizer.json`` (the model's vocabulary and the added tokens: what a
  fast tokenizer's ``get_vocab`` returns, tested) without loading
  transformers (0.6 s of a warm run); a directory without one through
  ``AutoTokenizer``."""
  from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
  model_dir = model_dir or encoders.minilm_path()
  path = pathlib.Path(model_dir) / 'tokenizer.json'
  if path.is_file():
    spec = readers.read_json(path, 'tokenizer')
    try:
      vocab = list(spec['model']['vocab']) + [
          t['content'] for t in spec.get('added_tokens', [])]
    except (KeyError, TypeError) as e:
      raise readers.FileError(path, f'no model vocabulary ({e!r})') from e
  else:
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    vocab = AutoTokenizer.from_pretrained(model_dir).get_vocab()
  return frozenset(w for w in vocab if w.isalpha() and w.islower() and
                   len(w) > 1)


def check_grounded_options(options: dict | None) -> None:
  """``ValueError`` naming the keys of ``options`` that are not
  ``GROUNDED_OPTIONS``."""
  for key in ('lm_spans', 'head_spans'):
    if (options or {}).get(key) not in LM_SPANS:
      raise ValueError(f'grounded_options: {key} must be one of '
                       f'{LM_SPANS}, got {options[key]!r}')
  if (options or {}).get('lm_spans') and (options or {}).get('head_spans'):
    raise ValueError('grounded_options: lm_spans and head_spans are two '
                     'second sources; give one')
  unknown = sorted(set(options or {}) - set(GROUNDED_OPTIONS))
  if unknown:
    raise ValueError(f'grounded_options: unknown {", ".join(unknown)}; '
                     f'valid: {", ".join(GROUNDED_OPTIONS)}')
  for key, parent in NEEDS.items():
    if (options or {}).get(key, GROUNDED_OPTIONS[key]) != (
        GROUNDED_OPTIONS[key]) and not (options or {}).get(parent):
      raise ValueError(f'grounded_options: {key} changes nothing without '
                       f'{parent}')


@functools.cache
def relater(phrasings: str = 'train', max_depth: int = 1):
  """WordNet (``reasoning.wordnet``) over the world's vocabulary: every
  prototype's content words (``prototypes(phrasings)``), each of its words
  and every value's name, each to its value; a word of two values is left
  out."""
  from recovr_jax.reasoning import wordnet  # pylint: disable=g-import-not-at-top
  values = collections.defaultdict(set)
  for p in prototypes(phrasings):
    key = grounding.content(lexicon, lexicon.words(p.phrase))
    for word in [key] + key.split():
      if word:
        values[word].add((p.attribute, p.value))
  for a, name in enumerate(A):
    for v, value in enumerate(generator.VALUES[name]):
      values[value].add((a, v))
  vocabulary = {w: next(iter(s)) for w, s in values.items() if len(s) == 1}
  return wordnet.Relater(wordnet.WordNet(), vocabulary, max_depth=max_depth)


def generated_pairs(frames: frozenset, phrasings: str = 'train'):
  """``(phrase, (attribute, value) or None)``: the content words of
  ``wordnet_prototypes(phrasings, glosses=True)`` (the lexicon's phrases,
  the training phrasings, WordNet's lemmas and glosses of each value; a
  phrase of two values left out), then the user's frame words ``frames``
  as naming nothing."""
  labels = {}
  for p in wordnet_prototypes(phrasings, glosses=True):
    key = grounding.content(lexicon, lexicon.words(p.phrase)) or p.phrase
    labels.setdefault(key, set()).add((p.attribute, p.value))
  pairs = {k: next(iter(v)) for k, v in sorted(labels.items()) if len(v) == 1}
  for word in sorted(frames):
    pairs.setdefault(word, None)
  return list(pairs.items())


@functools.cache
def span_classifier(phrasings: str = 'train', margin: float = 0.0,
                    tuned_on: frozenset | None = None):
  """``span_lm.SpanLM`` over the world's values, its worked examples the
  first training-bank phrase of each attribute's second value (for the
  shape, "square" itself: the form measured on dev, docs/reading.md) and
  two frames that name nothing; ``margin``, its ``margin``. ``tuned_on``:
  the user's frame words; given, the LM is tuned (``SpanLM.tune``) on
  ``generated_pairs(tuned_on, phrasings)`` instead."""
  from recovr_jax.reasoning import span_lm  # pylint: disable=g-import-not-at-top
  names, labels, shots = [], [], []
  for a, name in enumerate(A):
    for v, value in enumerate(generator.VALUES[name]):
      names.append(value)
      labels.append((a, v))
    if phrasings == 'train':
      value = generator.VALUES[name][1]
      own = [p for p in user_language.bank(name, 'train')[value]
             if p != value]
      if own:
        shots.append(((own[0] if isinstance(own[0], str) else own[0][0]),
                      value))
  shots += [('i would like', span_lm.NONE), ('instead', span_lm.NONE)]
  lm = span_lm.SpanLM(names, labels, shots, margin=margin)
  if tuned_on is not None:
    name = dict(zip(labels, names))
    lm.tune([(phrase, span_lm.NONE if label is None else name[label])
             for phrase, label in generated_pairs(tuned_on, phrasings)])
    logging.warning('the span LM tuned on generated phrasings: %s',
                    lm.tuned)
  return lm


def fit_span_head(encode, frames: frozenset, phrasings: str = 'train',
                  min_prob: float = 0.5):
  """``span_head.SpanHead`` over ``encode`` (spans embedded as the reader
  embeds them), trained on the content words of
  ``wordnet_prototypes(phrasings, glosses=True)`` (the lexicon's phrases,
  the training phrasings, WordNet's lemmas and glosses of each value) and
  the user's frame words ``frames`` as naming nothing."""
  from recovr_jax.reasoning import span_head  # pylint: disable=g-import-not-at-top
  pairs = generated_pairs(frames, phrasings)
  return span_head.SpanHead(encode, [p for p, _ in pairs],
                            [label for _, label in pairs], min_prob=min_prob)


def _confirm_unless_frame(classifier, frames: frozenset):
  """``confirm`` for spans with no word of the user's frames."""
  def confirm(spans):
    asked = [s for s in spans if not frames.intersection(s.split())]
    labels = dict(zip(asked, (label for label, _ in
                              classifier.classify(asked))))
    return [labels.get(s) for s in spans]
  return confirm


def _unless_frame(relater_, frames: frozenset):
  """``relate`` for spans with no word of the user's frames ("rather",
  "picturing", "swap": unread words of training utterances, which name no
  value), None for the rest."""
  def related(span, leave_out=None):
    if frames.intersection(span.split()):
      return None
    out = relater_.relate(span, leave_out)
    if out is None and relater_.knows(span):
      return grounding.UNRELATED
    return out
  return related


# The fits of ``grounding_reader`` and ``frame_classifier`` by what fixes
# them (``fit_key``): computed once per process. They are deterministic
# functions of the world's train split, the encoder and the options, and a
# sweep or a test process builds many runs of one world (each fit took
# 2-4 s of reading 2,000 utterances).
_FITTED: dict = {}


def _reader_key(fit_key, phrasings='train', num=FIT_UTTERANCES,
                seed=FIT_SEED, use_dictionary=True, options=None):
  return None if fit_key is None else (
      'reader', fit_key, phrasings, num, seed, use_dictionary,
      repr(sorted((options or {}).items())))


def grounding_reader(world, encode, phrasings: str = 'train',
                     num: int = FIT_UTTERANCES, seed: int = FIT_SEED,
                     use_dictionary: bool = True, fit_key=None, **options):
  """``(reader, fit)``: the grounding reader over ``encode`` (the world's
  MiniLM) with its threshold fitted on the train split (``fit``: the
  chosen threshold, its counts and the curve; with ``abstain=True`` in
  ``options``, also ``abstain_fit``, ``grounding.fit_abstain``'s).
  ``options``: ``GroundingReader``'s, and ``related_depth`` (WordNet walked
  this deep, ``relater``; None: no WordNet), ``unrelated_penalty`` (taken
  off the similarity of a span WordNet knows but relates to no value) and
  ``abstain``.
  ``phrasings='train'``: the
  training phrasings are prototypes and are read exactly; ``'lexicon'``:
  zero-shot, the lexicon's phrases only. ``fit_key``: a hashable that fixes
  ``world`` and ``encode`` (the world's config and the encoder's
  ``shared_key``); the fits are then computed once per process and key
  (a later call gets what it would have fitted)."""
  key = _reader_key(fit_key, phrasings, num, seed, use_dictionary, options)
  done = _FITTED.get(key) if key is not None else None
  options = dict(options)
  abstain = options.pop('abstain', False)
  depth = options.pop('related_depth', None)  # None: no WordNet
  penalty = options.pop('unrelated_penalty', 0.0)
  generated = options.pop('wordnet_prototypes', False)
  glosses = options.pop('wordnet_glosses', False)
  lm_spans = options.pop('lm_spans', None)
  lm_margin = options.pop('lm_margin', 0.0)
  lm_tuned = options.pop('lm_tuned', False)
  head_spans = options.pop('head_spans', None)
  head_min_prob = options.pop('head_min_prob', 0.5)
  reader = grounding.GroundingReader(
      lexicon, encode, (wordnet_prototypes(phrasings, glosses) if generated
                        else prototypes(phrasings)), threshold=1.0,
      exact=training_phrases() if phrasings == 'train' else None,
      dictionary=(dictionary(getattr(encode, 'model_dir', None))
                  if use_dictionary else frozenset()),
      unrelated_penalty=penalty, **options)
  # WordNet, never for the user's frame words (found with the reader's
  # lexicon, so set after it is made).
  words = None
  if depth is not None:
    words = done['frame_words'] if done else frame_words(world, reader)
    reader.relate = _unless_frame(relater(phrasings, depth), words)
  if lm_spans is not None or head_spans is not None:
    if words is None:
      words = done['frame_words'] if done else frame_words(world, reader)
    if lm_spans is not None:
      second = span_classifier(phrasings, lm_margin,
                               frozenset(words) if lm_tuned else None)
    else:
      second = (done or {}).get('head') or fit_span_head(
          reader._encode, words, phrasings, head_min_prob)  # pylint: disable=protected-access
    reader.confirm = _confirm_unless_frame(second, words)
    reader.confirm_mode = lm_spans or head_spans
  if done is None:
    utterances = training_utterances(world, num, seed)
    fit = grounding.fit_threshold(reader, *utterances)
    reader.threshold = fit['threshold']
    if abstain:  # on the same training utterances, the threshold fixed
      fit['abstain_fit'] = {k: v for k, v in grounding.fit_abstain(
          reader, *utterances).items() if k != 'curve'}
    done = {'fit': fit, 'frame_words': words}
    if head_spans is not None:
      done['head'] = second
    if key is not None:
      _FITTED[key] = done
  fit = copy.deepcopy(done['fit'])
  reader.threshold = fit['threshold']
  if abstain:
    reader.abstain = fit['abstain_fit']['abstain']
  return reader, fit


# The frame classifier's utterances (train split, training phrasings):
# fitted on FRAME_SEED's, the sigma rule chosen on VALIDATION_SEED's.
FRAME_SEED = 2
VALIDATION_SEED = 3


def frame_classifier(world, reader, num: int = FIT_UTTERANCES,
                     seed: int = FRAME_SEED):
  """A ``frames.FrameClassifier`` fitted on ``num`` training utterances
  read by ``reader``."""
  texts, _, actions, _, _ = training_utterances(world, num, seed,
                                                with_decisions=True)
  read = [reader.frame(t) for t in texts]
  return frames.FrameClassifier.fit([f for _, f in read],
                                    [len(v) for v, _ in read], actions)


def sigma_agreement(reasoner, world, num: int = FIT_UTTERANCES,
                    seed: int = VALIDATION_SEED) -> float:
  """The share of ``num`` training utterances (another seed than the
  fits') whose sigma ``reasoner``'s Reflector gets right (docs/definitions.md
  section 10's mapping), each against its shown video's true caption."""
  texts, _, actions, questions, shown = training_utterances(
      world, num, seed, with_decisions=True)
  rng = np.random.default_rng(seed)
  right = 0
  for text, action, question, attrs in zip(texts, actions, questions,
                                           shown):
    caption = generator.caption(rng, attrs)
    out = reasoner.reflect([schemas.ReflectRequest(
        text, caption, schemas.SessionMemory(), question)])[0]
    right += out['sigma'] == frames.SIGMA[action]
  return right / num


# The routed backend's frame words: drawn like the threshold fit's
# utterances (train split, training phrasings), another seed.
FRAME_WORDS_SEED = 4


def frame_words(world, reader, num: int = FIT_UTTERANCES,
                seed: int = FRAME_WORDS_SEED) -> frozenset:
  """The words of ``num`` training utterances that ``reader``'s lexicon
  (with the training phrasings) leaves unread: the user's frames ("swap
  the colour for", "I'm picturing", "instead"), which are not split between
  training and held-out phrasings."""
  texts, _ = training_utterances(world, num, seed)
  words = set()
  for text in texts:
    words.update(unread_words(reader, frozenset(), text))
  return frozenset(words)


def unread_words(reader, frames: frozenset, text: str) -> list[str]:
  """The words of ``text`` that ``reader``'s lexicon (with its exact
  phrases and dictionary) leaves unread and that are neither function
  words nor in ``frames``: what only a reader of unknown phrases could
  read."""
  mentions, words = reader.lexicon.parse_spans(text, reader.exact,
                                               reader.dictionary)
  read = set()
  for _, _, start, end in mentions:
    read.update(range(start, end))
  return [w for i, w in enumerate(words)
          if i not in read and w not in frames and len(w) >= 2
          and not reader.lexicon.is_function_word(w)]


def model_reading(reply: dict, request) -> dict[int, int]:
  """The values an Intent Decomposer's ``reply`` (``{search, edit}`` in the
  world's words, written as the rules write them: ``rules_core.wanted``)
  says ``request``'s feedback names, by inverting that composition: the
  search carries the memory's kept values and, when the reply reads the
  feedback as an edit of the shown video, the shown video's values not
  avoided or changed; what it holds beyond these, and the edit's values,
  are named. The reply reads the feedback as an edit when its search
  carries every such shown value (a fresh description does not) and its
  edit changes at most ``rules_core.MAX_EDIT_CHANGES`` values (more is not
  an edit, as the rules read it). A named value equal to the one the search
  would carry (the kept value, else for an edit the shown video's) cannot
  be told from a carried one and is left out."""
  shown = lexicon.parse(request.shown_caption)
  kept = dict(p for p in map(lexicon.parse_constraint, request.memory.keep)
              if p is not None)
  avoided = {lexicon.parse_constraint(x) for x in request.memory.avoid}
  search = lexicon.parse(reply.get('search', ''))
  edit = lexicon.parse_edit(reply.get('edit', ''))
  carried = {a: v for a, v in shown.items()
             if (a, v) not in avoided and a not in kept and a not in edit}
  relative = len(edit) <= rules_core.MAX_EDIT_CHANGES and all(
      search.get(a) == v for a, v in carried.items())
  # What the search would hold of attribute a had the feedback not named
  # it: the kept value, else (an edit) the shown one not avoided.
  carry = {**(carried if relative else {}), **kept}
  named = {a: v for a, v in search.items() if carry.get(a) != v}
  named.update(edit)
  return named


class FitCache:
  """The grounded reasoner's fits (threshold, abstention, frame words,
  frame classifier) in ``<cache_dir>/grounded-fit-<digest>.json``, the
  digest over what fixes them: the world's config, the text encoder's
  files, the options and the package's sources. A later run, in another
  process, loads them instead of reading 6,000 training utterances again;
  a file that is unreadable or fails its checksum is ignored with a
  warning (derived data: fitted again, then rewritten). Nothing is kept
  without a ``cache_dir`` or an encoder that says what fixes it
  (``TextEncoder.shared_key``)."""

  def __init__(self, cache_dir, fit_key, options: dict):
    self.reader_key = _reader_key(fit_key, options=options)
    self.frames_key = None if fit_key is None else (
        'frames', fit_key, repr(sorted(options.items())))
    self.path = None
    self.unusable = False
    if cache_dir and fit_key is not None:
      digest = hashlib.sha256(repr((
          self.reader_key, self.frames_key, GROUNDED_SIGMA,
          checksums.source_digest())).encode()).hexdigest()[:16]
      self.path = (pathlib.Path(cache_dir).absolute() /
                   f'grounded-fit-{digest}.json')

  def load(self) -> bool:
    """Puts the stored fits in the process's (``_FITTED``); whether it
    did."""
    if (self.path is None or not self.path.exists() or
        self.reader_key in _FITTED):
      return False
    try:
      data = json.loads(self.path.read_text())
      body = data['body']
      if data['checksum'] != checksums.json_digest(body):
        raise ValueError('fails its checksum')
      words = body['frame_words']
      reader = {'fit': body['fit'],
                'frame_words': None if words is None else frozenset(words)}
      classifier = body['classifier'] and frames.FrameClassifier(
          **body['classifier'])
    except (OSError, ValueError, KeyError, TypeError) as e:
      logging.warning('grounded fit cache %s is unusable (%s); fitting '
                      'again', self.path, e)
      self.unusable = True
      return False
    _FITTED[self.reader_key] = reader
    if classifier:
      _FITTED[self.frames_key] = classifier
    return True

  def save(self) -> None:
    """Writes the process's fits (atomically) when there are none yet or
    the file was unusable."""
    if self.path is None or (self.path.exists() and not self.unusable):
      return
    reader = _FITTED[self.reader_key]
    classifier = _FITTED.get(self.frames_key)
    body = {'fit': reader['fit'],
            'frame_words': (None if reader['frame_words'] is None
                            else sorted(reader['frame_words'])),
            'classifier': classifier and {
                'vocabulary': list(classifier.vocabulary),
                'weights': classifier.weights.tolist(),
                'bias': classifier.bias.tolist()}}
    self.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = self.path.with_suffix(f'.{os.getpid()}.tmp')  # several processes
    tmp.write_text(json.dumps({'body': body,
                               'checksum': checksums.json_digest(body)}))
    tmp.replace(self.path)


class Grounding:
  """The world's grounding reader as a ``vocabulary.Vocabulary.grounding``:
  the ``grounded`` reasoner of the world ``world_config`` (``reasoner``),
  its option check and the routing of ``grounded_smollm2`` (``route``,
  ``model_reading``)."""

  model_reading = staticmethod(model_reading)

  def __init__(self, world_config=None, cache_dir=None):
    self.world_config = world_config or generator.WorldConfig()
    self.cache_dir = cache_dir

  @staticmethod
  def check_options(options: dict | None) -> None:
    check_grounded_options(options)

  def reasoner(self, encode_text, options: dict | None = None):
    """The rules reasoning reading the user through the grounding reader
    (the lexicon, the training phrasings, WordNet and MiniLM
    ``encode_text`` for the rest, its thresholds fitted on the train split;
    ``options`` override ``GROUNDED_OPTIONS``) with the Reflector's sigma
    as docs/reading.md maps the user's decisions, read by a frame
    classifier fitted on the train split. The fits are computed once per
    process and, with a ``cache_dir``, kept there for later runs
    (``FitCache``)."""
    from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
    world = generator.make_world(self.world_config)
    check_grounded_options(options)
    shared = getattr(encode_text, 'shared_key', None)
    fit_key = None if shared is None else (self.world_config, shared)
    options = {**GROUNDED_OPTIONS, **(options or {})}
    stored = FitCache(self.cache_dir, fit_key, options)
    stored.load()
    reader, fit = grounding_reader(world, encode_text, fit_key=fit_key,
                                   **options)
    classifier = None
    if GROUNDED_SIGMA == 'frames':
      classifier = _FITTED.get(stored.frames_key)
      if classifier is None:
        classifier = frame_classifier(world, reader)
        if stored.frames_key is not None:
          _FITTED[stored.frames_key] = classifier
    stored.save()
    reasoner = rules.RulesReasoner(lexicon, reader=reader,
                                   sigma=GROUNDED_SIGMA, name='grounded',
                                   frame_classifier=classifier)
    reasoner.fit = {k: v for k, v in fit.items() if k != 'curve'}
    return reasoner

  def route(self, grounded):
    """``grounded_smollm2``'s route: the feedback holding words that
    neither ``grounded``'s lexicon, the training phrasings nor the user's
    frames read."""
    reader = grounded.reader
    words = frame_words(generator.make_world(self.world_config), reader)
    return lambda text: bool(unread_words(reader, words, text))
