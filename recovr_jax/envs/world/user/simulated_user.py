"""The simulated user (paper appendix D.2 and D.4).

Target-conditioned: it sees the target, the displayed top-1 and an optional
system question, never a method's internals. Its policy:

* stop when the displayed top-1 is the target ("found it");
* Answer when a question is available and the discrepancy is major (more than
  ``modify_threshold`` attributes differ);
* Modify when at most ``modify_threshold`` attributes differ: a relative edit
  naming a random non-empty subset of the differing attributes (style
  ``paper``: at most ``modify_threshold`` of them, also under modify-only);
* Rewrite otherwise: a fresh description of the target naming a random
  subset of its attributes, never all of them (style ``paper``: all of them,
  a complete description).

Its words: the world's caption phrases (``language='lexicon'``, all known to
the rules reasoner) or its own bank (``'own'`` / ``'own_v3'``,
``envs.world.user.user_language``), which the reasoner's lexicon knows only in part.

Each session's draws come from its own generator, seeded by
``(seed, session, turn)``, so they do not depend on the method under test.
Two sources of draws: ``numpy`` (the default) and ``jax``, where the
decision (action, named attributes, prefix) comes from ``decide``, the same
pure function the jitted driver (``recovr_jax.drivers.jit_runner``, through
``envs.world.face.traced_face``) runs
inside ``lax.scan``; host and jitted runs with ``jax`` draws are identical.
Degradations: surface noise (character and word perturbations at a rate),
constraint dropping (each mentioned attribute dropped with a probability),
and modify-only / rewrite-only policies.
"""

import collections
import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import config_pytree
from recovr_jax import config_tree
from recovr_jax import executables
from recovr_jax.core import checks
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import user_language
from recovr_jax.protocol import plan

ACTIONS = plan.ACTIONS  # the protocol's
POLICIES = ('mixed', 'modify_only', 'rewrite_only')
# template: Modify names a random non-empty subset of the differences,
#   Rewrite 2-5 of the 7 attributes (the first benchmark's user).
# paper: Modify is a partial relative edit naming at most m of the
#   differences; Rewrite is a complete description of the target (paper
#   appendix D.2: "a fresh description of the target video").
STYLES = ('template', 'paper')
# lexicon: the world's caption words (all known to the rules reasoner);
# own: the user's own bank (envs.world.user.user_language), partly unknown to it:
# benchmark v2's (its train and dev phrasings); own_v3: v3's, which adds
# the test phrasings.
LANGUAGES = ('lexicon', 'own', 'own_v3')
OWN_LANGUAGES = ('own', 'own_v3')
DRAWS = ('numpy', 'jax')
STOP, MODIFY, REWRITE, ANSWER = (plan.STOP, plan.MODIFY, plan.REWRITE,
                                 plan.ANSWER)


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class UserConfig:
  """The simulated user's policy and degradations."""
  HELP_GROUP: ClassVar[str] = 'Simulated user'
  #: m: Modify when at most m attributes differ.
  modify_threshold: int = config_tree.setting(2, sweep=True, traced=True)
  #: The user's policy.
  policy: str = config_tree.setting('mixed', flag='user_policy',
                                    choices=POLICIES, sweep=True)
  #: Surface noise per word (share of words perturbed).
  noise_rate: float = config_tree.setting(0.0, sweep=True, traced=True)
  #: Constraint dropping rate (probability of dropping each mention).
  drop_rate: float = config_tree.setting(0.0, sweep=True, traced=True)
  min_described: int = 2       # a Rewrite names between these many
  max_described: int = 5       # attributes (never all of them)
  #: Source of the user's random decisions. jax: the draws of the jitted
  #: mode, so a host run equals a --simulation=jit run list for list.
  draws: str = config_tree.setting('numpy', flag='user_draws', choices=DRAWS)
  #: The user's feedback (default: the --benchmark preset's). template:
  #: Modify names any differences, Rewrite 2-5 of 7 attributes. paper:
  #: Modify names at most --modify_threshold differences, Rewrite describes
  #: the target completely (appendix D.2).
  style: str = config_tree.setting('template', flag='user_style',
                                   choices=STYLES, sweep=True, preset=True)
  #: The user's words (default: the --benchmark preset's). lexicon: the
  #: world's caption words, all known to the rules reasoner. own: its own
  #: phrase bank (caption words, training and dev phrasings), partly unknown
  #: to it. own_v3: own with the test phrasings (docs/reading.md).
  language: str = config_tree.setting('lexicon', flag='user_language',
                                      choices=LANGUAGES, sweep=True,
                                      preset=True)
  # Under an own language: 'all' of the bank, or only the caption words
  # and the phrasings a training set may use ('train';
  # user_language.PHRASINGS).
  phrasings: str = 'all'

  def __post_init__(self):
    if not config_pytree.concrete(self):
      return  # rebuilt from a pytree's leaves: checked when made
    for name, valid in (('draws', DRAWS), ('style', STYLES),
                        ('language', LANGUAGES),
                        ('phrasings', user_language.PHRASINGS)):
      if getattr(self, name) not in valid:
        raise ValueError(f'unknown user {name} {getattr(self, name)!r}; '
                         f'valid choices: {", ".join(valid)}')
    if self.policy not in POLICIES:
      raise ValueError(f'unknown user policy {self.policy!r}; valid choices: '
                       f'{", ".join(POLICIES)}')
    checks.at_least_int('modify_threshold', self.modify_threshold, 0)
    for name in ('noise_rate', 'drop_rate'):
      if not 0.0 <= getattr(self, name) <= 1.0:
        raise ValueError(f'{name} must be in [0, 1], got '
                         f'{getattr(self, name)}')
    num = generator.NUM_ATTRIBUTES
    if not 1 <= self.min_described <= self.max_described <= num - 1:
      raise ValueError(
          f'need 1 <= min_described <= max_described <= {num - 1}, got '
          f'{self.min_described} and {self.max_described}')


