"""The protocol of a session, written once (docs/definitions.md §1).

Turn 0 is the shared composed query; each feedback turn is

    stop rule -> user -> method -> ranking core -> question -> record

``feedback_turn`` is that skeleton. Two loops run it: ``drivers.host_driver``'s
(text, any reasoner, sessions batched in NumPy between jitted ranking steps)
and ``drivers.jit_loop``'s (one session's turn in JAX, ``vmap``-ped over
sessions). A loop supplies the operations (``TurnLoop``); the skeleton fixes
their order and the stop rule.
"""

from typing import Protocol

import jax
import jax.numpy as jnp


def found(shown_ids, target):
  """The stop rule: the user stops when the displayed top-1 is the target.

  Args:
    shown_ids: ``[..., K]`` int displayed lists.
    target: ``[...]`` int target gallery ids.

  Returns:
    ``[...]`` bool.
  """
  return shown_ids[..., 0] == target


def searching(ranking_state, target):
  """Sessions still searching before a feedback turn: not stopped earlier and
  not shown their target by the last turn."""
  return ~(ranking_state.stopped | found(ranking_state.shown_ids, target))


class TurnLoop(Protocol):
  """The operations a loop gives the skeleton (host: batches of sessions in
  NumPy; jitted: one session in JAX)."""

  def still_searching(self, carry): ...
  def respond(self, carry, turn, active): ...
  def plan(self, carry, observation, active): ...
  def rank(self, carry, plan, active): ...
  def ask(self, carry, active): ...
  def record(self, carry, observation, plan, active): ...


def feedback_turn(turn_loop: TurnLoop, carry, turn):
  """One feedback turn ``turn`` (>= 1): ``(carry, record)``."""
  return show(turn_loop, *decide(turn_loop, carry, turn))


def decide(turn_loop: TurnLoop, carry, turn):
  """``feedback_turn``'s first half, what is decided before the ranking:
  ``(carry, observation, plan, active)``."""
  active = turn_loop.still_searching(carry)              # the stop rule
  observation = turn_loop.respond(carry, turn, active)   # the user
  carry, plan = turn_loop.plan(carry, observation, active)  # the method
  return carry, observation, plan, active


def show(turn_loop: TurnLoop, carry, observation, plan, active):
  """Its second half, from ``decide``'s results: ``(carry, record)``."""
  carry = turn_loop.rank(carry, plan, active)            # the ranking core
  carry = turn_loop.ask(carry, active)                   # shown with the list
  return carry, turn_loop.record(carry, observation, plan, active)


def plain_turns(turn_fn, queries, carry, turns):
  """Every session runs every turn: ``lax.scan`` over ``turns`` inside
  ``vmap`` over sessions; ``turn_fn(query, carry, turn) -> (carry, out)``
  is one session's turn. Returns ``(carry, outs [S, T, ...])``."""
  def one(query, carry):
    return jax.lax.scan(lambda c, t: turn_fn(query, c, t), carry, turns)
  return jax.vmap(one)(queries, carry)


def plain_turn(turn_fn, queries, carry, turn):
  """One turn of ``plain_turns``: ``(carry, outs [S, ...])``."""
  return jax.vmap(lambda q, c: turn_fn(q, c, turn))(queries, carry)


