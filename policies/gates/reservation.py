"""``wait_reservation``: keep the gateway queue short by moving the excess wait into an
exact, reserved Retry-After (docs/seed-table.md, "Beyond the seed").

In a closed loop that keeps goodput, the mean wait is fixed (Little's law); admission can
only move it between the queue and the clients' backoff. Blunt shedding (a fixed cap, CoDel)
loses the shed turn's place, so its retries pile up a long tail. Here a turn whose
predicted queue wait exceeds ``target_wait_s`` is rejected with a Retry-After equal to the
time until it *would* fit, and that place is reserved for its session (``X-Session-Id``):
reserved work counts as work ahead of every later arrival, and the holder is let in when
it comes back. The queue then holds about ``target_wait_s`` of work, and the total wait
each agent feels stays what a FCFS queue would give it.

Predicted wait = (queued tokens + reserved tokens) / measured drain rate (tokens per second
of busy time), and only for a request that finds no room now. With room, the fleet is below
its limit and the busy drain is the demand, not what a queue drains at: by Little's law
reserved tokens over the demand stay near the time they are held, so each refusal would
predict the next one's wait, reserve more, and the appointments would grow to the
Retry-After cap on a fleet with room to spare. No evidence never rejects: without a drain
rate, a session, or with room now, the gate says yes. A reservation not claimed within
``grace_s`` of its time lapses. ``check`` only answers; ``commit`` records the reservation
(or moves its time) when the refusal is enforced. A shadow gate's "no" reaches no client, so
it reserves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.contracts import Gate, GateContext, Verdict
from policies.gates.reservation_params import ReservationParams
from policies.types import Reason, RequestInfo


@dataclass(slots=True)
class Reservation:
    due: float
    tokens: int

    def lapsed(self, now: float, grace_s: float) -> bool:
        """Unclaimed for longer than ``grace_s`` after its time."""
        return self.due + grace_s < now


@dataclass
class ReservationState:
    held: dict[str, Reservation] = field(default_factory=dict)

    def reserved_tokens(self, now: float, grace_s: float) -> int:
        """Tokens held by reservations that have not lapsed at ``now`` (read only)."""
        return sum(r.tokens for r in self.held.values() if not r.lapsed(now, grace_s))

    def forget_lapsed(self, now: float, grace_s: float) -> None:
        lapsed = [s for s, r in self.held.items() if r.lapsed(now, grace_s)]
        for session in lapsed:
            del self.held[session]


class WaitReservation(Gate[ReservationState, ReservationParams]):
    type_name = "wait_reservation"
    params_model = ReservationParams

    state_model = ReservationState

    def check(self, state: ReservationState, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        p, session = self.params, req.session_id
        mine = self._live_reservation(state, session, ctx.now)
        if mine is not None:
            late_s = self._queue_s(ctx) - p.target_wait_s
            if ctx.now >= mine.due and late_s <= 0:
                return None  # the promise is kept; on_accept consumes it
            # early, or the queue drained slower than predicted: keep the place, move the time
            return Verdict(Reason.OVERLOADED, max(mine.due, ctx.now + late_s) - ctx.now)
        rate = ctx.drain_tokens_per_s
        if session is None or rate is None or rate <= 0 or ctx.room_now:
            return None  # with room now it goes straight in: no wait, whatever is reserved
        reserved = state.reserved_tokens(ctx.now, p.grace_s)
        wait_s = (ctx.queued_tokens + reserved) / rate
        if wait_s <= p.target_wait_s:
            return None
        return Verdict(Reason.OVERLOADED, wait_s - p.target_wait_s)

    def commit(
        self,
        state: ReservationState,
        req: RequestInfo,
        ctx: GateContext,
        verdict: Verdict | None,
        shadow: bool,
    ) -> None:
        """An enforced refusal is an appointment: hold the place until ``retry_after_s``."""
        if verdict is None or shadow or req.session_id is None:
            return  # nothing to hold; every reader already skips lapsed reservations
        state.forget_lapsed(ctx.now, self.params.grace_s)  # held only grows here
        after_s = verdict.retry_after_s or 0.0
        mine = state.held.get(req.session_id)
        if mine is not None:
            mine.due = ctx.now + after_s
        else:
            state.held[req.session_id] = Reservation(ctx.now + after_s, req.estimate.computed_total)

    def _live_reservation(
        self, state: ReservationState, session: str | None, now: float
    ) -> Reservation | None:
        mine = state.held.get(session) if session is not None else None
        if mine is None or mine.lapsed(now, self.params.grace_s):
            return None
        return mine

    @staticmethod
    def _queue_s(ctx: GateContext) -> float:
        """Seconds of work already in the real queue (0 without a measured drain rate)."""
        rate = ctx.drain_tokens_per_s
        return 0.0 if rate is None or rate <= 0 else ctx.queued_tokens / rate

    def on_accept(self, state: ReservationState, req: RequestInfo, now: float) -> None:
        if req.session_id is not None:
            state.held.pop(req.session_id, None)
