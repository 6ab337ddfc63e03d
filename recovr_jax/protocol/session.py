"""The protocol of a session, written once (DESIGN section 1).

Turn 0 is the shared composed query; each feedback turn is

    stop rule -> user -> method -> ranking core -> question -> record

``feedback_turn`` is that skeleton. Two drivers run it: ``protocol.host``
(text, any reasoner, sessions batched in NumPy between jitted ranking steps)
and ``protocol.jitted`` (one session's turn in JAX, ``lax.scan`` over turns
inside ``vmap`` over sessions). A driver supplies the five operations; the
skeleton fixes their order and the stop rule.
"""

from typing import Protocol


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


class Driver(Protocol):
  """The operations a driver gives the skeleton (host: batches of sessions in
  NumPy; jitted: one session in JAX)."""

  def still_searching(self, carry): ...
  def respond(self, carry, turn, active): ...
  def plan(self, carry, observation, active): ...
  def rank(self, carry, plan, active): ...
  def ask(self, carry, active): ...
  def record(self, carry, observation, plan, active): ...


def feedback_turn(driver: Driver, carry, turn):
  """One feedback turn ``turn`` (>= 1): ``(carry, record)``."""
  active = driver.still_searching(carry)              # the stop rule
  observation = driver.respond(carry, turn, active)   # the user
  carry, plan = driver.plan(carry, observation, active)  # the method
  carry = driver.rank(carry, plan, active)            # the ranking core
  carry = driver.ask(carry, active)                   # shown with the list
  return carry, driver.record(carry, observation, plan, active)
