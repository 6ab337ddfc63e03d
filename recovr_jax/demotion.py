"""Rank-cap: demoting rejected and stagnant candidates (DESIGN section 3).

``rank_cap`` gives a demoted id found at 1-based position ``p < cap`` the sort
key ``cap + 0.5``, keeps key ``p`` for every other entry and moves padding to
the end; the new order is the stable sort by key. Instead of sorting, the new
position of each entry is counted directly: only the (at most ``M``) demoted
entries move, so counting costs ``O(K * M)`` and avoids XLA's slow CPU sort.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import _checks

SIGMA_NEG, SIGMA_NEU, SIGMA_POS = 0, 1, 2
SIGMAS = ('neg', 'neu', 'pos')
DEFAULT_KAPPA = (11, 4, 2)  # (kappa_neg, kappa_neu, kappa_pos), paper values


def rank_cap(ids, scores, demote_ids, caps):
  """Demotes each listed id to at most its cap (1-based) in one ranked list.

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
  ids = _checks.array('ids', ids, 1, 'int')
  scores = _checks.array('scores', scores, 1, 'float')
  demote_ids = _checks.array('demote_ids', demote_ids, 1, 'int')
  caps = _checks.array('caps', caps, 1, 'int')
  _checks.shape('scores', scores, ids.shape)
  _checks.shape('caps', caps, demote_ids.shape)
  _checks.unique_ids_per_list('ids', ids)
  _checks.padding_at_end('ids', ids)
  if _checks.is_concrete(caps) and caps.size and np.min(np.asarray(caps)) < 1:
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

  Only the (at most ``M``) demoted entries move, so everything is counted
  over the demotion entries: ``O(K * M)``, with no sort, no scatter and no
  cumulative sum (XLA's CPU sort and scatter are slow, and it lowers
  cumulative sums to windowed reductions).

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
  slot = jnp.arange(k, dtype=jnp.int32)  # 0-based
  m_pos = jnp.sum(jnp.where(match, slot[:, None], 0), axis=0)  # [M] 0-based
  # A demoted entry at 1-based position p < cap moves (key cap + 0.5).
  active = representative & jnp.any(match, axis=0) & (m_pos + 1 < caps)

  # New 0-based position of each moving entry: after the stays at 1-based
  # positions <= cap, and after moving entries with smaller keys (equal keys
  # keep their old order).
  c = jnp.minimum(caps, n_valid)
  stays_upto = c - jnp.sum(active[None, :] & (m_pos[None, :] < c[:, None]),
                           axis=1, dtype=jnp.int32)
  ahead = active[None, :] & ((caps[None, :] < caps[:, None]) | (
      (caps[None, :] == caps[:, None]) & (m_pos[None, :] < m_pos[:, None])))
  m_new = stays_upto + jnp.sum(ahead, axis=1, dtype=jnp.int32)  # [M]

  # Slot j holds a moving entry if one lands there; otherwise the s-th
  # staying entry, s = j - (moving entries landing before j), whose old
  # position p solves p = s + (moving entries at old positions <= p).
  lands = active[None, :] & (m_new[None, :] == slot[:, None])  # [K, M]
  from_moved = jnp.sum(jnp.where(lands, m_pos[None, :], 0), axis=1)
  s = slot - jnp.sum(active[None, :] & (m_new[None, :] < slot[:, None]),
                     axis=1, dtype=jnp.int32)

  def step(_, p):
    return s + jnp.sum(active[None, :] & (m_pos[None, :] <= p[:, None]),
                       axis=1, dtype=jnp.int32)

  from_stays = jax.lax.fori_loop(0, m, step, s)
  return jnp.where(jnp.any(lands, axis=1), from_moved,
                   jnp.where(slot < n_valid, from_stays, slot)).astype(
                       jnp.int32)


def demotion_set(top1_history, turn, sigma, *, kappa=DEFAULT_KAPPA,
                 window=None):
  """The demotion set at turn ``t >= 1`` (DESIGN section 3).

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
    window: ``None`` (every earlier top-1 of the session, as DESIGN says) or an
      int ``>= 1``: only top-1s displayed in the last ``window`` turns.

  Returns:
    ``(demote_ids, caps)``: ``[H]`` int32 each, ``-1`` / ``0`` where unused.
  """
  top1_history = _checks.array('top1_history', top1_history, 1, 'int')
  if window is not None:
    window = _checks.positive_int('window', window)
  kappa = jnp.asarray(kappa)
  _checks.shape('kappa', kappa, (3,))
  if _checks.is_concrete(kappa) and np.min(np.asarray(kappa)) < 1:
    raise ValueError(f'kappa must be >= 1, got {np.asarray(kappa).tolist()}')
  if _checks.is_concrete(sigma) and int(sigma) not in (0, 1, 2):
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
