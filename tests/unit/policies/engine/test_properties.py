"""Hypothesis properties of the scheduler: one terminal outcome per request, tokens charged
equal tokens released, and no tenant with a positive weight starves."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.engine.scheduler import Scheduler, Ticket
from policies.registry import build_policy
from policies.types import Ending, Outcome, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request
from tests.unit.policies.ledger import Ledger

CODEL = {"type": "codel", "parameters": {"target_s": 0.2, "interval_s": 1.0}}
QUOTA = {"default": {"tokens_per_minute": 3000, "max_concurrent": 3}}
GATES = [
    {"type": "tenant_quota", "parameters": QUOTA},
    {"type": "retry_budget", "shadow": True},
    {"type": "deadline_feasibility"},
]
POLICIES: list[dict[str, Any]] = [
    {},
    {"fairness": {"type": "priority"}, "queue": {"discipline": CODEL}},
    {"headroom": {"reserve_fraction": 0.5, "active_window_s": 2}},
    {"fairness": {"type": "fifo"}, "limit": {"type": "adaptive"}, "gates": GATES},
]

DEADLINES = st.sampled_from([None, 0.3, 2.0])
OUTCOMES = st.sampled_from(list(Outcome))
op = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 500), DEADLINES),
    st.tuples(st.just("release"), st.integers(0, 10**6), OUTCOMES, st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 10**6), st.none(), st.none()),
    st.tuples(st.just("advance"), st.floats(0, 3), st.none(), st.none()),
    st.tuples(st.just("swap"), st.integers(0, len(POLICIES) - 1), st.none(), st.none()),
)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, len(POLICIES) - 1), st.lists(op, max_size=80))
def test_one_terminal_outcome_and_balanced_charges(start: int, ops: list[tuple[Any, ...]]) -> None:
    clock = ManualClock()
    f = fleet(clock, backend("a", max_num_seqs=2), backend("b", max_num_seqs=1))
    ledger = Ledger(
        Scheduler(build_policy(POLICIES[start]), clock=clock, rng=random.Random(0)), clock, f
    )
    for name, a, b, c in ops:
        if name == "submit":
            ledger.submit(
                request(clock, tenant=f"t{a}", prompt=b, output=b // 2 + 1, deadline_in=c)
            )
        elif name == "release" and ledger.tickets:
            rid = sorted(ledger.tickets)[a % len(ledger.tickets)]
            ledger.release(rid, b, Usage(a % 400, a % 300) if c else None)
        elif name == "cancel" and ledger.delayed:
            ledger.cancel(sorted(ledger.delayed)[a % len(ledger.delayed)])
        elif name == "advance":
            clock.advance(a)
        elif name == "swap":
            ledger.scheduler.swap(build_policy(POLICIES[a]))
        ledger.poll()
    ledger.drain()
    ledger.assert_clean()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.1, 10.0), min_size=2, max_size=4),
    st.lists(st.integers(1, 2000), min_size=30, max_size=30),
)
def test_no_positive_weight_tenant_starves(weights: list[float], costs: list[int]) -> None:
    """All tenants backlogged on one slot: each one's weighted service stays within the VTC
    bound of every other's, so none falls behind without limit."""
    clock = ManualClock()
    s = Scheduler(build_policy({"ladder": {"steps": []}}), clock=clock, rng=random.Random(0))
    f = fleet(clock, backend(max_num_seqs=1))
    tenants = [f"t{i}" for i in range(len(weights))]
    pending: list[Ticket] = []
    for i, cost in enumerate(costs * len(tenants)):
        t = i % len(tenants)
        req = request(clock, tenant=tenants[t], prompt=cost, output=1, weight=weights[t])
        out = s.submit(req, f)
        pending += [out] if isinstance(out, Ticket) else []
    served = dict.fromkeys(tenants, 0.0)
    left = dict.fromkeys(tenants, len(costs))
    bound = 2 * max(c + 1 for c in costs) / min(weights)
    for _ in range(len(costs) * len(tenants) // 2):
        pending += [t for t in s.poll(f) if isinstance(t, Ticket)]
        ticket = pending.pop(0)
        req = ticket.request
        served[req.tenant] += req.estimate.total / req.weight
        left[req.tenant] -= 1
        s.release(ticket, Ending(Outcome.COMPLETED, Usage(req.estimate.prompt_tokens, 1)))
        backlogged = [served[t] for t in tenants if left[t] > 0]  # queued since the start
        assert max(backlogged, default=0) - min(backlogged, default=0) <= bound
