"""The reservation gate that the beyond-the-seed preset uses (policies/gates/reservation.py)."""

from __future__ import annotations

import pytest

from policies.contracts import GateContext, Verdict
from policies.engine.scheduler import Scheduler, Ticket
from policies.gates.reservation import ReservationState, WaitReservation
from policies.gates.reservation_params import ReservationParams
from policies.registry import build_policy
from policies.types import DecisionKind, Outcome, RequestInfo, Usage, WorkEstimate
from tests.unit.policies.helpers import ManualClock, backend, fleet, request


def req(session: str | None, tokens: int = 100) -> RequestInfo:
    return RequestInfo("r", "t", "c", "m", WorkEstimate(0, tokens), 0.0, session_id=session)


def ctx(now: float, queued: int, rate: float | None = 100.0) -> GateContext:
    return GateContext(
        now=now,
        queued_tokens=queued,
        drain_tokens_per_s=None,
        exec_p95_s=None,
        room_now=False,
        full_drain_tokens_per_s=rate,
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
    for i in range(1, 6):
        sched.submit(request(clock, session_id=f"s{i}"), f)
    clock.advance(2.0)
    sched.release(first, Outcome.COMPLETED, Usage(100, 100))  # drained with a queue: full
    sched.poll(fleet(clock, backend("a", max_num_seqs=1)))
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


def test_a_fleet_never_seen_full_refuses_no_momentary_queue() -> None:
    """Served without a queue, the busy drain is the demand (here 20 tok/s), not what a
    queue would drain at: a queue formed for a moment predicts no wait from it."""
    gate = {"type": "wait_reservation", "parameters": {"target_wait_s": 0.5}}
    clock = ManualClock()
    sched = Scheduler(build_policy({"gates": [gate], "queue": {"max_wait_s": 600}}), clock=clock)
    f = fleet(clock, backend("a", max_num_seqs=1))
    first = sched.submit(request(clock, session_id="s0"), f)
    assert isinstance(first, Ticket)
    clock.advance(10.0)
    sched.release(first, Outcome.COMPLETED, Usage(100, 100))  # 200 tokens in 10 busy s
    assert sched.stats().drain_tokens_per_s == pytest.approx(20.0)
    f = fleet(clock, backend("a", max_num_seqs=1))
    assert isinstance(sched.submit(request(clock, session_id="s1"), f), Ticket)
    queued = [sched.submit(request(clock, session_id=f"s{i}"), f) for i in (2, 3, 4)]
    # 200 and 400 tokens ahead at 20 tok/s would be 10 and 20 s: all wait in the queue
    assert [getattr(d, "decision", None) for d in queued] == [DecisionKind.DELAY] * 3
    assert sched._states.gates["wait_reservation"].held == {}
