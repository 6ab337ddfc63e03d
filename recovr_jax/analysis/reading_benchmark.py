"""The reading benchmark: how well a backend's Intent Decomposer and State
Reflector read the simulated user (``experiments/evaluate/eval_reading.py``).

Requests are drawn exactly as a run draws them: ReCoVR's host loop on the
run's environment (the default benchmark: captioner captions, the paper's
user in its own words), the backend's own earlier replies as the session's
memory, test-split sessions. Ground truth comes from the simulator for each
utterance: the values it names, the values it changes (named values that
differ from the shown video's true ones) and its label of the turn as sigma
(docs/definitions.md §10: Modify ``pos``, Answer ``neu``, Rewrite ``neg``).

Each named value is classed by the phrase that stated it
(``user_language.phrasing_of`` on the clean words of the same decision):
the caption words or a training phrasing (column ``train``), a dev
phrasing (``dev``, v2's held-out phrasings) or a test phrasing (``test``,
benchmark v3's). Per-utterance numbers (wrong values, sigma,
contradictions) split utterances the same way, by the widest split of
their named values: ``test`` when any was stated by a test phrasing, else
``dev`` when any by a dev phrasing.

Metrics (``search`` is read by the world's lexicon, the layout's phrases
included when the world describes it: ``lexicon.for_attributes``; ``edit``
by its ``parse_edit``, which reads every canonical text the rules and
grounded backends write back exactly):
* intent ``recall``: named values stated in ``search``; ``edit_recall``:
  changed values stated in ``edit``; ``precision``: values stated in
  ``edit`` that the utterance names; ``wrong_per_turn``: values of a named
  attribute stated in ``search`` or ``edit`` other than the named one, plus
  values in ``edit`` of attributes the utterance does not name.
* reflect ``recall``: named values in ``keep``; ``precision``: newly kept
  values (not kept before the turn) that the utterance names;
  ``wrong_per_turn``: newly kept values it does not name plus named values
  put in ``avoid``; ``sigma_agreement``; ``contradictory_memories``: turns
  whose memory keeps and avoids one value or keeps two values of one
  attribute; ``unreadable_items``: memory items that are not the world's
  ``attribute: value`` literals.

Recall, wrong values per turn and sigma agreement carry 95% session-bootstrap
intervals (``intervals``: whole test sessions resampled, a ratio of sums per
resample; ``core.list_metrics.bootstrap_ratio``).
"""

import collections
import dataclasses

import numpy as np

from recovr_jax.core import resampling
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world.user import user_language
from recovr_jax import methods
from recovr_jax.drivers import host_driver
from recovr_jax.reasoning import frames
from recovr_jax.reasoning import registry

SIGMA_OF_ACTION = frames.SIGMA  # the paper's sigma of the user's decision
SIGMAS = ('neg', 'neu', 'pos')
COLUMNS = ('train', 'dev', 'test', 'all')
_SPLITS = COLUMNS[:3]  # widening


class _RecordingReasoner:
  """A backend that keeps every intent / reflect request and reply."""

  def __init__(self, inner):
    self.inner = inner
    self.log = {'intent': [], 'reflect': []}

  def call(self, module, requests):
    out = self.inner.call(module, requests)
    if module in self.log:
      self.log[module].extend(zip(requests, out.objects))
    return out

  def __getattr__(self, name):
    return getattr(self.inner, name)


@dataclasses.dataclass
class Turn:
  """One feedback turn's ground truth (never shown to a backend)."""
  text: str
  action: str
  named: dict           # {attribute: value} the words name
  changes: dict         # named values that differ from the shown video
  kinds: dict           # attribute -> 'train' | 'dev' | 'test' (its split)
  session: int = 0      # the test query (the bootstrap resamples these)

  @property
  def column(self) -> str:
    return max(self.kinds.values(), key=_SPLITS.index, default='train')


def _kind(attribute, value, clean_text):
  kind = user_language.phrasing_of(attribute, value, clean_text)
  return kind if kind in ('dev', 'test') else 'train'