Feedback = plan.Feedback  # what the user says at a turn

_MODIFY_PREFIX = ('', 'Close, but ', 'Almost. ', 'Not quite: ', 'Good start; ')
_REWRITE_PREFIX = ('', 'No. I want ', 'Wrong video. Show me ',
                   "That's not it. I'm looking for ", 'Try ')
_ANSWER_TEMPLATES = ('{}', 'I want {}', 'It should be {}', '{}, please')
_GENERIC = ('not this one', 'no, try again', 'that is not what I want')
# Which Rewrite prefixes carry a negative marker for the State Reflector
# (tests check this against reasoning's markers).
NEGATIVE_REWRITE_PREFIX = (False, True, True, True, False)


class Meanings:
  """What the simulated user meant by each thing it said: the values its
  words name (``Feedback.mentioned``, before surface noise), recorded as
  the words are written once a ``Meanings`` exists (``meanings()``). Its
  ``parse(text)`` is the reader ``--reasoner=upper_bound`` reads with: the
  simulator's truth, an upper bound on reading (an oracle ablation, never a
  method's reading). A text said twice with other meanings is read as its
  latest (the one just said; ``conflicts`` counts them); a text the user
  never said is read by ``fallback`` (the lexicon; ``unsaid`` counts)."""

  def __init__(self, fallback):
    self._said = {}
    self._fallback = fallback
    self.conflicts = 0
    self.unsaid = 0

  def record(self, text: str, meaning: dict) -> None:
    if self._said.get(text, meaning) != meaning:
      self.conflicts += 1
    self._said[text] = meaning

  def parse(self, text: str) -> dict:
    if text in self._said:
      return dict(self._said[text])
    self.unsaid += 1
    return self._fallback.parse(text)


_MEANINGS = []  # the process's Meanings, once one is asked for


def meanings(fallback) -> Meanings:
  """The process's ``Meanings`` (made at the first call, with ``fallback``
  for texts never said): from then on every text a simulated user writes
  is recorded with what it names."""
  if not _MEANINGS:
    _MEANINGS.append(Meanings(fallback))
  _MEANINGS[0]._fallback = fallback  # pylint: disable=protected-access
  return _MEANINGS[0]


def choose_action(config: UserConfig, num_diff, asked, xp=np):
  """The user's policy (``ACTIONS`` index) on a shown video ``num_diff``
  attributes from the target, ``asked``: a question was shown. mixed:
  Answer a question when the video is far (more than ``modify_threshold``
  attributes differ), else Rewrite it, Modify a near one; modify_only:
  Modify whenever something differs; rewrite_only: Rewrite. Both draws
  (``decide`` in JAX, ``SimulatedUser`` in NumPy) decide through it."""
  major = num_diff > config.modify_threshold
  if config.policy == 'mixed':
    return xp.where(asked & major, ANSWER,
                    xp.where(major | (num_diff == 0), REWRITE, MODIFY))
  if config.policy == 'modify_only':
    return xp.where(num_diff > 0, MODIFY, REWRITE)
  return xp.asarray(REWRITE)


