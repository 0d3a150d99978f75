"""Hypothesis properties of the scheduler with agent runs: every call ends exactly once
(also when its run is cancelled, completed or past its deadline), a run never has more
calls in flight than its branch limit, charges balance, and once every run has ended
nothing stays reserved or held."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from policies.engine.scheduler import Scheduler
from policies.registry import build_policy
from policies.types import Outcome, RunHints, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request
from tests.unit.policies.ledger import Ledger

RUNS = {"enabled": True, "idle_timeout_s": 5.0}
POLICIES: list[dict[str, Any]] = [
    {"runs": RUNS},
    {
        "runs": {**RUNS, "default_branches": 1},
        "fairness": {"type": "fifo"},
        "headroom": {"reserve_fraction": 0.5, "active_window_s": 2},
    },
    {"runs": RUNS, "fairness": {"type": "priority"}},
]
op = st.one_of(
    st.tuples(st.just("call"), st.integers(0, 3), st.integers(1, 400)),
    st.tuples(st.just("release"), st.integers(0, 10**6), st.sampled_from(list(Outcome))),
    st.tuples(st.just("cancel"), st.integers(0, 10**6), st.none()),
    st.tuples(st.just("end_run"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("advance"), st.floats(0, 4), st.none()),
)


def _run_of(n: int) -> tuple[str, str, float | None]:
    """Four runs over two tenants; run 3 has a deadline (3 s after its start)."""
    return f"t{n % 2}", f"run{n}", 3.0 if n == 3 else None


class RunLedger(Ledger):
    runs: dict[str, tuple[str, str]]

    def take_ends(self) -> None:
        for ended in self.scheduler.runs.take_ends():
            for rid in ended.cut:  # the gateway cuts these upstream and releases them
                self.release(rid, Outcome.CANCELLED, None)

    def end_run(self, n: int, cancel: bool) -> None:
        tenant, run_id, _ = _run_of(n)
        ended = self.scheduler.runs.end(tenant, run_id, cancel=cancel)
        for out in ended or []:
            assert out.request_id in self.delayed
            self.take(out)
        self.take_ends()
        if ended is not None and cancel:  # nothing of the run is left waiting or running
            left = [r for r in (*self.delayed, *self.tickets) if self.runs[r] == (tenant, run_id)]
            assert left == []

    def check_ceilings(self, branches: dict[tuple[str, str], int]) -> None:
        in_flight: dict[tuple[str, str], int] = {}
        for ticket in self.tickets.values():
            run = ticket.request.run
            assert run is not None
            key = (ticket.request.tenant, run.run_id)
            in_flight[key] = in_flight.get(key, 0) + 1
        for key, n in in_flight.items():
            assert n <= branches.get(key, n)


CALL = ("call", 0, 10)
"""A call of tenant t0's run0, which says 2 branches."""


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(POLICIES) - 1), st.lists(op, max_size=80))
@example(0, [CALL, CALL, CALL, ("end_run", 0, True)])  # the call waiting for a branch
def test_every_call_of_every_run_ends_once(start: int, ops: list[tuple[Any, ...]]) -> None:
    clock = ManualClock()
    f = fleet(clock, backend("a", max_num_seqs=6))
    policy = POLICIES[start]
    ledger = RunLedger(Scheduler(build_policy(policy), clock=clock, rng=random.Random(0)), clock, f)
    ledger.runs = {}
    default = policy["runs"].get("default_branches")
    branches: dict[tuple[str, str], int] = {}
    for name, a, b in ops:
        if name == "call":
            tenant, run_id, deadline_in = _run_of(a)
            hint = None if a % 2 else 2  # tenant t0's runs say 2 branches; t1's do not
            if ledger.scheduler.runs.state(tenant, run_id) is None:  # the next call opens it
                limit = hint if hint is not None else default
                if limit is None:
                    branches.pop((tenant, run_id), None)
                else:
                    branches[(tenant, run_id)] = limit
            deadline = None if deadline_in is None else clock.now + deadline_in
            hints = RunHints(run_id, deadline=deadline, branches=hint)
            req = request(clock, tenant=tenant, prompt=b, output=b // 2 + 1, run=hints)
            ledger.runs[req.request_id] = (tenant, run_id)
            ledger.submit(req)
        elif name == "release" and ledger.tickets:
            rid = sorted(ledger.tickets)[a % len(ledger.tickets)]
            ledger.release(rid, b, Usage(a % 300, a % 200))
        elif name == "cancel" and ledger.delayed:
            ledger.cancel(sorted(ledger.delayed)[a % len(ledger.delayed)])
        elif name == "end_run":
            ledger.end_run(a, b)
        elif name == "advance":
            clock.advance(a)
        ledger.take_ends()
        ledger.poll()
        ledger.take_ends()
        ledger.check_ceilings(branches)
    ledger.drain()
    ledger.take_ends()
    ledger.assert_clean()
    clock.advance(60.0)  # every run is idle past its timeout (or past its deadline)
    ledger.poll()
    ledger.take_ends()
    stats = ledger.scheduler.runs.stats()
    assert (stats.open_runs, stats.promised_tokens, stats.held_calls) == (0, 0, 0)
    started = sum(stats.started.values())
    assert sum(stats.ended.values()) == started