def collect(env, ctx, user_config, seed: int, sessions, base,
            settings, batch_size: int = 100):
  """``(turns, intents, reflects)`` of ReCoVR's sessions ``sessions`` on
  ``env`` with ``ctx`` (a run's ``plan.Context``) and its reasoner: aligned
  lists, one entry per feedback turn."""
  user = simulated_user.SimulatedUser(user_config, seed=seed)
  clean = simulated_user.SimulatedUser(dataclasses.replace(
      user_config, noise_rate=0.0), seed=seed)
  attributes = env.attributes
  turns = []

  def respond(session, turn, target, shown, question):
    fb = user.respond(session, turn, target, shown, attributes[target],
                      attributes[shown], question=question)
    if fb.action != 'stop':
      words = clean.respond(session, turn, target, shown, attributes[target],
                            attributes[shown], question=question).text
      turns.append(Turn(
          text=fb.text, action=fb.action, named=dict(fb.mentioned),
          changes={a: v for a, v in fb.mentioned.items()
                   if attributes[shown][a] != v},
          kinds={a: _kind(a, v, words) for a, v in fb.mentioned.items()},
          session=int(session)))
    return fb

  recording = _RecordingReasoner(ctx.reasoner)
  ctx = dataclasses.replace(ctx, reasoner=recording)
  method = methods.make('recovr', settings)
  sessions = np.asarray(sessions)
  for i in range(0, len(sessions), batch_size):
    host_driver.run_batch(env, method, sessions[i:i + batch_size], respond, ctx,
                   base)
  intents = [o for _, o in recording.log['intent']]
  reflects = recording.log['reflect']
  if not len(turns) == len(intents) == len(reflects):
    raise RuntimeError(f'reading benchmark: {len(turns)} user turns but '
                       f'{len(intents)} intent and {len(reflects)} reflect '
                       'requests; the loop did not ask once per turn')
  for t, (request, _) in zip(turns, reflects):
    if request.feedback != t.text:
      raise RuntimeError('reading benchmark: requests out of step with the '
                         f'user ({request.feedback!r} vs {t.text!r})')
  return turns, intents, reflects


def _items(items, words=lexicon):
  """``(pairs, unreadable)`` of memory items (``words``: the world's
  lexicon)."""
  pairs = [words.parse_constraint(x) for x in items]
  return [p for p in pairs if p is not None], sum(p is None for p in pairs)


# The ratios that get 95% session-bootstrap intervals: name -> (numerator,
# denominator) counts of ``score``.
INTERVALS = {
    'intent_recall': ('intent_read', 'named'),
    'intent_wrong_per_turn': ('intent_wrong', 'turns'),
    'reflect_recall': ('reflect_read', 'named'),
    'reflect_wrong_per_turn': ('reflect_wrong', 'turns'),
    'sigma_agreement': ('sigma_right', 'turns'),
}


def score(turns, intents, reflects,
          num_resamples: int = resampling.DEFAULT_RESAMPLES,
          words=lexicon) -> dict:
  """The reading metrics per column (see the module docstring), with 95%
  session-bootstrap intervals of ``INTERVALS`` (whole sessions resampled,
  ``num_resamples`` times, the same resamples for every column).
  ``words``: the world's lexicon (``lexicon.for_attributes``), which reads
  the replies back."""
  per_session = collections.defaultdict(
      lambda: {col: collections.Counter() for col in COLUMNS})
  session = None

  def add(cols, key, n=1):
    for col in cols:
      per_session[session][col][key] += n

  for t, intent, (request, reflect) in zip(turns, intents, reflects):
    session = t.session
    utter = (t.column, 'all')
    add(utter, 'turns')
    search = words.parse(intent['search'])
    edit = words.parse_edit(intent['edit'])
    keep, bad_keep = _items(reflect['keep'], words)
    avoid, bad_avoid = _items(reflect['avoid'], words)
    before = set(_items(request.memory.keep, words)[0])
    for a, v in t.named.items():
      col = (t.kinds[a], 'all')
      add(col, 'named')
      add(col, 'intent_read', search.get(a) == v)
      add(col, 'reflect_read', (a, v) in keep)
    for a, v in t.changes.items():
      col = (t.kinds[a], 'all')
      add(col, 'changed')
      add(col, 'edit_read', edit.get(a) == v)
    add(utter, 'edit_values', len(edit))
    add(utter, 'edit_named', sum(t.named.get(a) == v for a, v in edit.items()))
    add(utter, 'intent_wrong',
        sum(a in t.named and v != t.named[a] for a, v in search.items()) +
        sum(t.named.get(a) != v for a, v in edit.items()))
    new = [p for p in keep if p not in before]
    add(utter, 'new_keep', len(new))
    add(utter, 'new_keep_named', sum(t.named.get(a) == v for a, v in new))
    add(utter, 'reflect_wrong',
        sum(t.named.get(a) != v for a, v in new) +
        sum(t.named.get(a) == v for a, v in avoid))
    add(utter, 'sigma_right', reflect['sigma'] == SIGMA_OF_ACTION[t.action])
    add(utter, f'sigma:{SIGMA_OF_ACTION[t.action]}>{reflect["sigma"]}')
    kept = collections.Counter(a for a, _ in keep)
    add(utter, 'contradictory',
        bool(set(keep) & set(avoid)) or any(n > 1 for n in kept.values()))
    add(utter, 'unreadable', bad_keep + bad_avoid)
    add(utter, 'items', len(reflect['keep']) + len(reflect['avoid']))

  c = {col: sum((counts[col] for counts in per_session.values()),
                collections.Counter()) for col in COLUMNS}

  def ratio(col, num, den):
    return c[col][num] / c[col][den] if c[col][den] else None

  out = {}
  for col in COLUMNS:
    out[col] = {
        'turns': c[col]['turns'], 'named_values': c[col]['named'],
        'intent': {
            'recall': ratio(col, 'intent_read', 'named'),
            'edit_recall': ratio(col, 'edit_read', 'changed'),
            'precision': ratio(col, 'edit_named', 'edit_values'),
            'wrong_per_turn': ratio(col, 'intent_wrong', 'turns')},
        'reflect': {
            'recall': ratio(col, 'reflect_read', 'named'),
            'precision': ratio(col, 'new_keep_named', 'new_keep'),
            'wrong_per_turn': ratio(col, 'reflect_wrong', 'turns'),
            'sigma_agreement': ratio(col, 'sigma_right', 'turns'),
            # simulator's label -> the Reflector's sigma -> turns
            'sigma_confusion': {
                label: {s: c[col][f'sigma:{label}>{s}'] for s in SIGMAS}
                for label in SIGMAS},
            'contradictory_memories': c[col]['contradictory'],
            'unreadable_items': c[col]['unreadable'],
            'items': c[col]['items']}}
  if per_session:
    sessions = sorted(per_session)
    for col in COLUMNS:
      counts = [[[per_session[x][col][k] for k in pair]
                 for pair in INTERVALS.values()] for x in sessions]
      counts = np.asarray(counts, np.float32)          # [S, metrics, 2]
      boot = resampling.bootstrap_ratio(counts[..., 0], counts[..., 1],
                                     num_resamples)
      out[col]['intervals'] = {
          name: None if not np.isfinite(lo) else [float(lo), float(hi)]
          for name, lo, hi in zip(INTERVALS, np.asarray(boot.lower),
                                  np.asarray(boot.upper))}
  out['actions'] = dict(collections.Counter(t.action for t in turns))
  return out


