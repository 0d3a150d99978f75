"""``deadline``: the default queue discipline. Nothing is dropped at dequeue; requests
leave the queue only by dispatch, cancellation, or expiry at their deadline (or at the
queue's ``max_wait_s`` when they have none), which the scheduler enforces for every
discipline."""

from __future__ import annotations

from policies.contracts import Discipline
from policies.params import NoParams


class DeadlineOnly(Discipline[None, NoParams]):
    type_name = "deadline"

    def should_drop(self, state: None, sojourn_s: float, now: float, backlog: int) -> bool:
        return False
