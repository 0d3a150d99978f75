"""Quotas, retry budget, deadline feasibility and shadow mode, through the scheduler."""

from __future__ import annotations

from typing import Any

import pytest

from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, DecisionKind, Ending, Outcome, Reason, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

TPM = 6000  # the operator's quota in this test config, not a capacity


def quota(**limits: Any) -> dict[str, Any]:
    return {"gates": [{"type": "tenant_quota", "parameters": {"default": limits}}]}


def test_quota_retry_after_is_the_exact_time_until_budget_returns() -> None:
    clock = ManualClock()
    s = scheduler(clock, {**quota(tokens_per_minute=TPM), "retry_after": {"jitter": 0}})
    f = fleet(clock)
    assert isinstance(s.submit(request(clock, prompt=5000, output=0), f), Ticket)
    out = s.submit(request(clock, prompt=1500, output=0), f)
    assert isinstance(out, Decision) and out.reason is Reason.TENANT_QUOTA
    assert out.retry_after_s == pytest.approx((1500 - 1000) / (TPM / 60))
    clock.advance((1500 - 1000) / (TPM / 60))
    back = request(clock, prompt=1500, output=0, is_retry=True)  # the refused client returns
    assert isinstance(s.submit(back, f), Ticket)


def test_quota_jitter_only_lengthens_retry_after() -> None:
    clock = ManualClock()
    s = scheduler(clock, quota(tokens_per_minute=TPM))
    f = fleet(clock)
    s.submit(request(clock, prompt=TPM, output=0), f)
    outs = [s.submit(request(clock, prompt=600, output=0), f) for _ in range(20)]
    afters = [o.retry_after_s for o in outs if isinstance(o, Decision)]
    assert len(afters) == 20 and all(a is not None and a >= 6.0 for a in afters)
    assert len(set(afters)) > 1


def test_quota_refunds_unserved_and_corrects_served_usage() -> None:
    clock = ManualClock()
    s = scheduler(clock, {**quota(tokens_per_minute=TPM), "retry_after": {"jitter": 0}})
    f = fleet(clock, backend(max_num_seqs=1))
    first = s.submit(request(clock, prompt=2000, output=1000), f)
    queued = s.submit(request(clock, prompt=2000, output=1000), f)
    assert isinstance(first, Ticket) and isinstance(queued, Decision)
    assert isinstance(s.submit(request(clock, prompt=500, output=0), f), Decision)  # budget gone
    s.cancel(queued.request_id)
    s.release(first, Ending(Outcome.COMPLETED, Usage(2000, 10)))  # used far less than estimated
    # 3,990 back (refund + correction), 500 of them promised to the refused one: 3,490 free
    big = s.submit(request(clock, prompt=3400, output=0), f)
    assert isinstance(big, Ticket)


def test_tenant_concurrency_counts_queued_and_in_flight() -> None:
    clock = ManualClock()
    s = scheduler(clock, quota(max_concurrent=2))
    f = fleet(clock, backend(max_num_seqs=1))
    a, b = s.submit(request(clock), f), s.submit(request(clock), f)
    c = s.submit(request(clock), f)
    assert isinstance(c, Decision) and c.reason is Reason.TENANT_CONCURRENCY
    assert isinstance(s.submit(request(clock, tenant="other"), f), Decision)
    assert isinstance(a, Ticket) and isinstance(b, Decision)
    s.release(a, Ending(Outcome.COMPLETED))
    assert c.retry_after_s is not None
    clock.advance(c.retry_after_s)  # the freed slot is promised to c: it returns and gets it
    back = s.submit(request(clock, is_retry=True), f)
    assert back.decision is not DecisionKind.REJECT  # type: ignore[union-attr]


def retry_policy(**params: Any) -> dict[str, Any]:
    return {"gates": [{"type": "retry_budget", "parameters": {"ratio": 0.25, **params}}]}


def test_retries_beyond_the_budget_are_rejected_with_their_reason() -> None:
    clock = ManualClock()
    s = scheduler(clock, retry_policy(window_s=10))
    f = fleet(clock)
    for _ in range(8):
        _complete(s, s.submit(request(clock), f))
    results = [s.submit(request(clock, is_retry=True), f) for _ in range(3)]
    _complete(s, results[0])
    _complete(s, results[1])
    last = results[2]
    assert isinstance(last, Decision) and last.reason is Reason.RETRY_BUDGET_EXHAUSTED
    assert last.retry_after_s is not None and 0 < last.retry_after_s <= 10 * 1.2
    clock.advance(11)
    assert isinstance(s.submit(request(clock, is_retry=True), f), Decision)  # window emptied


