"""The reservation gate that the beyond-the-seed preset uses (policies/gates/reservation.py)."""

from __future__ import annotations

import pytest

from policies.backends import BackendsSnapshot
from policies.contracts import GateContext, Verdict
from policies.engine.scheduler import Scheduler, Ticket
from policies.gates.reservation import ReservationState, WaitReservation
from policies.gates.reservation_params import ReservationParams
from policies.registry import build_policy
from policies.types import DecisionKind, Ending, Outcome, RequestInfo, Usage, WorkEstimate
from tests.unit.policies.helpers import ManualClock, backend, fleet, request


def req(session: str | None, tokens: int = 100) -> RequestInfo:
    return RequestInfo("r", "t", "c", "m", WorkEstimate(0, tokens), 0.0, session_id=session)


def ctx(now: float, queued: int, rate: float | None = 100.0) -> GateContext:
    return GateContext(
        now=now, queued_tokens=queued, drain_tokens_per_s=rate, exec_p95_s=None, room_now=False
    )


GATE = WaitReservation(ReservationParams(target_wait_s=2.0, grace_s=5.0))


def answer(state: ReservationState, r: RequestInfo, c: GateContext) -> Verdict | None:
    """What the scheduler does for an enforced gate: check, then commit the answer."""
    verdict = GATE.check(state, r, c)
    GATE.commit(state, r, c, verdict, False)
    return verdict


def test_no_measured_drain_rate_never_rejects() -> None:
    state = GATE.new_state()
    assert answer(state, req("a"), ctx(0.0, 10_000, rate=None)) is None


def test_a_short_queue_admits() -> None:
    state = GATE.new_state()
    assert answer(state, req("a"), ctx(0.0, 150)) is None  # 1.5 s <= 2 s


def test_a_long_queue_defers_exactly_and_keeps_the_place() -> None:
    state = GATE.new_state()
    verdict = answer(state, req("a", tokens=100), ctx(10.0, 500))  # 5 s of work ahead
    assert verdict is not None and verdict.retry_after_s == pytest.approx(3.0)
    # a later arrival counts a's reserved work as ahead of it: 500 + 100 tokens = 6 s
    later = answer(state, req("b"), ctx(10.0, 500))
    assert later is not None and later.retry_after_s == pytest.approx(4.0)
    # a comes back early: still deferred, for the rest of its time only
    early = answer(state, req("a"), ctx(12.0, 100))
    assert early is not None and early.retry_after_s == pytest.approx(1.0)
    # on time, with the queue drained to the target: admitted, and the promise is consumed
    assert answer(state, req("a"), ctx(13.0, 150)) is None
    GATE.on_accept(state, req("a"), 13.0)
    assert "a" not in state.held


def test_a_queue_that_drained_slower_moves_the_time_not_the_place() -> None:
    state = GATE.new_state()
    answer(state, req("a"), ctx(0.0, 500))  # due at 3 s
    verdict = answer(state, req("a"), ctx(3.0, 400))  # still 4 s queued: 2 s late
    assert verdict is not None and verdict.retry_after_s == pytest.approx(2.0)
    assert state.held["a"].due == pytest.approx(5.0)


def test_an_unclaimed_reservation_lapses_after_grace() -> None:
    state = GATE.new_state()
    answer(state, req("a"), ctx(0.0, 500))  # due at 3 s, grace 5 s
    assert state.reserved_tokens(7.9, 5.0) == 100
    assert state.reserved_tokens(8.1, 5.0) == 0


def test_without_a_session_there_is_nothing_to_reserve() -> None:
    state = GATE.new_state()
    assert answer(state, req(None), ctx(0.0, 10_000)) is None


def test_check_alone_promises_nothing() -> None:
    state = GATE.new_state()
    assert GATE.check(state, req("a"), ctx(0.0, 500)) is not None
    assert state.held == {}


def test_a_shadow_refusal_reserves_nothing() -> None:
    state = GATE.new_state()
    c = ctx(0.0, 500)
    verdict = GATE.check(state, req("a"), c)
    GATE.commit(state, req("a"), c, verdict, True)
    assert verdict is not None and state.held == {}


def _saturated_scheduler(shadow: bool) -> tuple[Scheduler, ManualClock]:
    """One backend with one slot, a drain rate measured, a queue of 4 turns."""
    gate = {"type": "wait_reservation", "parameters": {"target_wait_s": 0.5}, "shadow": shadow}
    clock = ManualClock()
    sched = Scheduler(build_policy({"gates": [gate], "queue": {"max_wait_s": 600}}), clock=clock)
    f = fleet(clock, backend("a", max_num_seqs=1))
    first = sched.submit(request(clock, session_id="s0"), f)
    assert isinstance(first, Ticket)
    clock.advance(2.0)
    sched.release(first, Ending(Outcome.COMPLETED, Usage(100, 100)))  # a drain rate is measured
    for i in range(1, 6):
        sched.submit(request(clock, session_id=f"s{i}"), f)
    return sched, clock


@pytest.mark.parametrize("shadow", [False, True])
def test_shadow_mode_leaves_no_reservation_in_the_scheduler(shadow: bool) -> None:
    sched, clock = _saturated_scheduler(shadow)
    f = fleet(clock, backend("a", max_num_seqs=1))
    out = sched.submit(request(clock, session_id="late"), f)
    state = sched._states.gates["wait_reservation"]
    if shadow:
        assert getattr(out, "decision", None) is DecisionKind.DELAY
        assert "wait_reservation" in getattr(out, "shadowed", ())
        assert state.held == {}
    else:
        assert getattr(out, "decision", None) is DecisionKind.REJECT
        assert "late" in state.held


def test_a_reservation_holds_no_place_from_an_arrival_the_fleet_takes_now() -> None:
    """A fleet with room below saturation: its busy drain is the demand, so reserved tokens
    over it predict long waits; an arrival that goes straight in waits for none of them
    (else each refusal reserves more, and the Retry-Afters grow to their cap)."""
    gate = {"type": "wait_reservation", "parameters": {"target_wait_s": 0.2}}
    clock = ManualClock()
    sched = Scheduler(build_policy({"gates": [gate], "queue": {"max_wait_s": 600}}), clock=clock)

    def f() -> BackendsSnapshot:
        return fleet(clock, backend("a", max_num_seqs=2))

    first = sched.submit(request(clock, session_id="s0"), f())
    assert isinstance(first, Ticket)
    clock.advance(10.0)
    sched.release(first, Ending(Outcome.COMPLETED, Usage(100, 100)))  # 20 tok/s busy
    one, two = (sched.submit(request(clock, session_id=s), f()) for s in ("s1", "s2"))
    assert isinstance(one, Ticket) and isinstance(two, Ticket)
    assert getattr(sched.submit(request(clock, session_id="s3"), f()), "decision", None) is (
        DecisionKind.DELAY
    )  # no room, nothing queued yet: no wait
    later = sched.submit(request(clock, session_id="s4"), f())  # 200 queued: 10 s
    assert getattr(later, "decision", None) is DecisionKind.REJECT
    state = sched._states.gates["wait_reservation"]
    assert set(state.held) == {"s4"}
    clock.advance(1.0)
    for ticket in (one, two):
        sched.release(ticket, Ending(Outcome.COMPLETED, Usage(100, 100)))
    assert [type(t) for t in sched.poll(f())] == [Ticket]  # s3 goes; a slot is free
    # 200 reserved at the busy drain (600 tokens in 11 s) would be 3.7 s, past the target
    assert isinstance(sched.submit(request(clock, session_id="s5"), f()), Ticket)
    assert set(state.held) == {"s4"}  # s4 keeps its place
