"""ReCoVR (paper section 3) and its ablations and fusion variants.

Intent Pathway: the Intent Decomposer turns the feedback into ``search`` (the
T2V channel's query) and ``edit`` (composed with the video just shown: dynamic
anchoring). Reflection Pathway: the State Reflector's sigma sets rank-cap's
cap for the rejected top-1 and its constraints shape the next turn's queries
(Progress Memory, short-term part). TW-RRF fuses the ring of recent lists.

The jitted form (``JaxForm``) is the same step with the ``rules`` reasoner
over attribute vectors of the embedded world: what the host rules reasoner
reads out of the user's words is exactly the named attributes' target values
(tests check this on the lexicon), so both forms show the same lists.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import config_pytree
from recovr_jax.core import demotion
from recovr_jax.methods import base
from recovr_jax.protocol import plan
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import rules_core
from recovr_jax.reasoning import schemas


class ReCoVR(base.Method):
  """ReCoVR with switches for its ablations.

  ``keep`` / ``avoid``: whether the Reflector's constraints reach the next
  turn (kept values enter the T2V query through the Intent Decomposer;
  avoided values drop out of it and penalise every candidate whose caption
  states one by ``Settings.avoid_penalty`` per value, in both channels).
  With ``reflection=False`` there are no constraints and sigma is neutral.
  """

  def __init__(self, settings: base.Settings = base.Settings(), *,
               name: str = 'recovr', t2v: bool = True, covr: bool = True,
               reflection: bool = True, rank_cap: bool = True,
               dynamic_anchor: bool = True, fusion: str = 'tw_rrf',
               keep: bool = True, avoid: bool = True,
               placement: str | None = None):
    super().__init__(settings)
    self.name = name
    # Where rank-cap applies (ranking.PLACEMENTS); None: the run's
    # --rank_cap_placement.
    self.placement = placement
    self.t2v = t2v                        # uses the T2V channel
    self.covr = covr                      # uses the CoVR channel
    self.reflection = reflection          # State Reflector on
    self.rank_cap = rank_cap
    self.dynamic_anchor = dynamic_anchor  # CoVR anchor: shown top-1 or v_ref
    self.fusion = fusion
    self.keep = reflection and keep       # kept values reach the intent
    self.avoid = reflection and avoid     # avoided values are penalised
    self.jax_form = JaxForm(t2v=t2v, covr=covr, reflection=reflection,
                            dynamic_anchor=dynamic_anchor, keep=self.keep,
                            avoid=self.avoid,
                            avoid_penalty=settings.avoid_penalty,
                            question=(None if settings.ask.mode == 'never'
                                      else 'asker'),
                            ask=settings.ask,
                            candidates=settings.question_candidates)

  def ranking(self, base_config):
    """The base core (its own rank-cap placement, if it has one); without
    State Reflection under the paper's reading
    (``Settings.unreflected_rank_cap='stagnation'``) the top-1 just
    rejected gets no cap of its own."""
    config = super().ranking(base_config)
    if self.placement is not None:
      config = dataclasses.replace(config, rank_cap_placement=self.placement)
    if (not self.reflection and
        self.settings.unreflected_rank_cap == 'stagnation'):
      config = dataclasses.replace(config, cap_just_rejected=False)
    return config

  def init(self, ctx, start):
    s, d = start.covr_query.shape
    turn_plan = plan.empty_plan(s, d)
    if self.t2v:
      init = ctx.reasoner.call('t2v_init', [
          schemas.T2VInitRequest(ctx.captions[r] if r >= 0 else '', m)
          for r, m in zip(start.reference, start.modification)]).objects
      searches = [o['search'] for o in init]
      turn_plan.queries[:, plan.T2V] = ctx.encode_text(searches)
      turn_plan.valid[:, plan.T2V] = [bool(q) for q in searches]
    turn_plan.queries[:, plan.COVR] = start.covr_query
    turn_plan.valid[:, plan.COVR] = self.covr
    memories = [schemas.SessionMemory() for _ in range(s)]
    return {'memories': memories, 'reference': start.reference}, turn_plan

  def memory(self, state, row):
    return state['memories'][row]

  def question(self, ctx, state, shown):
    """The Question Asker, when the ask policy says so (AskStream's gate)."""
    policy = self.settings.ask
    out = [None] * len(shown.sessions)
    if not len(shown.sessions) or policy.mode == 'never':
      return out
    entropy = np.asarray(_entropy(shown.scores, policy.tau))
    rows = [j for j, (h, n) in enumerate(zip(entropy, shown.asked))
            if asking.should_ask(policy, float(h), int(n))]
    if rows:
      k = self.settings.question_candidates
      asked = ctx.reasoner.question([schemas.QuestionRequest(
          tuple(ctx.captions[g] for g in shown.ids[j, :k] if g >= 0),
          self.memory(state, int(shown.sessions[j]))) for j in rows])
      for j, o in zip(rows, asked):
        out[j] = o['question']
    return out

  def _read(self, memory):
    """What the Intent Decomposer reads of short-term Progress Memory."""
    return schemas.SessionMemory(keep=memory.keep if self.keep else (),
                                 avoid=memory.avoid if self.avoid else ())

  def step(self, ctx, state, obs):
    memories = state['memories']
    rows = obs.sessions
    intent_out = ctx.reasoner.call('intent', [
        schemas.IntentRequest(f, c, self._read(memories[i]))
        for f, c, i in zip(obs.feedback, obs.shown_caption, rows)])
    if self.reflection:
      questions = obs.question or (None,) * len(rows)
      reflect_out = ctx.reasoner.call('reflect', [
          schemas.ReflectRequest(f, c, memories[i], q)
          for f, c, i, q in zip(obs.feedback, obs.shown_caption, rows,
                                questions)])
    else:
      reflect_out = schemas.Outputs(
          [{'sigma': 'neu', 'keep': [], 'avoid': []} for _ in rows])
    intents, reflections = intent_out.objects, reflect_out.objects
    searches = [o['search'] for o in intents]
    edits = [o['edit'] for o in intents]
    turn_plan = plan.empty_plan(len(rows), ctx.gallery.shape[1])
    turn_plan.queries[:, plan.T2V] = ctx.encode_text(searches)
    turn_plan.valid[:, plan.T2V] = [self.t2v and bool(q) for q in searches]
    # A session that started from text has no reference: it anchors on
    # the shown result even with a fixed anchor.
    reference = state['reference'][rows]
    anchors = (obs.shown if self.dynamic_anchor
               else np.where(reference >= 0, reference, obs.shown))
    turn_plan.queries[:, plan.COVR] = ctx.compose(ctx.gallery[anchors],
                                                 ctx.encode_text(edits))
    turn_plan.valid[:, plan.COVR] = [self.covr and bool(e) for e in edits]
    penalty = None
    if self.avoid:
      # Constraints written up to the last turn shape this turn's lists.
      penalty = np.zeros((len(rows), len(ctx.captions)), np.float32)
      for j, i in enumerate(rows):
        if memories[i].avoid:
          penalty[j] = self.settings.avoid_penalty * (
              ctx.reasoner.constraint_hits(memories[i].avoid, ctx.captions))
    records = []
    memories = list(memories)
    for j, i in enumerate(rows):
      turn_plan.sigma[j] = plan.SIGMA[reflections[j]['sigma']]
      record = {'search': searches[j], 'edit': edits[j]}
      if self.reflection:
        record.update(keep=list(memories[i].keep),
                      avoid=list(memories[i].avoid))
      memories[i] = schemas.update_memory(reflections[j])
      if intent_out.first_pass is not None:
        record['valid'] = {'intent': intent_out.first_pass[j]}
        if reflect_out.first_pass is not None:
          record['valid']['reflect'] = reflect_out.first_pass[j]
      records.append(record)
    state = dict(state, memories=memories)
    return state, dataclasses.replace(turn_plan, records=tuple(records),
                                      penalty=penalty)


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class JaxForm(plan.JaxForm, plan.JaxAsker):
  """ReCoVR's step with the rules reasoner over attribute vectors.

  State (Progress Memory, short-term part): ``keep [A]`` int32 the kept
  values (-1 = none) and ``avoid [A, V]`` bool the avoided ones, as the
  rules Reflector writes them. ``question='asker'``: the Question Asker
  (``ask``'s gate, the rules question over the top ``candidates``), run by
  the jitted driver after each ranking.
  """
  # Switches (``config_pytree.switch``): ReCoVR and its ablations share one
  # compiled program.
  t2v: bool = config_pytree.switch(True)
  covr: bool = config_pytree.switch(True)
  reflection: bool = config_pytree.switch(True)
  dynamic_anchor: bool = config_pytree.switch(True)
  keep: bool = config_pytree.switch(True)
  avoid: bool = config_pytree.switch(True)
  avoid_penalty: float = config_pytree.number(base.AVOID_PENALTY)
  question: str | None = None
  ask: asking.AskPolicy = asking.AskPolicy(mode='never')
  candidates: int = 10
  # The Reflector's sigma rule (``rules.RulesReasoner``'s ``sigma``):
  # 'rules', 'paper' (an edit pos, an answer to the question shown neu) or
  # 'frames' (the same mapping of the words' label, ``obs.info.label``).
  sigma_rule: str = 'rules'

  def with_sigma_rule(self, rule):
    return dataclasses.replace(self, sigma_rule=rule)

  def init(self, start):
    """``start``: a ``plan.JaxStart``; ReCoVR reads the T2V
    initializer's assignment ``init_search [A]``."""
    init_search = start.init_search
    none = jnp.full_like(init_search, -1)
    search = jnp.where(self.t2v, init_search, none)
    avoid = jnp.zeros((init_search.shape[0], start.num_values), bool)
    return {'keep': none, 'avoid': avoid}, search

  def step(self, state, obs):
    """One feedback turn.

    Args:
      state: ``{'keep': [A] int32, 'avoid': [A, V] bool}``.
      obs: ``JaxObservation`` whose ``info`` is an ``AttributeReading``:
        ``mentions [A]`` (what the feedback names), ``negative []`` (a
        rejection marker in the words), ``shown_attrs [A]`` (the shown
        video's caption, parsed); and ``shown``, ``reference``.

    Returns:
      ``(state, JaxPlan)``.
    """
    reading = obs.info
    mentions, shown = reading.mentions, reading.shown_attrs
    keep, avoid = state['keep'], state['avoid']
    read_keep = jnp.where(self.keep, keep, -1)
    read_avoid = avoid & self.avoid
    named, changes, num_changes, relative = rules_core.read(
        mentions, shown, reading.negative, jnp)
    # Intent Decomposer: shown values (relative feedback, not avoided) <
    # kept values < this feedback.
    wanted = rules_core.wanted(mentions, shown, read_keep,
                               _holds(read_avoid, shown), relative, jnp)
    # State Reflector.
    if self.sigma_rule == 'frames':
      # The frame classifier's label (frames.LABELS); an answer needs a
      # question shown.
      label = jnp.where((reading.label == 1) & (obs.asked < 0), 0,
                        reading.label)
      sigma = rules_core.sigma('frames', relative, num_changes, label=label,
                               xp=jnp)
    else:
      sigma = rules_core.sigma(
          self.sigma_rule, relative, num_changes,
          answers=rules_core.answers(named, obs.asked, jnp), xp=jnp)
    new_keep, rejected = rules_core.reflect(mentions, shown, changes, keep,
                                            jnp)
    values = jnp.arange(avoid.shape[1])
    kept = values[None, :] == new_keep[:, None]
    rejected = values[None, :] == rejected[:, None]
    # Without State Reflection: sigma neu, the state as it was.
    sigma = jnp.where(self.reflection, sigma, demotion.SIGMA_NEU)
    new_state = jax.tree.map(
        lambda new, old: jnp.where(self.reflection, new, old),
        {'keep': new_keep, 'avoid': (avoid & ~kept) | rejected}, state)
    turn_plan = JaxPlan(search=wanted, edit=changes,
                   use_search=jnp.asarray(self.t2v),
                   use_edit=jnp.asarray(self.covr), sigma=sigma,
                   anchor=jnp.where(self.dynamic_anchor, obs.shown,
                                    obs.reference),
                   avoid=read_avoid)
    return new_state, turn_plan

  def jax_question(self, state, shown_ids, shown_scores, asked, reference,
                   memory, active):
    """The Question Asker after a ranking (``question='asker'``):
    AskStream's gate (``asking.should_ask``) and the rules reasoner's
    question, the attribute not kept yet whose values are the most uncertain
    (entropy of their counts) among the top ``candidates``' captions.
    Returns ``(attribute the user reads in it or -1, 1 when asked)``."""
    del reference
    policy = self.ask
    ask = active & (asked < policy.budget)
    if policy.mode == 'entropy':
      ask &= asking.normalized_entropy(shown_scores,
                                       policy.tau) > policy.threshold
    ids = shown_ids[:self.candidates]
    values = jnp.where(ids[:, None] >= 0,
                       memory.caption_attrs[jnp.maximum(ids, 0)], -1)  # [k, A]
    best = rules_core.most_uncertain(values, state['keep'] >= 0,
                                     memory.asked_with_value.shape[1], jnp)
    question = jnp.where(ask, memory.asked_plain[best], -1).astype(jnp.int32)
    return question, ask.astype(jnp.int32)

  def penalty(self, avoid, caption_attrs):
    """``[N]`` float32: ``avoid_penalty`` per avoided value each caption
    states (``caption_attrs [N, A]``, -1 none); 0 without ``avoid`` (whose
    plan avoids nothing)."""
    hits = jax.vmap(lambda row: jnp.sum(_holds(avoid, row)))(caption_attrs)
    return self.avoid_penalty * hits.astype(jnp.float32)


def _holds(avoid, values):
  """``[A]`` bool: ``values[a]`` (``-1``: none) is avoided."""
  a = jnp.arange(values.shape[0])
  return (values >= 0) & avoid[a, jnp.maximum(values, 0)]


_entropy = jax.jit(jax.vmap(asking.normalized_entropy, in_axes=(0, None)))

JaxPlan = plan.JaxPlan  # the protocol's


VARIANTS = {
    'recovr': functools.partial(ReCoVR, name='recovr'),
    'covr_only': functools.partial(ReCoVR, name='covr_only', t2v=False),
    't2v_only': functools.partial(ReCoVR, name='t2v_only', covr=False),
    'intent_only': functools.partial(ReCoVR, name='intent_only',
                                     reflection=False, rank_cap=False),
    'no_rankcap': functools.partial(ReCoVR, name='no_rankcap', rank_cap=False),
    'no_reflection': functools.partial(ReCoVR, name='no_reflection',
                                       reflection=False),
    'no_keep': functools.partial(ReCoVR, name='no_keep', keep=False),
    'no_avoid': functools.partial(ReCoVR, name='no_avoid', avoid=False),
    # Table 3 built up one component at a time: one channel, plain.
    'covr_plain': functools.partial(ReCoVR, name='covr_plain', t2v=False,
                                    reflection=False, rank_cap=False),
    't2v_plain': functools.partial(ReCoVR, name='t2v_plain', covr=False,
                                   reflection=False, rank_cap=False),
    'fixed_anchor': functools.partial(ReCoVR, name='fixed_anchor',
                                      dynamic_anchor=False),
    # Table 11: simplified strategies that keep one mechanism each (with
    # history_rewrite, which keeps history aggregation).
    'rankcap_only': functools.partial(
        ReCoVR, name='rankcap_only', t2v=False, reflection=False,
        fusion='static_rrf'),
    'single_turn_fusion': functools.partial(
        ReCoVR, name='single_turn_fusion', reflection=False, rank_cap=False,
        fusion='static_rrf'),
    'static_rrf': functools.partial(ReCoVR, name='static_rrf',
                                    fusion='static_rrf'),
    'uniform_rrf': functools.partial(ReCoVR, name='uniform_rrf',
                                     fusion='uniform_rrf'),
    'penalty_rrf': functools.partial(ReCoVR, name='penalty_rrf',
                                     fusion='penalty_rrf'),
    'sim_max': functools.partial(ReCoVR, name='sim_max', fusion='sim_max'),
    'sim_sum': functools.partial(ReCoVR, name='sim_sum', fusion='sim_sum'),
    # ReCoVR with rank-cap where the paper's method text puts it: on the
    # current turn's lists before fusion (the default, --rank_cap_placement
    # =all, also caps the ring and the fused list; docs/definitions.md §3).
    'recovr_current': functools.partial(ReCoVR, name='recovr_current',
                                        placement='current'),
}
