"""``wait_reservation``: keep the gateway queue short by moving the excess wait into an
exact, reserved Retry-After (seed 000, "beyond the seed").

In a closed loop that keeps goodput, the mean wait is fixed (Little's law); admission can
only move it between the queue and the clients' backoff. Blunt shedding (a fixed cap, CoDel)
loses the shed turn's place, so its retries pile up a long tail. Here a turn whose
predicted queue wait exceeds ``target_wait_s`` is rejected with a Retry-After equal to the
time until it *would* fit, and that place is reserved for its session (``X-Session-Id``):
reserved work counts as work ahead of every later arrival, and the holder is let in when
it comes back. The queue then holds about ``target_wait_s`` of work, and the total wait
each agent feels stays what a FCFS queue would give it.

Predicted wait = (queued tokens + reserved tokens) / measured drain rate (tokens per second
of busy time). No evidence never rejects: without a drain rate, a session, or with room
now, the gate says yes. A reservation not claimed within ``grace_s`` of its time lapses.
``check`` records the reservation when it says no: the promise is the point of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from policies.contracts import Gate, GateContext, Params, Verdict
from policies.types import Reason, RequestInfo


class ReservationParams(Params):
    target_wait_s: float = Field(default=10.0, gt=0)
    """The queue wait the gateway aims to hold, in seconds."""
    grace_s: float = Field(default=30.0, gt=0)
    """How long after its time an unclaimed reservation is kept, in seconds."""


@dataclass(slots=True)
class Reservation:
    due: float
    tokens: int


@dataclass
class ReservationState:
    held: dict[str, Reservation] = field(default_factory=dict)

    def reserved_tokens(self, now: float, grace_s: float) -> int:
        lapsed = [s for s, r in self.held.items() if r.due + grace_s < now]
        for session in lapsed:
            del self.held[session]
        return sum(r.tokens for r in self.held.values())


class WaitReservation(Gate[ReservationState, ReservationParams]):
    type_name = "wait_reservation"
    params_model = ReservationParams

    def new_state(self) -> ReservationState:
        return ReservationState()

    def check(self, state: ReservationState, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        p, session = self.params, req.session_id
        reserved = state.reserved_tokens(ctx.now, p.grace_s)
        mine = state.held.get(session) if session is not None else None
        rate = ctx.drain_tokens_per_s
        if mine is not None:
            late_s = self._queue_s(ctx) - p.target_wait_s
            if ctx.now >= mine.due and late_s <= 0:
                return None  # the promise is kept; on_accept consumes it
            # early, or the queue drained slower than predicted: keep the place, move the time
            mine.due = max(mine.due, ctx.now + late_s)
            return Verdict(Reason.OVERLOADED, mine.due - ctx.now)
        if session is None or rate is None or rate <= 0:
            return None
        wait_s = (ctx.queued_tokens + reserved) / rate
        if wait_s <= p.target_wait_s:
            return None
        after_s = wait_s - p.target_wait_s
        state.held[session] = Reservation(ctx.now + after_s, req.estimate.total)
        return Verdict(Reason.OVERLOADED, after_s)

    @staticmethod
    def _queue_s(ctx: GateContext) -> float:
        """Seconds of work already in the real queue (0 without a measured drain rate)."""
        rate = ctx.drain_tokens_per_s
        return 0.0 if rate is None or rate <= 0 else ctx.queued_tokens / rate

    def on_accept(self, state: ReservationState, req: RequestInfo, now: float) -> None:
        if req.session_id is not None:
            state.held.pop(req.session_id, None)
