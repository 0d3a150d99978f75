"""How the unit tests end a dispatched call: the ``Ending`` that ``Scheduler.release`` takes."""

from __future__ import annotations

from policies.types import Ending, Outcome, Usage


def used(prompt: int, completion: int, outcome: Outcome = Outcome.COMPLETED) -> Ending:
    """The call ended with these tokens reported by the backend, and no times."""
    return Ending(outcome, Usage(prompt, completion))
