"""``deadline_feasibility`` to the second: the predicted finish is now + the queue's drain time
x wait_factor + the exec p95, compared with the deadline at its edge."""

from __future__ import annotations

from policies.contracts import GateContext, Verdict
from policies.gates.deadline import DeadlineFeasibility
from policies.gates.deadline_params import DeadlineParams
from policies.types import Reason, RequestInfo, WorkEstimate

GATE = DeadlineFeasibility(DeadlineParams(wait_factor=2.0))


def req(deadline: float | None) -> RequestInfo:
    return RequestInfo("r", "t", "chat", "m", WorkEstimate(10, 10), 100.0, deadline=deadline)


def ctx(room_now: bool, drain: float | None = 50.0, p95: float | None = 3.0) -> GateContext:
    return GateContext(100.0, 1000, drain, p95, room_now)  # 1000 tokens queued


def test_no_deadline_is_always_feasible() -> None:
    assert GATE.check(None, req(None), ctx(False)) is None


def test_with_room_now_only_the_execution_time_counts() -> None:
    assert GATE.check(None, req(103.0), ctx(True)) is None  # 100 + 3: exactly at the deadline
    assert GATE.check(None, req(102.9), ctx(True)) == Verdict(Reason.DEADLINE_INFEASIBLE, None)
    assert GATE.check(None, req(100.0), ctx(True, p95=None)) is None  # no p95 measured yet


def test_without_room_the_drain_time_is_stretched_by_the_wait_factor() -> None:
    # 1000 tokens at 50/s: 20 s, x 2 = 40 s, + 3 s
    assert GATE.check(None, req(143.0), ctx(False)) is None
    assert GATE.check(None, req(142.5), ctx(False)) == Verdict(Reason.DEADLINE_INFEASIBLE, 20.0)


def test_an_unmeasured_drain_rate_predicts_no_wait() -> None:
    assert GATE.check(None, req(103.0), ctx(False, drain=None)) is None
    refused = GATE.check(None, req(102.0), ctx(False, drain=None))
    assert refused == Verdict(Reason.DEADLINE_INFEASIBLE, None)


def test_an_unmeasured_execution_time_adds_nothing_to_the_wait() -> None:
    assert GATE.check(None, req(140.0), ctx(False, p95=None)) is None  # 100 + 40 + 0
    refused = GATE.check(None, req(139.5), ctx(False, p95=None))
    assert refused == Verdict(Reason.DEADLINE_INFEASIBLE, 20.0)
