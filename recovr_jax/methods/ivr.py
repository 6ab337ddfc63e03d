"""IVR, adapted (docs/definitions.md §5): asks a question about the shown top
result every turn (IVR-QA's heuristic question generator); the modification
text and every answer and piece of feedback so far are joined with
``" [SEP] "``, re-encoded and composed with ``v_ref`` each turn; the CoVR
list is shown as retrieved."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import config_pytree
from recovr_jax.core import demotion
from recovr_jax.methods import base
from recovr_jax.protocol import dialogue
from recovr_jax.protocol import plan
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import schemas

SEPARATOR = dialogue.SEPARATOR
# The sigma a single-list method reports, from the user's action (paper
# appendix A.2); only a rank-cap transplant (``rank_cap_transplant``) uses it.
ACTION_SIGMA = {'rewrite': plan.SIGMA['neg'],
                'modify': plan.SIGMA['neu'],
                'answer': plan.SIGMA['neu'],
                'stop': plan.SIGMA['neu']}


def action_sigma(actions):
  return [ACTION_SIGMA[a] for a in actions]


def jax_action_sigma(action):
  """``ACTION_SIGMA`` of a ``simulated_user`` action index (traced)."""
  return jnp.where(action == plan.REWRITE, demotion.SIGMA_NEG,
                   demotion.SIGMA_NEU).astype(jnp.int32)


def single_list_plan(obs, edit_embedding, anchor=None):
  """A jitted single-list plan: ``edit_embedding [D]`` composed with
  ``anchor`` (default ``v_ref``), sigma from the action."""
  none = jnp.full(obs.info.mentions.shape, -1, jnp.int32)
  return plan.JaxPlan(
      search=none, edit=none, use_search=False, use_edit=True,
      sigma=jax_action_sigma(obs.action),
      anchor=obs.reference if anchor is None else anchor,
      avoid=jnp.zeros((none.shape[0], obs.num_values), bool),
      edit_embedding=edit_embedding)


@config_pytree.register
@dataclasses.dataclass(frozen=True)
class JaxForm(plan.JaxForm, plan.JaxAsker):
  """IVR (and UMIVR) in the jitted mode: the dialogue so far (the
  modification text and every utterance, joined with ``SEPARATOR``, as the
  driver's dialogue table encodes it) composed with ``v_ref``.

  ``question``: what the driver asks after each ranking: ``'shown'`` (IVR-QA's
  question about the shown top result, ``caption_questions``) or ``'split'``
  (UMIVR's most informative split of the top ``candidates``, temperature
  ``tau``).
  """
  question: str = 'shown'
  candidates: int = 10
  tau: float = config_pytree.number(base.QUESTION_TAU)
  t2v: bool = False
  covr: bool = True
  needs: tuple[str, ...] = ('dialogues',)

  def init(self, start):
    return {}, jnp.full_like(start.init_search, -1)

  def step(self, state, obs):
    return state, single_list_plan(obs, obs.info.dialogue)

  def jax_question(self, state, shown_ids, shown_scores, asked, reference,
                   memory, active):
    """``'split'``: UMIVR's most informative split of the top
    ``candidates``; ``'shown'``: IVR-QA's question about the shown top
    result (``jax_caption_question``). Returns ``(attribute the user reads
    in it or -1, 1 when asked)``."""
    del state
    if self.question == 'split':
      k = self.candidates
      ids, scores = shown_ids[:k], shown_scores[:k]
      values = jnp.where(ids[:, None] >= 0,
                         memory.caption_attrs[jnp.maximum(ids, 0)], -1)
      h = asking.expected_split_entropy(
          jnp.where(ids >= 0, scores, -jnp.inf).astype(jnp.float32),
          values.T, self.tau)
      question = memory.asked_plain[jnp.argmin(h)]
    else:
      question = jax_caption_question(
          memory, shown_ids[0] if self.question == 'shown' else reference,
          asked)
    return (jnp.where(active, question, -1).astype(jnp.int32),
            active.astype(jnp.int32))


def nth_stated(values, asked):
  """IVR-QA's rule for what to ask about a caption: the ``asked % n``-th of
  the ``n`` attributes it states (``values [A]``, ``-1`` where it states
  none), or ``-1`` when it states none. The host's ``caption_questions``
  and the jitted ``jax_caption_question`` both ask through it."""
  values = jnp.asarray(values)
  if values.shape[-1] == 0:  # free text (real data): no attributes at all
    return jnp.asarray(-1, jnp.int32)
  stated = values >= 0
  count = jnp.sum(stated)
  nth = jnp.asarray(asked) % jnp.maximum(count, 1)
  a = jnp.argmax(stated & (jnp.cumsum(stated) == nth + 1))
  return jnp.where(count > 0, a, -1).astype(jnp.int32)


_nth_stated_rows = jax.jit(jax.vmap(nth_stated))


def jax_caption_question(memory, video, asked):
  """IVR-QA's question about ``video``'s caption (``nth_stated``), as the
  attribute the user reads in it: about that attribute, saying its value,
  or the open question when the caption states none."""
  values = memory.caption_attrs[video]
  a = nth_stated(values, asked)
  safe = jnp.maximum(a, 0)
  return jnp.where(a >= 0,
                   memory.asked_with_value[safe, jnp.maximum(values[safe], 0)],
                   memory.asked_open)


def caption_questions(ctx, videos, asked):
  """IVR-QA's heuristic questions: about the attribute ``nth_stated`` picks
  from the caption of each video in ``videos [B]``, saying what it shows
  (``asked [B]``: questions asked so far, so each turn moves to the next
  attribute). A caption that states no attribute (or free text, where none
  apply) gets the reasoner's open question."""
  values = ctx.reasoner.caption_values(ctx.captions)
  videos = np.asarray(videos)
  if not len(videos):
    return []
  picked = np.asarray(_nth_stated_rows(values[np.maximum(videos, 0)],
                                       np.asarray(asked, np.int32)))
  out = []
  for g, a in zip(videos, picked):
    if g < 0 or a < 0:
      out.append(ctx.reasoner.question([schemas.QuestionRequest(
          (ctx.captions[g],) if g >= 0 else (), schemas.SessionMemory())
                                         ])[0]['question'])
      continue
    out.append(ctx.reasoner.attribute_question(int(a), int(values[g, a])))
  return out


class IVR(base.Method):
  """The dialogue so far as one query text, composed with ``v_ref``."""

  name = 'ivr'
  asks_every_turn = True
  joins_dialogue = True  # its query text is the dialogue (``dialogue.fit``)

  def __init__(self, settings: base.Settings = base.Settings()):
    super().__init__(settings)
    self.jax_form = JaxForm(question='shown')

  def init(self, ctx, start):
    del ctx
    s, _ = start.covr_query.shape
    state = {'reference': start.reference,
             'texts': [[m] for m in start.modification]}
    return state, plan.covr_plan(start.covr_query,
                                     [plan.SIGMA['neu']] * s)

  def step(self, ctx, state, obs):
    texts = list(state['texts'])
    for i, f in zip(obs.sessions, obs.feedback):
      texts[i] = texts[i] + [f]
    joined = [SEPARATOR.join(texts[i]) for i in obs.sessions]
    queries = plan.anchored(ctx.gallery, ctx.compose,
                                state['reference'][obs.sessions],
                                ctx.encode_text(joined))
    return dict(state, texts=texts), plan.covr_plan(
        queries, action_sigma(obs.action))

  def question(self, ctx, state, shown):
    """About the shown top result."""
    return caption_questions(ctx, shown.ids[:, 0], shown.asked)
