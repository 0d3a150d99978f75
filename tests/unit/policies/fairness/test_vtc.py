"""VTC: the service gap between two backlogged tenants stays within 2x the largest request
cost, even when actual usage differs from the estimate charged at dispatch."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.registry import build_policy
from policies.types import Ending, Outcome, RequestInfo, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request

costs = st.lists(st.tuples(st.integers(1, 3000), st.floats(0.0, 1.0)), min_size=40, max_size=40)


@settings(max_examples=50, deadline=None)
@given(costs, costs)
def test_service_gap_between_backlogged_tenants_is_bounded(
    a: list[tuple[int, float]], b: list[tuple[int, float]]
) -> None:
    clock = ManualClock()
    s = Scheduler(build_policy({"ladder": {"steps": []}}), clock=clock, rng=random.Random(0))
    f = fleet(clock, backend(max_num_seqs=1))
    actual: dict[str, int] = {}
    reqs = []
    for tenant, jobs in (("a", a), ("b", b)):
        for est, ratio in jobs:
            reqs.append(request(clock, tenant=tenant, prompt=est, output=1))
            actual[reqs[-1].request_id] = max(1, round((est + 1) * ratio * 1.5))
    pending = _submit_all(s, f, reqs)
    largest = max(
        max(e + 1, actual_) for (e, _), actual_ in zip(a + b, actual.values(), strict=True)
    )
    served = {"a": 0, "b": 0}
    left = {"a": len(a), "b": len(b)}
    ticket = _next_ticket(s, f, pending)
    while left["a"] and left["b"]:
        used = actual[ticket.request_id]
        served[ticket.request.tenant] += used
        left[ticket.request.tenant] -= 1
        s.release(ticket, Ending(Outcome.COMPLETED, Usage(used, 0)))
        assert abs(served["a"] - served["b"]) <= 2 * largest
        ticket = _next_ticket(s, f, pending)


def _submit_all(s: Scheduler, f: BackendsSnapshot, reqs: list[RequestInfo]) -> list[Ticket]:
    return [t for t in (s.submit(r, f) for r in reqs) if isinstance(t, Ticket)]


def _next_ticket(s: Scheduler, f: BackendsSnapshot, pending: list[Ticket]) -> Ticket:
    pending.extend(t for t in s.poll(f) if isinstance(t, Ticket))
    return pending.pop(0)


def test_heavier_weight_gets_proportionally_more() -> None:
    clock = ManualClock()
    s = Scheduler(build_policy({"ladder": {"steps": []}}), clock=clock, rng=random.Random(0))
    f = fleet(clock, backend(max_num_seqs=1))
    reqs = []
    for i in range(200):
        tenant, weight = ("heavy", 3.0) if i % 2 else ("light", 1.0)
        reqs.append(request(clock, tenant=tenant, prompt=100, output=1, weight=weight))
    pending = _submit_all(s, f, reqs)
    counts = {"heavy": 0, "light": 0}
    for _ in range(80):
        ticket = _next_ticket(s, f, pending)
        counts[ticket.request.tenant] += 1
        s.release(ticket, Ending(Outcome.COMPLETED, Usage(101, 0)))
    assert 2.5 <= counts["heavy"] / counts["light"] <= 3.5


def test_within_a_tenant_the_earliest_deadline_goes_first() -> None:
    clock = ManualClock()
    s = Scheduler(build_policy({}), clock=clock, rng=random.Random(0))
    f = fleet(clock, backend(max_num_seqs=1))
    pending = _submit_all(s, f, [request(clock, request_id="running")])
    batch = request(clock, workload_class="batch", request_id="batch")
    turn = request(clock, deadline_in=10.0, request_id="turn")
    assert _submit_all(s, f, [batch, turn]) == []
    s.release(pending.pop(), Ending(Outcome.COMPLETED))
    assert _next_ticket(s, f, pending).request_id == "turn"