def chunks(num_sessions: int, chunk_size: int) -> tuple[int, int]:
  """``(number, size)`` of ``compact_turn``'s chunks of ``num_sessions``:
  at most ``chunk_size`` each, as even as the batch allows."""
  number = -(-num_sessions // chunk_size)
  return number, -(-num_sessions // number)


def compact_turns(turn_fn, stopped_fn, targets, queries, carry, turns,
                  chunk_size: int):
  """``plain_turns``'s results with work only for the sessions still
  searching: ``lax.scan`` over turns of ``compact_turn``. Returns
  ``(carry, outs [S, T, ...])``."""
  def turn_step(carry, turn):
    return compact_turn(turn_fn, stopped_fn, targets, queries, carry, turn,
                        chunk_size)

  carry, outs = jax.lax.scan(turn_step, carry, turns)
  # [T, S, ...] -> [S, T, ...] as ``plain_turns`` returns them.
  return carry, jax.tree.map(lambda y: jnp.swapaxes(y, 0, 1), outs)


def compact_turn(turn_fn, stopped_fn, targets, queries, carry, turn,
                 chunk_size: int):
  """One turn of ``plain_turn``'s results with work only for the sessions
  still searching: it sorts them to the front and runs ``vmap``-ed chunks
  of them, skipping (``lax.cond``) chunks with none, where
  ``stopped_fn(carry) -> (carry, out)`` only carries a stopped session
  forward. The chunks hold at most ``chunk_size`` sessions, as evenly as
  the batch allows (100 sessions: two chunks of 50 for a ``chunk_size`` of
  64), so little of a chunk is padding. ``carry.state`` is the ranking
  state ``searching`` reads; ``targets [S]``. Returns ``(carry, outs [S,
  ...])``."""
  xs, restore = _compacted(targets, queries, carry, chunk_size)
  batched_turn = jax.vmap(turn_fn, in_axes=(0, 0, None))
  batched_stop = jax.vmap(stopped_fn)

  def chunk_fn(_, x):
    busy, q, c = x
    return None, jax.lax.cond(busy, lambda: batched_turn(q, c, turn),
                              lambda: batched_stop(c))

  _, out = jax.lax.scan(chunk_fn, None, xs)
  return restore(out)


def halves_turn(first_fn, second_fn, between, queries, carry, turn):
  """``plain_turn`` of a turn in two halves with a test of the whole batch
  between them: ``first_fn(query, carry, turn) -> (mid, ok)`` per session,
  ``flag = between(ok [S])`` (a scalar), then ``second_fn(query, mid, flag)
  -> (carry, out)``. Returns ``(carry, outs [S, ...], flag)``."""
  mids, ok = jax.vmap(first_fn, in_axes=(0, 0, None))(queries, carry, turn)
  flag = between(ok)
  return (*jax.vmap(second_fn, in_axes=(0, 0, None))(queries, mids, flag),
          flag)


def compact_halves_turn(first_fn, second_fn, between, stopped_fn, targets,
                        queries, carry, turn, chunk_size: int):
  """``halves_turn`` with ``compact_turn``'s chunks: each half runs on the
  chunks holding searching sessions; ``between`` reads ``ok`` of every
  session (True for a stopped one). Returns ``(carry, outs [S, ...],
  flag)``."""
  xs, restore = _compacted(targets, queries, carry, chunk_size)
  busy, chunked_queries, chunked_carry = xs
  batched_first = jax.vmap(first_fn, in_axes=(0, 0, None))
  shapes = jax.eval_shape(
      lambda: batched_first(chunked_queries[0],
                            jax.tree.map(lambda x: x[0], chunked_carry),
                            turn))
  nothing = lambda: jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                                 shapes)
  _, (mids, ok) = jax.lax.scan(
      lambda _, x: (None, jax.lax.cond(
          x[0], lambda: batched_first(x[1], x[2], turn), nothing)),
      None, xs)
  flag = between(ok | ~busy[:, None])
  batched_second = jax.vmap(second_fn, in_axes=(0, 0, None))
  batched_stop = jax.vmap(stopped_fn)

  def chunk_fn(_, x):
    b, q, c, mid = x
    return None, jax.lax.cond(b, lambda: batched_second(q, mid, flag),
                              lambda: batched_stop(c))

  _, out = jax.lax.scan(chunk_fn, None, xs + (mids,))
  return (*restore(out), flag)


def _compacted(targets, queries, carry, chunk_size: int):
  """``compact_turn``'s chunks: ``((busy [C], queries [C, n], carry [C,
  n, ...]), restore)``, the searching sessions first; ``restore`` takes
  results ``[C, n, ...]`` back to session order ``[S, ...]``."""
  s = queries.shape[0]
  num_chunks, chunk_size = chunks(s, chunk_size)
  pad = num_chunks * chunk_size - s
  active = searching(carry.state, targets)  # the stop rule
  order = jnp.argsort(~active, stable=True)  # searching sessions first
  order = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)])
  chunked = lambda x: x[order].reshape((num_chunks, chunk_size) +
                                       x.shape[1:])
  xs = (jnp.arange(num_chunks) * chunk_size < jnp.sum(active),
        chunked(queries), jax.tree.map(chunked, carry))
  # Row r of the chunked result is session order[r]; back to session order.
  inverse = jnp.zeros((s,), order.dtype).at[order[:s]].set(
      jnp.arange(s, dtype=order.dtype))
  return xs, lambda out: jax.tree.map(
      lambda y: y.reshape((-1,) + y.shape[2:])[inverse], out)
