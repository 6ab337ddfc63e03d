"""Rank-cap: demoting rejected and stagnant candidates (docs/definitions.md §3).

The definition's rule gives a demoted id found at 1-based position ``p < cap``
the sort key ``cap + 0.5``, keeps key ``p`` for every other entry and sorts
stably. Read to the letter, that rule breaks the definition's own promise that
"a rejected top-1 is never shown again as top-1 while any other candidate
exists": with ``kappa_pos = 2``, a just-rejected top-1 that sits at position
2 (because another demoted id was ahead of it) keeps key 2 and rises back to
position 1 once the id ahead moves behind it. The rule implemented here is the
one that keeps the promise and agrees with the definition's wherever demotions
do not interact (in particular, a single demoted id lands exactly at its cap):

  Entries that are not demoted keep their order. A demoted id (an id of the
  demotion set found in the list, wherever it is) is placed after
  ``max(q, cap - 1)`` of them, where ``q`` is the number of non-demoted
  entries ahead of it originally, clipped to how many there are; demoted ids
  placed after the same number keep their original order. Padding stays at
  the end.

So a demoted id never gains ground on a non-demoted one, and it ends at
position ``>= cap`` whenever the list has ``cap - 1`` non-demoted entries.
Positions are counted, not sorted: ``O(K * M)`` work, no sort, no scatter.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import checks

SIGMA_NEG, SIGMA_NEU, SIGMA_POS = 0, 1, 2
SIGMAS = ('neg', 'neu', 'pos')
DEFAULT_KAPPA = (11, 4, 2)  # (kappa_neg, kappa_neu, kappa_pos), paper values


def rank_cap(ids, scores, demote_ids, caps):
  """Demotes each listed id to its cap (1-based) or below in one list.

  See the module docstring for the exact rule and how it differs from
  the definition's sort keys when demotions interact.

  Args:
    ids: ``[K]`` integer gallery ids, best first, each at most once, ``-1``
      padding at the end.
    scores: ``[K]`` float scores; they move with their ids.
    demote_ids: ``[M]`` integer ids to demote; ``-1`` entries are ignored.
    caps: ``[M]`` integer caps (1-based positions); an id listed twice uses
      its larger cap.

  Returns:
    ``(ids, scores)``, ``[K]`` int32 and ``[K]`` float32, reordered.
  """
  ids = checks.array('ids', ids, 1, 'int')
  scores = checks.array('scores', scores, 1, 'float')
  demote_ids = checks.array('demote_ids', demote_ids, 1, 'int')
  caps = checks.array('caps', caps, 1, 'int')
  checks.shape('scores', scores, ids.shape)
  checks.shape('caps', caps, demote_ids.shape)
  checks.no_nan('scores', scores)
  checks.gallery_ids('ids', ids)
  checks.gallery_ids('demote_ids', demote_ids)
  checks.unique_ids_per_list('ids', ids)
  checks.padding_at_end('ids', ids)
  if checks.is_concrete(caps) and caps.size and np.min(np.asarray(caps)) < 1:
    raise ValueError(f'caps must be >= 1 (1-based positions), got '
                     f'{np.asarray(caps).tolist()}')
  return _rank_cap(ids, scores, demote_ids, caps)


@jax.jit
def _rank_cap(ids, scores, demote_ids, caps):
  source = rank_cap_sources(ids, demote_ids, caps)
  # A gather: XLA's CPU scatter is several times slower for this.
  return ids.astype(jnp.int32)[source], scores.astype(jnp.float32)[source]


def rank_cap_sources(ids, demote_ids, caps):
  """For each position of the rank-capped list, where its entry was before.

  Everything is counted over the ``M`` demotion entries: ``O(K * M)``, with
  no sort, no scatter and no cumulative sum (XLA's CPU sort and scatter are
  slow, and it lowers cumulative sums to windowed reductions).

  Args:
    ids: ``[K]`` integer ids, ``-1`` padding at the end; each id at most once.
    demote_ids: ``[M]`` integer ids, ``-1`` ignored.
    caps: ``[M]`` integer caps (1-based positions).

  Returns:
    ``[K]`` int32 source indices: a permutation of ``0..K-1``.
  """
  k, = ids.shape
  m, = demote_ids.shape
  ids = ids.astype(jnp.int32)
  demote_ids = demote_ids.astype(jnp.int32)
  caps = caps.astype(jnp.int32)
  n_valid = jnp.sum(ids >= 0, dtype=jnp.int32)

  # One representative per demoted id: its largest cap, first such entry.
  same_id = demote_ids[:, None] == demote_ids[None, :]  # [M, M]
  earlier = jnp.arange(m)[None, :] < jnp.arange(m)[:, None]  # [i, j]: j < i
  beaten = same_id & ((caps[None, :] > caps[:, None]) | (
      (caps[None, :] == caps[:, None]) & earlier))
  representative = (demote_ids >= 0) & ~jnp.any(beaten, axis=1)

  match = ids[:, None] == demote_ids[None, :]  # [K, M]
  slot = jnp.arange(k, dtype=jnp.int32)  # 0-based positions
  m_pos = jnp.sum(jnp.where(match, slot[:, None], 0), axis=0)  # [M]
  active = representative & jnp.any(match, axis=0)  # demoted ids in the list
  n_demoted = jnp.sum(active, dtype=jnp.int32)
  n_kept = n_valid - n_demoted  # non-demoted valid entries

  def count(pred):  # [X, M] -> [X]: active demotions satisfying pred
    return jnp.sum(active[None, :] & pred, axis=1, dtype=jnp.int32)

  # Each demoted id follows `need` non-demoted entries.
  ahead = m_pos - count(m_pos[None, :] < m_pos[:, None])  # q, per entry
  need = jnp.minimum(jnp.maximum(ahead, caps - 1), n_kept)  # [M]
  before = (need[None, :] < need[:, None]) | (
      (need[None, :] == need[:, None]) & (m_pos[None, :] < m_pos[:, None]))
  m_new = need + count(before)  # [M] final 0-based positions

  # Slot j holds the demoted id that lands there, if any; otherwise the s-th
  # non-demoted entry, s = j - (demoted ids landing before j), whose old
  # position p solves p = s + (demoted ids at old positions <= p).
  lands = active[None, :] & (m_new[None, :] == slot[:, None])  # [K, M]
  from_demoted = jnp.sum(jnp.where(lands, m_pos[None, :], 0), axis=1)
  s = slot - count(m_new[None, :] < slot[:, None])

  def step(_, p):
    return s + count(m_pos[None, :] <= p[:, None])

  from_kept = jax.lax.fori_loop(0, m, step, s)
  return jnp.where(jnp.any(lands, axis=1), from_demoted,
                   jnp.where(slot < n_valid, from_kept, slot)).astype(
                       jnp.int32)


def demotion_set(top1_history, turn, sigma, *, kappa=DEFAULT_KAPPA,
                 window=None):
  """The demotion set at turn ``t >= 1`` (docs/definitions.md §3).

  The top-1 shown before this turn (``top1_history[turn - 1]``, just rejected)
  gets cap ``kappa[sigma]``; every earlier displayed top-1 gets
  ``kappa_neu`` (stagnation). At turn 0 the set is empty.

  Args:
    top1_history: ``[H]`` integer displayed top-1 ids by turn (``H >= turn``),
      ``-1`` where nothing was shown.
    turn: integer scalar, the current turn ``t``.
    sigma: integer scalar, ``SIGMA_NEG`` (0), ``SIGMA_NEU`` (1) or
      ``SIGMA_POS`` (2), from the State Reflector.
    kappa: ``(kappa_neg, kappa_neu, kappa_pos)`` caps, or a ``[3]`` array.
    window: ``None`` (every earlier top-1 of the session, as
      docs/definitions.md says) or an int ``>= 1``: only top-1s displayed in
      the last ``window`` turns.

  Returns:
    ``(demote_ids, caps)``: ``[H]`` int32 each, ``-1`` / ``0`` where unused.
  """
  top1_history = checks.array('top1_history', top1_history, 1, 'int')
  if window is not None:
    window = checks.positive_int('window', window)
  kappa = jnp.asarray(kappa)
  checks.shape('kappa', kappa, (3,))
  if checks.is_concrete(kappa) and np.min(np.asarray(kappa)) < 1:
    raise ValueError(f'kappa must be >= 1, got {np.asarray(kappa).tolist()}')
  if checks.is_concrete(sigma) and int(sigma) not in (0, 1, 2):
    raise ValueError(f'unknown sigma {sigma!r}; valid choices: 0 (neg), '
                     '1 (neu), 2 (pos)')
  return _demotion_set(top1_history, jnp.asarray(turn), jnp.asarray(sigma),
                       kappa, window=window)


@functools.partial(jax.jit, static_argnames=('window',))
def _demotion_set(top1_history, turn, sigma, kappa, *, window):
  h, = top1_history.shape
  age = turn - 1 - jnp.arange(h)  # 0: shown just before this turn
  shown = (age >= 0) & (top1_history >= 0)
  if window is not None:
    shown = shown & (age < window)
  kappa = kappa.astype(jnp.int32)
  caps = jnp.where(age == 0, kappa[sigma], kappa[SIGMA_NEU])
  return (jnp.where(shown, top1_history, -1).astype(jnp.int32),
          jnp.where(shown, caps, 0).astype(jnp.int32))
