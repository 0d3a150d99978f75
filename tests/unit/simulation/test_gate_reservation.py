"""The reservation gate that the beyond-the-seed preset uses (policies/gate_reservation.py)."""

from __future__ import annotations

import pytest

from policies.contracts import GateContext
from policies.gate_reservation import ReservationParams, WaitReservation
from policies.types import RequestInfo, WorkEstimate


def req(session: str | None, tokens: int = 100) -> RequestInfo:
    return RequestInfo("r", "t", "c", "m", WorkEstimate(0, tokens), 0.0, session_id=session)


def ctx(now: float, queued: int, rate: float | None = 100.0) -> GateContext:
    return GateContext(now=now, queued_tokens=queued, drain_tokens_per_s=rate,
                       exec_p95_s=None, room_now=False)  # fmt: skip


GATE = WaitReservation(ReservationParams(target_wait_s=2.0, grace_s=5.0))


def test_no_measured_drain_rate_never_rejects() -> None:
    state = GATE.new_state()
    assert GATE.check(state, req("a"), ctx(0.0, 10_000, rate=None)) is None


def test_a_short_queue_admits() -> None:
    state = GATE.new_state()
    assert GATE.check(state, req("a"), ctx(0.0, 150)) is None  # 1.5 s <= 2 s


def test_a_long_queue_defers_exactly_and_keeps_the_place() -> None:
    state = GATE.new_state()
    verdict = GATE.check(state, req("a", tokens=100), ctx(10.0, 500))  # 5 s of work ahead
    assert verdict is not None and verdict.retry_after_s == pytest.approx(3.0)
    # a later arrival counts a's reserved work as ahead of it: 500 + 100 tokens = 6 s
    later = GATE.check(state, req("b"), ctx(10.0, 500))
    assert later is not None and later.retry_after_s == pytest.approx(4.0)
    # a comes back early: still deferred, for the rest of its time only
    early = GATE.check(state, req("a"), ctx(12.0, 100))
    assert early is not None and early.retry_after_s == pytest.approx(1.0)
    # on time, with the queue drained to the target: admitted, and the promise is consumed
    assert GATE.check(state, req("a"), ctx(13.0, 150)) is None
    GATE.on_accept(state, req("a"), 13.0)
    assert "a" not in state.held


def test_a_queue_that_drained_slower_moves_the_time_not_the_place() -> None:
    state = GATE.new_state()
    GATE.check(state, req("a"), ctx(0.0, 500))  # due at 3 s
    verdict = GATE.check(state, req("a"), ctx(3.0, 400))  # still 4 s queued: 2 s late
    assert verdict is not None and verdict.retry_after_s == pytest.approx(2.0)
    assert state.held["a"].due == pytest.approx(5.0)


def test_an_unclaimed_reservation_lapses_after_grace() -> None:
    state = GATE.new_state()
    GATE.check(state, req("a"), ctx(0.0, 500))  # due at 3 s, grace 5 s
    assert state.reserved_tokens(7.9, 5.0) == 100
    assert state.reserved_tokens(8.1, 5.0) == 0


def test_without_a_session_there_is_nothing_to_reserve() -> None:
    state = GATE.new_state()
    assert GATE.check(state, req(None), ctx(0.0, 10_000)) is None
