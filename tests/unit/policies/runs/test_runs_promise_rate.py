"""The rate the run promise divides by: the drain while busy, or the drain while the fleet
is full (its capacity), with exact amounts."""

from __future__ import annotations

from typing import Any

import pytest

from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, DecisionKind, Ending, Outcome, Reason, RunHints, Usage
from tests.unit.policies.helpers import ManualClock, fleet, request, scheduler


def one_slot(clock: ManualClock, rate: str) -> Scheduler:
    return scheduler(
        clock,
        {
            "limit": {"type": "fixed", "parameters": {"max_in_flight": 1}},
            "runs": {"enabled": True, "promise_horizon_s": 10.0, "promise_rate": rate},
            "retry_after": {"jitter": 0.0},
        },
    )


def call(clock: ManualClock, run_id: str, tokens: int) -> Any:
    """A call of 100 prompt + 100 output estimated tokens, of a run of ``tokens``."""
    return request(clock, run=RunHints(run_id, tokens=tokens))


def quiet_drain(clock: ManualClock, s: Scheduler) -> None:
    """1000 tokens in 1 s busy, never a queue: the demand of a quiet fleet."""
    plain = s.submit(request(clock), fleet(clock))
    assert isinstance(plain, Ticket)
    clock.advance(1.0)
    s.release(plain, Ending(Outcome.COMPLETED, Usage(500, 500)))


@pytest.mark.parametrize(("rate", "refused"), [("busy", True), ("saturated", False)])
def test_a_quiet_fleets_demand_refuses_runs_only_when_taken_for_capacity(
    rate: str, refused: bool
) -> None:
    clock = ManualClock()
    s = one_slot(clock, rate)
    quiet_drain(clock, s)
    assert isinstance(s.submit(call(clock, "a", 6000), fleet(clock)), Ticket)
    second = s.submit(call(clock, "b", 4400), fleet(clock))  # 10 400 tokens: 10.4 s at 1000/s
    assert isinstance(second, Decision)
    if refused:
        assert second.decision is DecisionKind.REJECT
        assert second.reason is Reason.RUN_RESERVATIONS_FULL
    else:
        assert second.decision is DecisionKind.DELAY  # queued: no capacity measured yet


def test_the_saturated_rate_is_what_drained_while_calls_queued() -> None:
    clock = ManualClock()
    s = one_slot(clock, "saturated")
    quiet_drain(clock, s)
    a = s.submit(call(clock, "a", 6000), fleet(clock))
    assert isinstance(a, Ticket)
    b = s.submit(call(clock, "b", 4400), fleet(clock))
    assert isinstance(b, Decision) and b.decision is DecisionKind.DELAY
    clock.advance(2.0)
    s.release(a, Ending(Outcome.COMPLETED, Usage(100, 500)))  # 600 tokens in 2 s full: 300/s
    (b_ticket,) = s.poll(fleet(clock))
    assert isinstance(b_ticket, Ticket)
    assert s.runs.stats().promised_tokens == (6000 - 600) + (4400 - 200)
    late = s.submit(call(clock, "c", 300), fleet(clock))
    assert isinstance(late, Decision) and late.reason is Reason.RUN_RESERVATIONS_FULL
    # 9600 promised + 300 = 9900 tokens at 300/s: 33 s, 23 s past the horizon (at the busy
    # rate, 1600 tokens in 3 s, it would be 8.6 s)
    assert late.retry_after_s == pytest.approx(9900 / 300 - 10.0)