def most_modified(config: UserConfig, num_diff, xp=np):
  """How many differing attributes a Modify names at most (at least 1):
  all of them, or under style ``paper`` at most ``modify_threshold``."""
  most = num_diff
  if config.style == 'paper':
    most = xp.minimum(num_diff, config.modify_threshold)
  return xp.maximum(most, 1)


def decide(key: jax.Array, target_attrs: jax.Array, shown_attrs: jax.Array,
           config: UserConfig, asked: jax.Array | int = -1):
  """The user's decision on a shown video that is not the target, in JAX.

  The same policy as ``SimulatedUser.respond`` with ``jax.random`` draws:
  Modify names a uniformly random non-empty subset of the differing
  attributes (style ``paper``: of at most ``modify_threshold`` of them),
  Rewrite a random subset of ``min..max_described`` attributes (``paper``:
  every attribute), Answer the asked attribute; each named attribute is then
  dropped with probability ``drop_rate``.

  Args:
    key: the draw's key (``fold_in`` of seed, session and turn).
    target_attrs, shown_attrs: ``[A]`` int attribute values.
    config: the user's policy (static).
    asked: ``[]`` int attribute the system asked about, -1 for none.

  Returns:
    ``(action [] int32, named [A] bool, prefix [] int32)``: the action
    (index into ``ACTIONS``), the attributes the text names, and the Rewrite
    prefix (index into the prefix table).
  """
  num = jnp.shape(target_attrs)[0]  # 7, or 8 with the layout
  k_order, k_size, k_drop, k_prefix = jax.random.split(key, 4)
  diff = jnp.asarray(target_attrs) != jnp.asarray(shown_attrs)
  num_diff = jnp.sum(diff)
  asked = jnp.asarray(asked)
  action = choose_action(config, num_diff, asked >= 0, jnp)
  # A uniformly random order of the attributes; a subset is a prefix of it.
  u = jax.random.uniform(k_order, (num,))
  rank = jnp.sum(u[None, :] < u[:, None], axis=1)
  u_diff = jnp.where(diff, u, 2.0)  # non-differing attributes sort last
  rank_diff = jnp.sum(u_diff[None, :] < u_diff[:, None], axis=1)
  modify_size = jax.random.randint(
      k_size, (), 1, most_modified(config, num_diff, jnp) + 1)
  if config.style == 'paper':
    rewrite_size = num
  else:
    rewrite_size = jax.random.randint(k_size, (), config.min_described,
                                      config.max_described + 1)
  named = jnp.select(
      [action == MODIFY, action == ANSWER],
      [diff & (rank_diff < modify_size), jnp.arange(num) == asked],
      rank < rewrite_size)
  named &= jax.random.uniform(k_drop, (num,)) >= config.drop_rate
  prefix = jax.random.randint(k_prefix, (), 0, len(_REWRITE_PREFIX))
  return action.astype(jnp.int32), named, prefix


def decision_key(seed_key: jax.Array, session, turn) -> jax.Array:
  """The key of one (session, turn) decision under ``draws='jax'``;
  ``seed_key`` is ``jax.random.key(seed)``."""
  return jax.random.fold_in(jax.random.fold_in(seed_key, session), turn)


@executables.jit
def _decide_host(config, seed_key, session, turn, target_attrs, shown_attrs,
                 asked):
  return decide(decision_key(seed_key, session, turn), target_attrs,
                shown_attrs, config, asked)


def _asked(target, question) -> int | None:
  """The attribute the user reads ``question`` as being about (None: no
  question, or none it maps to)."""
  return None if question is None else lexicon.for_attributes(
      len(target)).question_attribute(question)


@executables.jit
def _decide_many(config, seed_key, sessions, turns, target_attrs, shown_attrs,
                 asked):
  return jax.vmap(lambda s, t, target, shown, a: decide(
      decision_key(seed_key, s, t), target, shown, config, a))(
          sessions, turns, target_attrs, shown_attrs, asked)


