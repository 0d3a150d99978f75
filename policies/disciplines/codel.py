"""``codel``: CoDel (RFC 8289) on the gateway queue's sojourn time.

Faithful to the RFC's pseudocode, with "dequeue" meaning a queued request leaving for a
backend and "drop" meaning REJECT OVERLOADED. A request is ok-to-drop once the sojourn
stayed at or above ``target_s`` for ``interval_s`` (reset when it dips below target, or the
queue holds at most this one request). Entering the dropping state drops one and schedules
the next drop at ``now + interval / sqrt(count)``; each further drop advances ``drop_next``
by the control law; a dequeue that is not ok-to-drop leaves the dropping state. On
re-entry soon after (within 16 intervals), ``count`` resumes from the drops of the last
cycle (``count - lastcount``), as in the RFC. An empty queue resets ``first_above_time``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.contracts import Discipline
from policies.disciplines.codel_params import CodelParams


@dataclass
class CodelState:
    first_above_time: float = 0.0
    drop_next: float = 0.0
    count: int = 0
    lastcount: int = 0
    dropping: bool = False
    advance_pending: bool = False
    """A drop happened; the RFC advances ``drop_next`` only if the next one is ok-to-drop."""


class Codel(Discipline[CodelState, CodelParams]):
    type_name = "codel"
    params_model = CodelParams

    state_model = CodelState

    def on_empty(self, state: CodelState) -> None:
        state.first_above_time = 0.0
        state.dropping = False
        state.advance_pending = False

    def should_drop(self, state: CodelState, sojourn_s: float, now: float, backlog: int) -> bool:
        ok_to_drop = self._ok_to_drop(state, sojourn_s, now, backlog)
        if state.dropping:
            if not ok_to_drop:
                state.dropping = state.advance_pending = False
                return False
            if state.advance_pending:
                state.drop_next = self._control_law(state.drop_next, state.count)
                state.advance_pending = False
            if now >= state.drop_next:
                state.count += 1
                state.advance_pending = True
                return True
            return False
        if ok_to_drop:
            state.dropping = True
            delta = state.count - state.lastcount
            state.count = 1
            if delta > 1 and now - state.drop_next < 16 * self.params.interval_s:
                state.count = delta
            state.drop_next = self._control_law(now, state.count)
            state.lastcount = state.count
            return True
        return False

    def _ok_to_drop(self, state: CodelState, sojourn_s: float, now: float, backlog: int) -> bool:
        if sojourn_s < self.params.target_s or backlog <= 0:
            state.first_above_time = 0.0
            return False
        if state.first_above_time == 0.0:
            state.first_above_time = now + self.params.interval_s
            return False
        return now >= state.first_above_time

    def _control_law(self, t: float, count: int) -> float:
        return t + self.params.interval_s / math.sqrt(count)