def with_options(reasoner: registry.ReasonerConfig,
                 grounded_options: dict | None = None
                 ) -> registry.ReasonerConfig:
  """``reasoner`` with ``grounded_options`` overriding the grounded
  reader's, where it reads them."""
  if not hasattr(reasoner, 'options'):
    return reasoner
  return dataclasses.replace(reasoner, options=grounded_options)


def evaluate(run, noise_rate: float, num_sessions):
  """The reading metrics of the assembled ``run``'s reasoner
  (``run.assemble.Run``; ``reasoner_config`` sets a backend and overrides
  of the grounded reader's options for it) at ``noise_rate`` on the first
  ``num_sessions`` test queries of its environment."""
  config = run.config
  env, reasoner = run.env, run.reasoner
  user = dataclasses.replace(config.data.user, noise_rate=noise_rate)
  sessions = np.arange(min(num_sessions, len(env.target)))
  turns, intents, reflects = collect(env, run.ctx, user, config.user_seed,
                                     sessions, config.loop, config.settings,
                                     config.batch_size)
  out = score(turns, intents, reflects,
              words=lexicon.for_attributes(env.attributes.shape[-1]))
  out['sessions'] = int(len(sessions))
  fit = getattr(reasoner, 'fit', None)
  if fit is not None:
    out['threshold_fit'] = fit
  return out


def without_test(scored: dict) -> dict:
  """``scored`` (``score``'s) without what the test split's utterances
  decide: the ``test`` and ``all`` columns."""
  return {k: v for k, v in scored.items() if k not in ('test', 'all')}


def table(report: dict) -> str:
  """A markdown table of ``{backend: {noise: metrics}}`` (the columns
  each holds)."""
  head = ('| backend | noise | phrasings | turns | named values | intent '
          'recall | edit recall | edit precision | intent wrong/turn | '
          'reflect recall | reflect precision | reflect wrong/turn | sigma '
          'agreement | contradictory memories |')
  lines = [head, '|' + '---|' * 3 + '---:|' * 11]

  def pct(x, interval=None):
    if x is None:
      return '-'
    return f'{100 * x:.1f}%' + (
        f' [{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]'
        if interval else '')

  def num(x, interval=None):
    if x is None:
      return '-'
    return f'{x:.3f}' + (f' [{interval[0]:.3f}, {interval[1]:.3f}]'
                         if interval else '')

  for backend, by_noise in report.items():
    for noise, scored in by_noise.items():
      for col in (c for c in COLUMNS if c in scored):
        m = scored[col]
        i, r = m['intent'], m['reflect']
        ci = m.get('intervals') or {}
        lines.append(
            f'| {backend} | {noise} | {col} | {m["turns"]} | '
            f'{m["named_values"]} | '
            f'{pct(i["recall"], ci.get("intent_recall"))} | '
            f'{pct(i["edit_recall"])} | {pct(i["precision"])} | '
            f'{num(i["wrong_per_turn"], ci.get("intent_wrong_per_turn"))} | '
            f'{pct(r["recall"], ci.get("reflect_recall"))} | '
            f'{pct(r["precision"])} | '
            f'{num(r["wrong_per_turn"], ci.get("reflect_wrong_per_turn"))} | '
            f'{pct(r["sigma_agreement"], ci.get("sigma_agreement"))} | '
            f'{r["contradictory_memories"]} |')
  return '\n'.join(lines) + ('\n\nBrackets: 95% session-bootstrap '
                             'intervals (whole test sessions resampled).\n')