class SimulatedUser:
  """A target-conditioned user over the generated world."""

  def __init__(self, config: UserConfig = UserConfig(), seed: int = 0):
    self.config = config
    self.seed = seed

  def rng(self, session: int, turn: int) -> np.random.Generator:
    return np.random.default_rng([self.seed, session, turn])

  def respond(self, session: int, turn: int, target_id, shown_id, target_attrs,
              shown_attrs, question: str | None = None) -> Feedback:
    """The user's feedback on the displayed top-1.

    Args:
      session: session index (seeds the draws with ``turn``).
      turn: the turn about to be executed (>= 1).
      target_id, shown_id: gallery ids of the target and the displayed top-1.
      target_attrs, shown_attrs: ``[A]`` attribute values of both.
      question: the system's question shown with the list, if any.
    """
    if int(shown_id) == int(target_id):
      return Feedback('stop', '', {})
    cfg = self.config
    target = np.asarray(target_attrs)
    asked = _asked(target, question)
    if cfg.draws == 'jax':
      return self._said(session, turn, target, *_decide_host(
          cfg, jax.random.key(self.seed), session, turn, jnp.asarray(target),
          jnp.asarray(shown_attrs), -1 if asked is None else asked))
    rng = self.rng(session, turn)
    action, named = self._draw_numpy(rng, target, shown_attrs, asked)
    return Feedback(action, self._text(rng, action, named, target, None),
                    {int(a): int(target[a]) for a in named})

  def _said(self, session, turn, target, action, mask, prefix) -> Feedback:
    """The feedback of a ``decide`` decision (``draws='jax'``)."""
    action = ACTIONS[int(action)]
    named = [int(a) for a in np.flatnonzero(np.asarray(mask))]
    return Feedback(action, self._text(self.rng(session, turn), action, named,
                                       target,
                                       _REWRITE_PREFIX[int(prefix)]),
                    {int(a): int(target[a]) for a in named})

  def respond_many(self, calls) -> list[Feedback]:
    """``[respond(*call) for call in calls]`` (each ``call`` respond's
    arguments, ``question`` included); under ``draws='jax'`` the decisions
    are drawn in one batch (padded to a power of two, so that a few
    programs serve every size), each as ``respond`` draws it."""
    return self._many(calls, words=True)

  def named_many(self, calls) -> list[dict]:
    """``[respond(*call).mentioned for call in calls]``: what each reply
    names, without writing its words where the draws allow (under
    ``draws='jax'`` the decision alone fixes what is named; NumPy's draws
    write the words)."""
    if self.config.draws != 'jax':
      return [self.respond(*call).mentioned for call in calls]
    return [f.mentioned for f in self._many(calls, words=False)]

  def _many(self, calls, words: bool) -> list[Feedback]:
    """``respond_many``; ``words=False``: each feedback's text left empty
    (its action and what it names as ``respond``'s)."""
    calls = [tuple(c) + (None,) * (7 - len(c)) for c in calls]
    if self.config.draws != 'jax':
      return [self.respond(*call) for call in calls]
    out = [Feedback('stop', '', {})] * len(calls)
    todo = [i for i, c in enumerate(calls) if int(c[3]) != int(c[2])]
    if not todo:
      return out
    def asked(call):
      a = _asked(np.asarray(call[4]), call[6])
      return -1 if a is None else a
    size = 1 << (len(todo) - 1).bit_length()
    rows = [calls[i] for i in todo] + [calls[todo[0]]] * (size - len(todo))
    action, mask, prefix = map(np.asarray, _decide_many(
        self.config, jax.random.key(self.seed),
        np.array([c[0] for c in rows], np.int32),
        np.array([c[1] for c in rows], np.int32),
        np.stack([np.asarray(c[4]) for c in rows]),
        np.stack([np.asarray(c[5]) for c in rows]),
        np.array([asked(c) for c in rows], np.int32)))
    for j, i in enumerate(todo):
      session, turn, _, _, target, _, _ = calls[i]
      target = np.asarray(target)
      if words:
        out[i] = self._said(session, turn, target, action[j], mask[j],
                            prefix[j])
      else:
        out[i] = Feedback(ACTIONS[int(action[j])], '', {
            int(a): int(target[a]) for a in np.flatnonzero(mask[j])})
    return out

  def words(self, session: int, turn: int, action: int, named, prefix: int,
            target_attrs) -> str:
    """What ``respond`` says under ``draws='jax'`` once ``decide`` has
    returned ``(action, named, prefix)`` (its text draws are NumPy's,
    seeded by ``(seed, session, turn)`` like ``respond``'s): the jitted
    driver's tabulated words (``envs.world.benchmark.words.WordTable``)."""
    return self._text(self.rng(session, turn), ACTIONS[int(action)],
                      [int(a) for a in np.flatnonzero(np.asarray(named))],
                      np.asarray(target_attrs), _REWRITE_PREFIX[int(prefix)])

  def _text(self, rng, action, named, target, rewrite_prefix):
    """The words of a decision, then surface noise; ``rng`` continues
    from the decision's draws (none under ``draws='jax'``)."""
    cfg = self.config
    own = cfg.language in OWN_LANGUAGES
    widest = (user_language.widest_split(cfg.language, cfg.phrasings)
              if own else None)
    if not named:
      text = str(rng.choice(_GENERIC))
    elif action == 'modify':
      mask = np.zeros(len(target), bool)
      mask[named] = True
      text = str(rng.choice(_MODIFY_PREFIX)) + (
          user_language.edit_text(rng, target, mask, widest) if own
          else generator.edit_text(rng, target, mask))
    elif action == 'rewrite':
      if rewrite_prefix is None:
        rewrite_prefix = str(rng.choice(_REWRITE_PREFIX))
      text = rewrite_prefix + (
          user_language.describe(rng, target, named, widest) if own
          else lexicon.describe(rng, target, named))
    elif own:
      text = user_language.answer(rng, target, named, widest)
    else:
      text = str(rng.choice(_ANSWER_TEMPLATES)).format(
          lexicon.describe(rng, target, named))
    if cfg.noise_rate:
      text = add_surface_noise(rng, text, cfg.noise_rate)
    if _MEANINGS:  # what it meant, for the upper bound on reading
      _MEANINGS[0].record(text, {int(a): int(target[a]) for a in named})
    return text

  def _draw_numpy(self, rng, target, shown_attrs, asked):
    cfg = self.config
    diff = np.flatnonzero(target != np.asarray(shown_attrs))
    action = ACTIONS[int(choose_action(cfg, len(diff), asked is not None))]
    if action == 'answer':
      named = [asked]
    elif action == 'modify':
      most = int(most_modified(cfg, len(diff)))
      named = list(rng.permutation(diff)[:rng.integers(1, most + 1)])
    elif cfg.style == 'paper':
      named = list(rng.permutation(len(target)))
    else:
      size = int(rng.integers(cfg.min_described, cfg.max_described + 1))
      named = list(rng.permutation(len(target))[:size])
    return action, [a for a in named if rng.random() >= cfg.drop_rate]