def test_deadline_infeasible_when_learned_exec_time_exceeds_it() -> None:
    clock = ManualClock()
    s = scheduler(clock, {"gates": [{"type": "deadline_feasibility"}]})
    f = fleet(clock)
    for _ in range(10):
        t = s.submit(request(clock, prompt=1000, output=200), f)
        assert isinstance(t, Ticket)
        clock.advance(4.0)
        s.release(t, Ending(Outcome.COMPLETED, Usage(1000, 200), latency_s=4.0))
    tight = s.submit(request(clock, prompt=1000, output=200, deadline_in=2.0), f)
    assert isinstance(tight, Decision) and tight.reason is Reason.DEADLINE_INFEASIBLE
    assert isinstance(s.submit(request(clock, prompt=1000, output=200, deadline_in=6.0), f), Ticket)
    assert isinstance(s.submit(request(clock, prompt=10, output=5, deadline_in=2.0), f), Ticket)


def test_shadow_gate_records_but_never_blocks() -> None:
    clock = ManualClock()
    raw = {
        "gates": [
            {
                "type": "tenant_quota",
                "name": "q",
                "shadow": True,
                "parameters": {"default": {"max_concurrent": 1}},
            }
        ]
    }
    s = scheduler(clock, raw)
    f = fleet(clock)
    first, second = s.submit(request(clock), f), s.submit(request(clock), f)
    assert isinstance(first, Ticket) and first.decision.shadowed == ()
    assert isinstance(second, Ticket) and second.decision.shadowed == ("q",)


def _complete(s: Scheduler, out: Ticket | Decision) -> None:
    assert isinstance(out, Ticket)
    s.release(out, Ending(Outcome.COMPLETED))


def computed_quota(**limits: Any) -> dict[str, Any]:
    parameters = {"counts": "computed_tokens", "default": limits}
    return {
        "gates": [{"type": "tenant_quota", "parameters": parameters}],
        "retry_after": {"jitter": 0},
    }


def test_a_computed_tokens_quota_charges_what_the_backends_cache_does_not_serve() -> None:
    clock = ManualClock()
    s = scheduler(clock, computed_quota(tokens_per_minute=TPM))
    f = fleet(clock, backend(prefix_cache_hit_rate=0.9))
    tickets = [s.submit(request(clock, prompt=2000, output=0), f) for _ in range(30)]
    assert all(isinstance(t, Ticket) for t in tickets)  # 200 tokens each: 6,000 in all
    assert tickets[0].request.estimate.cached_prompt_tokens == 1800  # type: ignore[union-attr]
    out = s.submit(request(clock, prompt=2000, output=0), f)
    assert isinstance(out, Decision) and out.reason is Reason.TENANT_QUOTA


def test_a_computed_tokens_quota_charges_an_uncached_backend_in_full() -> None:
    clock = ManualClock()
    for f in (fleet(clock, backend(prefix_cache_hit_rate=0.0)), fleet(clock)):
        s = scheduler(clock, computed_quota(tokens_per_minute=TPM))
        assert isinstance(s.submit(request(clock, prompt=5000, output=0), f), Ticket)
        out = s.submit(request(clock, prompt=2000, output=0), f)
        assert isinstance(out, Decision) and out.reason is Reason.TENANT_QUOTA


def test_a_computed_tokens_quota_takes_the_cached_tokens_the_engine_reports_at_release() -> None:
    clock = ManualClock()
    s = scheduler(clock, computed_quota(tokens_per_minute=TPM))
    f = fleet(clock, backend(prefix_cache_hit_rate=0.9))
    first = s.submit(request(clock, prompt=5000, output=0), f)  # charged 500
    assert isinstance(first, Ticket)
    s.release(first, Ending(Outcome.COMPLETED, Usage(5000, 0, cached_tokens=0)))  # it cost 5,000
    out = s.submit(request(clock, prompt=20_000, output=0), f)  # 2,000 > the 1,000 left
    assert isinstance(out, Decision) and out.reason is Reason.TENANT_QUOTA
    assert out.retry_after_s == pytest.approx((2000 - 1000) / (TPM / 60))
