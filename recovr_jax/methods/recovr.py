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

import jax.numpy as jnp

from recovr_jax.core import demotion
from recovr_jax.methods import base
from recovr_jax.protocol import plan as plan_lib
from recovr_jax.reasoning import schemas


class ReCoVR(base.Method):
  """ReCoVR with switches for its ablations."""

  def __init__(self, settings: base.Settings = base.Settings(), *,
               name: str = 'recovr', t2v: bool = True, covr: bool = True,
               reflection: bool = True, rank_cap: bool = True,
               dynamic_anchor: bool = True, fusion: str = 'tw_rrf'):
    super().__init__(settings)
    self.name = name
    self.t2v = t2v                        # uses the T2V channel
    self.covr = covr                      # uses the CoVR channel
    self.reflection = reflection          # State Reflector on
    self.rank_cap = rank_cap
    self.dynamic_anchor = dynamic_anchor  # CoVR anchor: shown top-1 or v_ref
    self.fusion = fusion
    self.jax_form = JaxForm(t2v=t2v, covr=covr, reflection=reflection,
                            dynamic_anchor=dynamic_anchor)

  def init(self, ctx, start):
    s, d = start.covr_query.shape
    plan = plan_lib.empty_plan(s, d)
    memories = [schemas.SessionMemory() for _ in range(s)]
    if self.t2v:
      init = ctx.reasoner.call('t2v_init', [
          schemas.T2VInitRequest(ctx.captions[r], m)
          for r, m in zip(start.reference, start.modification)]).objects
      searches = [o['search'] for o in init]
      memories = [schemas.SessionMemory(search=q) for q in searches]
      plan.queries[:, plan_lib.T2V] = ctx.encode_text(searches)
      plan.valid[:, plan_lib.T2V] = [bool(q) for q in searches]
    plan.queries[:, plan_lib.COVR] = start.covr_query
    plan.valid[:, plan_lib.COVR] = self.covr
    return {'memories': memories, 'reference': start.reference}, plan

  def memory(self, state, row):
    return state['memories'][row]

  def step(self, ctx, state, obs):
    memories = state['memories']
    rows = obs.sessions
    intent_out = ctx.reasoner.call('intent', [
        schemas.IntentRequest(f, c, memories[i])
        for f, c, i in zip(obs.feedback, obs.shown_caption, rows)])
    if self.reflection:
      reflect_out = ctx.reasoner.call('reflect', [
          schemas.ReflectRequest(f, c, memories[i])
          for f, c, i in zip(obs.feedback, obs.shown_caption, rows)])
    else:
      reflect_out = schemas.Outputs(
          [{'sigma': 'neu', 'keep': [], 'avoid': []} for _ in rows])
    intents, reflections = intent_out.objects, reflect_out.objects
    searches = [o['search'] for o in intents]
    edits = [o['edit'] for o in intents]
    plan = plan_lib.empty_plan(len(rows), ctx.gallery.shape[1])
    plan.queries[:, plan_lib.T2V] = ctx.encode_text(searches)
    plan.valid[:, plan_lib.T2V] = [self.t2v and bool(q) for q in searches]
    anchors = (obs.shown if self.dynamic_anchor
               else state['reference'][rows])
    plan.queries[:, plan_lib.COVR] = ctx.compose(ctx.gallery[anchors],
                                                 ctx.encode_text(edits))
    plan.valid[:, plan_lib.COVR] = [self.covr and bool(e) for e in edits]
    records = []
    memories = list(memories)
    for j, i in enumerate(rows):
      plan.sigma[j] = plan_lib.SIGMA[reflections[j]['sigma']]
      memories[i] = schemas.update_memory(memories[i], intents[j],
                                          reflections[j])
      record = {'search': searches[j], 'edit': edits[j]}
      if intent_out.first_pass is not None:
        record['valid'] = {'intent': intent_out.first_pass[j]}
        if reflect_out.first_pass is not None:
          record['valid']['reflect'] = reflect_out.first_pass[j]
      records.append(record)
    state = dict(state, memories=memories)
    return state, dataclasses.replace(plan, records=tuple(records))