def add_surface_noise(rng: np.random.Generator, text: str, rate: float) -> str:
  """Perturbs each word with probability ``rate``: a character swapped,
  dropped, doubled or replaced, or the word dropped or repeated."""
  out = []
  for word in text.split(' '):
    if not word or rng.random() >= rate:
      out.append(word)
      continue
    kind = rng.integers(6)
    i = int(rng.integers(len(word)))
    if kind == 0 and len(word) > 1:
      i = min(i, len(word) - 2)
      word = word[:i] + word[i + 1] + word[i] + word[i + 2:]
    elif kind == 1 and len(word) > 1:
      word = word[:i] + word[i + 1:]
    elif kind == 2:
      word = word[:i] + word[i] + word[i:]
    elif kind == 3:
      word = word[:i] + chr(ord('a') + int(rng.integers(26))) + word[i + 1:]
    elif kind == 4:
      continue  # the word is dropped
    else:
      out.append(word)  # the word is repeated
    out.append(word)
  return ' '.join(out)


def parse_agreement(config: UserConfig, parse, num: int, seed: int = 0):
  """How often ``parse`` (text -> ``{attribute: value}``) reads the user's
  clean feedback exactly: ``num`` turns on random (target, shown) pairs of
  the world's combinations, no surface noise, no dropping.

  Returns:
    ``{'all': share, <action>: share, ...}`` of utterances read exactly,
    ``mentions_read`` (share of named values read right),
    ``wrong_reads_per_turn`` (values read that the user did not say) and the
    counts under ``'n'``.
  """
  config = dataclasses.replace(config, noise_rate=0.0, drop_rate=0.0)
  user = SimulatedUser(config, seed=seed)
  combos = generator.all_combos()
  rng = np.random.default_rng(seed)
  exact, counts = collections.Counter(), collections.Counter()
  named = read_right = read_wrong = 0
  for i in range(num):
    target, shown = combos[rng.choice(len(combos), 2, replace=False)]
    fb = user.respond(i, 1, 0, 1, target, shown)
    read = parse(fb.text)
    counts[fb.action] += 1
    exact[fb.action] += read == fb.mentioned
    named += len(fb.mentioned)
    read_right += sum(read.get(a) == v for a, v in fb.mentioned.items())
    read_wrong += sum(fb.mentioned.get(a) != v for a, v in read.items())
  out = {a: exact[a] / counts[a] for a in counts}
  out['all'] = sum(exact.values()) / num
  # Mention level: named values read right; values read that were not said.
  out['mentions_read'] = read_right / max(named, 1)
  out['wrong_reads_per_turn'] = read_wrong / num
  out['n'] = dict(counts)
  return out
