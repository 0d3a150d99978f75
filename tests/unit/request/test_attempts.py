"""The one attempt loop (``gateway.request.attempts.attempt``) every front goes through:
retry names, backends avoided after a failure, the end of the tries, refusals."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from gateway.request.attempts import Failed, attempt
from policies.engine.scheduler_types import Ticket
from policies.types import Decision, DecisionKind, FlowKey, Reason, RequestInfo, WorkEstimate

REQ = RequestInfo("r1", "acme", "interactive", "m", WorkEstimate(10, 10), 0.0)


def _decision(req: RequestInfo, kind: DecisionKind, reason: Reason) -> Decision:
    flow = FlowKey(req.tenant, req.workload_class, req.model, 0)
    return Decision(kind, reason, req.request_id, req.tenant, flow, req.estimate, "p", "v1")


def _reject(req: RequestInfo, reason: Reason) -> Decision:
    return _decision(req, DecisionKind.REJECT, reason)


@dataclass
class Admission:
    """Dispatches to the first backend of ``backends`` not avoided; none left: no healthy
    backend. ``refuse``: every submit is refused for that reason."""

    backends: list[str]
    refuse: Reason | None = None
    queued_to: list[str] = field(default_factory=list)
    """Backends the queue dispatches to first, whatever ``avoid`` said."""
    submitted: list[tuple[str, frozenset[str]]] = field(default_factory=list)

    def submit(self, req: RequestInfo, avoid: frozenset[str] = frozenset()) -> Any:
        self.submitted.append((req.request_id, avoid))
        if self.refuse is not None:
            return _reject(req, self.refuse)
        left = [b for b in self.backends if b not in avoid]
        if self.queued_to:
            left = [self.queued_to.pop(0)]
        if not left:
            return _reject(req, Reason.NO_HEALTHY_BACKEND)
        admitted = _decision(req, DecisionKind.ADMIT, Reason.CAPACITY_AVAILABLE)
        return Ticket(req.request_id, left[0], admitted, 0.0, req)


class Flight:
    trace = None  # tracing off

    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        self.tickets: list[Ticket] = []

    def decided(self, decision: Decision) -> None:
        self.decisions.append(decision)

    def dispatched(self, ticket: Ticket) -> None:
        self.tickets.append(ticket)


@dataclass
class Ctx:
    admission: Admission


async def _run(
    admission: Admission,
    outcomes: list[Any],
    tries: int = 3,
    avoid: frozenset[str] = frozenset(),
    count_refusal: bool = True,
) -> Any:
    flight, sent = Flight(), []

    async def send(ticket: Ticket) -> Any:
        sent.append(ticket.backend)
        return outcomes.pop(0)

    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    result = await attempt(
        Ctx(admission),
        flight,
        REQ,
        send,
        tries=tries,
        gone=gone,  # type: ignore[arg-type]
        avoid=avoid,
        count_refusal=count_refusal,
    )
    return result, sent, flight


async def test_the_first_answer_ends_the_loop() -> None:
    result, sent, flight = await _run(Admission(["a", "b"]), ["answer"])
    assert result == "answer" and sent == ["a"] and len(flight.tickets) == 1


async def test_a_failed_backend_is_avoided_and_the_retry_is_renamed() -> None:
    admission = Admission(["a", "b"])
    result, sent, _ = await _run(admission, [Failed("connect"), "answer"])
    assert result == "answer" and sent == ["a", "b"]
    assert admission.submitted == [("r1", frozenset()), ("r1~2", frozenset({"a"}))]


async def test_when_only_failed_backends_are_left_the_last_failure_is_returned() -> None:
    admission = Admission(["a"])
    result, sent, _ = await _run(admission, [Failed("busy")])
    assert result == Failed("busy") and sent == ["a"]


async def test_every_try_failing_returns_the_last_failure() -> None:
    admission = Admission(["a"])
    outcomes: list[Any] = [Failed("connect", avoid=False), Failed("stall", avoid=False)]
    result, sent, _ = await _run(admission, outcomes, tries=2)
    assert result == Failed("stall", avoid=False) and sent == ["a", "a"]
    assert admission.submitted == [("r1", frozenset()), ("r1~2", frozenset())]


async def test_a_refusal_is_returned_and_counted_unless_it_is_waited_out() -> None:
    admission = Admission(["a"], refuse=Reason.TENANT_QUOTA)
    result, sent, flight = await _run(admission, [])
    assert isinstance(result, Decision) and result.reason is Reason.TENANT_QUOTA
    assert sent == [] and flight.decisions == [result]
    result, _, flight = await _run(admission, [], count_refusal=False)
    assert isinstance(result, Decision) and flight.decisions == []


async def test_a_backend_outside_the_allowed_set_does_not_end_the_loop() -> None:
    admission = Admission(["a", "b"], queued_to=["a"])  # the queue dispatched it there
    result, sent, _ = await _run(admission, [Failed("outside"), "answer"], avoid=frozenset({"a"}))
    assert result == "answer" and sent == ["a", "b"]
    assert admission.submitted == [("r1", frozenset({"a"})), ("r1~2", frozenset({"a"}))]


async def test_a_failure_after_the_allowed_set_was_left_is_still_avoided() -> None:
    admission = Admission(["a", "b"])
    result, sent, _ = await _run(admission, [Failed("connect")], avoid=frozenset({"a"}))
    assert result == Failed("connect") and sent == ["b"]  # only "a", not allowed, was left