@dataclasses.dataclass(frozen=True)
class JaxForm:
  """ReCoVR's step with the rules reasoner over attribute vectors.

  State (Progress Memory, short-term part): ``search [A]`` the running query
  and ``keep [A]`` the kept constraints, as partial assignments (-1 = none).
  """
  t2v: bool = True
  covr: bool = True
  reflection: bool = True
  dynamic_anchor: bool = True

  def init(self, init_search):
    """``init_search [A]``: the T2V initializer's assignment."""
    none = jnp.full_like(init_search, -1)
    search = init_search if self.t2v else none
    return {'search': search, 'keep': none}, search

  def step(self, state, obs):
    """One feedback turn.

    Args:
      state: ``{'search': [A], 'keep': [A]}`` int32.
      obs: ``JaxObservation``: ``mentions [A]`` (what the feedback names),
        ``negative []`` (a rejection marker in the words), ``shown_attrs
        [A]`` (the shown video's caption, parsed), ``shown``, ``reference``.

    Returns:
      ``(state, JaxPlan)``.
    """
    mentions, shown = obs.mentions, obs.shown_attrs
    search, keep = state['search'], state['keep']
    # Intent Decomposer: running query < kept constraints < this feedback.
    wanted = jnp.where(mentions >= 0, mentions,
                       jnp.where(keep >= 0, keep, search))
    changes = jnp.where((mentions >= 0) & (mentions != shown), mentions, -1)
    # State Reflector.
    num_changes = jnp.sum(changes >= 0)
    negative = (jnp.sum(mentions >= 0) == 0) | obs.negative
    sigma = jnp.where(negative | (num_changes >= 3), demotion.SIGMA_NEG,
                      jnp.where(num_changes <= 1, demotion.SIGMA_POS,
                                demotion.SIGMA_NEU)).astype(jnp.int32)
    if not self.reflection:
      sigma = jnp.asarray(demotion.SIGMA_NEU, jnp.int32)
    # Progress Memory, short-term part, as schemas.update_memory writes it.
    new_state = {
        'search': jnp.where(jnp.any(wanted >= 0), wanted, search),
        'keep': (jnp.where(mentions >= 0, mentions, keep) if self.reflection
                 else jnp.full_like(keep, -1))}
    plan = JaxPlan(search=wanted, edit=changes, use_search=self.t2v,
                   use_edit=self.covr, sigma=sigma,
                   anchor=obs.shown if self.dynamic_anchor else obs.reference)
    return new_state, plan


@dataclasses.dataclass(frozen=True)
class JaxPlan:
  """A jitted turn plan: channel texts as partial assignments."""
  search: jnp.ndarray   # [A] int32 the T2V query's assignment
  edit: jnp.ndarray     # [A] int32 the edit's assignment (all -1: empty)
  use_search: bool      # the method uses the T2V channel
  use_edit: bool        # the method uses the CoVR channel
  sigma: jnp.ndarray    # [] int32
  anchor: jnp.ndarray   # [] int32 gallery id the edit is composed with


VARIANTS = {
    'recovr': functools.partial(ReCoVR, name='recovr'),
    'covr_only': functools.partial(ReCoVR, name='covr_only', t2v=False),
    't2v_only': functools.partial(ReCoVR, name='t2v_only', covr=False),
    'intent_only': functools.partial(ReCoVR, name='intent_only',
                                     reflection=False, rank_cap=False),
    'no_rankcap': functools.partial(ReCoVR, name='no_rankcap', rank_cap=False),
    'no_reflection': functools.partial(ReCoVR, name='no_reflection',
                                       reflection=False),
    'fixed_anchor': functools.partial(ReCoVR, name='fixed_anchor',
                                      dynamic_anchor=False),
    'static_rrf': functools.partial(ReCoVR, name='static_rrf',
                                    fusion='static_rrf'),
    'uniform_rrf': functools.partial(ReCoVR, name='uniform_rrf',
                                     fusion='uniform_rrf'),
    'penalty_rrf': functools.partial(ReCoVR, name='penalty_rrf',
                                     fusion='penalty_rrf'),
    'sim_max': functools.partial(ReCoVR, name='sim_max', fusion='sim_max'),
    'sim_sum': functools.partial(ReCoVR, name='sim_sum', fusion='sim_sum'),
}
