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


def chunks(num_sessions: int, chunk_size: int) -> tuple[int, int]:
  """``(number, size)`` of ``stage``'s chunks of ``num_sessions``: at most
  ``chunk_size`` each, as even as the batch allows."""
  number = -(-num_sessions // chunk_size)
  return number, -(-num_sessions // number)


def stage(fn, stopped_fn, targets, queries, carry, xs, chunk_size):
  """One stage of a turn over a batch: ``fn(query, carry, *x)`` per
  session (``vmap``), ``xs`` a tuple of per-session pytrees ``[S, ...]``.

  ``chunk_size`` None: every session computes it. An int: the sessions
  still searching (``carry.state`` is the ranking state ``searching``
  reads; ``targets [S]``) are sorted to the front and ``vmap``-ed in
  chunks of at most ``chunk_size``, as evenly as the batch allows (100
  sessions: two chunks of 50 for a ``chunk_size`` of 64); a chunk with
  none skips the work (``lax.cond``) for ``stopped_fn(carry, *x)`` per
  session, or zeros of ``fn``'s results when ``stopped_fn`` is None. The
  order depends on ``carry.state`` alone, so the stages of one turn chunk
  the sessions alike. Returns ``fn``'s results ``[S, ...]`` in session
  order."""
  batched = jax.vmap(fn)
  if chunk_size is None:
    return batched(queries, carry, *xs)
  (busy, chunked_queries, chunked), restore = _compacted(
      targets, queries, (carry,) + tuple(xs), chunk_size)
  if stopped_fn is None:
    shapes = jax.eval_shape(lambda: batched(
        chunked_queries[0], *jax.tree.map(lambda x: x[0], chunked)))
    stopped = lambda *_: jax.tree.map(
        lambda a: jnp.zeros(a.shape, a.dtype), shapes)
  else:
    stopped = jax.vmap(stopped_fn)

  def chunk_fn(_, x):
    b, q, args = x
    return None, jax.lax.cond(b, lambda: batched(q, *args),
                              lambda: stopped(*args))

  _, out = jax.lax.scan(chunk_fn, None, (busy, chunked_queries, chunked))
  return restore(out)


def _compacted(targets, queries, per_session, chunk_size: int):
  """``stage``'s chunks: ``((busy [C], queries [C, n], per_session [C, n,
  ...]), restore)``, the searching sessions first (``per_session[0]`` the
  carry, whose ranking state the stop rule reads); ``restore`` takes
  results ``[C, n, ...]`` back to session order ``[S, ...]``."""
  s = queries.shape[0]
  num_chunks, chunk_size = chunks(s, chunk_size)
  pad = num_chunks * chunk_size - s
  active = searching(per_session[0].state, targets)  # the stop rule
  order = jnp.argsort(~active, stable=True)  # searching sessions first
  order = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)])
  chunked = lambda x: x[order].reshape((num_chunks, chunk_size) +
                                       x.shape[1:])
  xs = (jnp.arange(num_chunks) * chunk_size < jnp.sum(active),
        chunked(queries), jax.tree.map(chunked, per_session))
  # Row r of the chunked result is session order[r]; back to session order.
  inverse = jnp.zeros((s,), order.dtype).at[order[:s]].set(
      jnp.arange(s, dtype=order.dtype))
  return xs, lambda out: jax.tree.map(
      lambda y: y.reshape((y.shape[0] * y.shape[1],) + y.shape[2:])[inverse],
      out)
