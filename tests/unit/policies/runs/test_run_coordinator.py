"""The run coordinator against a recording host: what it asks back from the scheduler."""

from __future__ import annotations

from typing import Any

from policies.contracts import QueuedEntry
from policies.runs.coordinator import RunCoordinator
from policies.runs.run import Reservation
from policies.runs.run_state import OpenRunState
from policies.runs.runs_params import RunsParams
from policies.types import (
    Decision,
    DecisionKind,
    Reason,
    RequestInfo,
    RunHints,
)
from tests.unit.policies.helpers import ManualClock, queued, request


class Host:
    def __init__(self, **params: Any) -> None:
        self.params = RunsParams(enabled=True, **params)
        self.calls: list[tuple[str, object]] = []

    def runs_params(self) -> RunsParams:
        return self.params

    def refuse(self, req: RequestInfo, reason: Reason, *_: object) -> Decision:
        self.calls.append(("refuse", reason))
        return _decision(req, DecisionKind.REJECT, reason)

    def delayed(self, entry: QueuedEntry, position: int) -> Decision:
        self.calls.append(("delayed", position))
        return _decision(entry.request, DecisionKind.DELAY, Reason.QUEUED_FOR_CAPACITY)

    def drain_rate(self, saturated: bool, now: float) -> float | None:
        self.calls.append(("drain_rate", saturated))
        return None

    def queued(self, request_id: str) -> QueuedEntry | None:
        return None

    def enqueue_copy(self, entry: QueuedEntry, names: tuple[str, ...], now: float) -> QueuedEntry:
        self.calls.append(("enqueue_copy", entry.request.request_id))
        return entry

    def take_copy(self, entry: QueuedEntry) -> QueuedEntry:
        return entry

    def put_back(self, entry: QueuedEntry) -> None:
        return None

    def unqueue(self, entry: QueuedEntry) -> tuple[str, ...]:
        return ()

    def unserved(self, req: RequestInfo, now: float, gate_names: tuple[str, ...]) -> None:
        self.calls.append(("unserved", req.request_id))


def entry(req: RequestInfo, now: float, seq: int) -> QueuedEntry:
    return queued(req, seq, now, now + 30.0)


def _decision(req: RequestInfo, kind: DecisionKind, reason: Reason) -> Decision:
    return Decision(kind, reason, req.request_id, req.tenant, req.flow, req.estimate, "p", "v")


def test_a_call_without_run_or_with_runs_off_is_not_checked() -> None:
    clock = ManualClock()
    host = Host()
    runs = RunCoordinator(host, clock)
    assert runs.check(request(clock), clock()) is None
    host.params = RunsParams(enabled=False)
    assert runs.check(request(clock, run=RunHints("a")), clock()) is None
    assert host.calls == []


def test_a_first_call_plans_the_run_at_the_drain_rate_the_promise_divides_by() -> None:
    clock = ManualClock()
    host = Host(promise_horizon_s=10.0, promise_rate="saturated")
    runs = RunCoordinator(host, clock)
    plan = runs.check(request(clock, run=RunHints("a", tokens=900, calls=3)), clock())
    assert plan == Reservation(900, 3, None, "hints")
    assert host.calls == [("drain_rate", True)]


def test_a_call_beyond_the_fan_out_ceiling_is_held_and_its_cancel_refused_and_accounted() -> None:
    clock = ManualClock()
    host = Host()
    runs = RunCoordinator(host, clock)
    first = entry(request(clock, run=RunHints("a", branches=1)), clock(), 1)
    plan = runs.check(first.request, clock())
    assert isinstance(plan, Reservation)
    assert runs.admit(plan, first, ()) is None  # the run opens; its call goes on
    runs.enqueued(first)
    second = entry(request(clock, run=RunHints("a")), clock(), 2)
    run = runs.check(second.request, clock())
    assert run is not None and not isinstance(run, (Reservation, Decision))
    held = runs.admit(run, second, ())
    assert isinstance(held, Decision) and held.decision is DecisionKind.DELAY
    assert runs.holds(second.request.request_id) and runs.stats().held_calls == 1
    state = runs.state("t1", "a")
    assert isinstance(state, OpenRunState) and state.waiting_for_branch == 1
    assert runs.cancel_held(second.request.request_id)
    assert not runs.holds(second.request.request_id) and runs.stats().held_calls == 0
    assert host.calls[-2:] == [
        ("unserved", second.request.request_id),
        ("refuse", Reason.OVERLOADED),
    ]
    assert not runs.cancel_held("unknown")
    assert runs.next_wakeup() is None  # its first call still queued, no deadline: nothing due
