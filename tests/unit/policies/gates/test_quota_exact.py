"""``tenant_quota`` to the token: bucket levels after refill, acceptance, refund and usage
correction; the exact Retry-After; the concurrency count. Two tenants whose limits differ in
every field the gate reads (rate, burst, concurrency), so no field can stand in for another."""

from __future__ import annotations

import pytest

from policies.contracts import GateContext, Verdict
from policies.gates.quota import QuotaState, TenantQuota
from policies.gates.quota_params import QuotaParams
from policies.types import Reason, RequestInfo, Usage, WorkEstimate

# tenant "a": 600 tokens/min (10 per s), a 300-token bucket, 2 at once;
# "solo": one at a time, no token bucket;
# everyone else: 1200 tokens/min (20 per s), the bucket one minute's worth, no concurrency cap.
PARAMS = QuotaParams.model_validate(
    {
        "default": {"tokens_per_minute": 1200},
        "tenants": {
            "a": {"tokens_per_minute": 600, "burst_tokens": 300, "max_concurrent": 2},
            "solo": {"max_concurrent": 1},
        },
    }
)
P95 = 4.5  # the exec p95 the context reports (read by the concurrency refusal)


def req(tenant: str, cost: int) -> RequestInfo:
    return RequestInfo(f"r-{tenant}-{cost}", tenant, "interactive", "m", WorkEstimate(cost, 0), 0.0)


def ctx(now: float) -> GateContext:
    return GateContext(now, 0, None, P95, True)


def level(state: QuotaState, tenant: str) -> float:
    return state.buckets[tenant].level


def refused_for(verdict: Verdict | None) -> float | None:
    """The Retry-After of a quota refusal."""
    assert verdict is not None and verdict.reason is Reason.TENANT_QUOTA
    return verdict.retry_after_s


def accepted(gate: TenantQuota, state: QuotaState, r: RequestInfo, now: float) -> None:
    assert gate.check(state, r, ctx(now)) is None
    gate.on_accept(state, r, now)


def test_a_bucket_starts_full_and_an_acceptance_takes_the_estimate() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("a", 250), 100.0)
    accepted(gate, state, req("b", 700), 100.0)
    assert level(state, "a") == 50.0 and level(state, "b") == 500.0


def test_refill_is_the_elapsed_time_at_the_tenants_rate() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("a", 250), 100.0)
    accepted(gate, state, req("b", 1000), 100.0)
    assert gate.check(state, req("a", 110), ctx(106.0)) is None  # 50 + 6 s x 10/s
    assert level(state, "a") == 110.0
    assert gate.check(state, req("b", 320), ctx(106.0)) is None  # 200 + 6 s x 20/s
    assert level(state, "b") == 320.0
    assert state.buckets["a"].updated == 106.0


def test_a_request_the_refill_cannot_cover_yet_gets_the_exact_wait() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("a", 250), 100.0)
    verdict = gate.check(state, req("a", 111), ctx(106.0))  # 110 there, 1 missing at 10/s
    assert refused_for(verdict) == pytest.approx(0.1)
    accepted(gate, state, req("b", 1200), 100.0)
    verdict = gate.check(state, req("b", 500), ctx(110.0))  # 200 there, 300 missing at 20/s
    assert refused_for(verdict) == pytest.approx(15.0)


def test_the_bucket_never_fills_past_its_size() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("a", 250), 100.0)
    accepted(gate, state, req("b", 100), 100.0)
    gate.check(state, req("a", 1), ctx(1000.0))
    gate.check(state, req("b", 1), ctx(1000.0))
    assert level(state, "a") == 300.0 and level(state, "b") == 1200.0


def test_a_request_larger_than_the_bucket_needs_a_full_bucket() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    assert gate.check(state, req("a", 5000), ctx(100.0)) is None  # full: 300 of 300
    gate.on_accept(state, req("a", 5000), 100.0)
    assert level(state, "a") == -4700.0  # the debt is paid before the next one
    verdict = gate.check(state, req("a", 5000), ctx(101.0))  # -4690 there, 300 needed
    assert refused_for(verdict) == pytest.approx(499.0)


def test_a_fraction_of_a_second_refills_its_fraction() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("b", 1000), 100.0)
    gate.check(state, req("b", 1), ctx(100.5))
    assert level(state, "b") == 210.0  # 200 + 0.5 s x 20/s


@pytest.mark.parametrize("back", [10.0, 0.5])
def test_a_clock_that_steps_back_refills_nothing(back: float) -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("a", 250), 100.0)
    gate.check(state, req("a", 1), ctx(100.0 - back))
    assert level(state, "a") == 50.0 and state.buckets["a"].updated == 100.0 - back


def test_an_unserved_request_is_refunded_in_full_up_to_the_size() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("a", 250), 100.0)
    accepted(gate, state, req("b", 700), 100.0)
    gate.on_finish(state, req("a", 250), 103.0, None, served=False)
    gate.on_finish(state, req("b", 700), 100.0, None, served=False)
    assert level(state, "a") == 300.0  # 50 + 30 refilled + 250 refunded, capped at 300
    assert level(state, "b") == 1200.0


def test_a_served_request_is_corrected_by_its_actual_usage() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("b", 700), 100.0)
    gate.on_finish(state, req("b", 700), 100.0, Usage(150, 50), served=True)
    assert level(state, "b") == 1000.0  # 500 + (700 estimated - 200 used)
    accepted(gate, state, req("b", 100), 100.0)
    gate.on_finish(state, req("b", 100), 100.0, Usage(300, 100), served=True)
    assert level(state, "b") == 600.0  # 900 - (400 used - 100 estimated)


def test_a_served_request_without_usage_keeps_its_estimate_charged() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("b", 700), 100.0)
    gate.on_finish(state, req("b", 700), 100.0, None, served=True)
    assert level(state, "b") == 500.0


def test_concurrency_counts_one_per_request_and_refuses_at_the_cap() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("a", 10), 100.0)
    assert state.concurrent == {"a": 1}
    accepted(gate, state, req("a", 10), 100.0)
    assert state.concurrent == {"a": 2}
    assert gate.check(state, req("a", 10), ctx(100.0)) == Verdict(Reason.TENANT_CONCURRENCY, P95)
    gate.on_finish(state, req("a", 10), 100.0, None, served=True)
    assert state.concurrent == {"a": 1}
    assert gate.check(state, req("a", 10), ctx(100.0)) is None
    gate.on_finish(state, req("a", 10), 100.0, None, served=True)
    assert state.concurrent == {}


def test_a_cap_of_one_admits_the_first_and_refuses_the_second() -> None:
    gate, state = TenantQuota(PARAMS), QuotaState()
    accepted(gate, state, req("solo", 10**6), 100.0)
    assert gate.check(state, req("solo", 1), ctx(100.0)) == Verdict(Reason.TENANT_CONCURRENCY, P95)
    assert state.buckets == {}


def test_a_tenant_without_caps_passes_every_check() -> None:
    gate, state = TenantQuota(QuotaParams.model_validate({})), QuotaState()
    for _ in range(3):
        accepted(gate, state, req("z", 10**9), 100.0)
    assert state.buckets == {} and state.concurrent == {"z": 3}
    gate.on_finish(state, req("z", 10), 100.0, Usage(1, 1), served=True)
    assert state.buckets == {} and state.concurrent == {"z": 2}


def test_rates_are_read_only_when_some_tenant_has_a_concurrency_cap() -> None:
    assert TenantQuota(PARAMS).reads_rates() is True
    only_default = QuotaParams.model_validate({"default": {"max_concurrent": 1}})
    assert TenantQuota(only_default).reads_rates() is True
    tokens_only = QuotaParams.model_validate({"default": {"tokens_per_minute": 60}})
    assert TenantQuota(tokens_only).reads_rates() is False


def test_a_bucket_shrunk_by_a_new_burst_at_the_same_instant_is_cut_to_it() -> None:
    state = QuotaState()
    accepted(TenantQuota(PARAMS), state, req("b", 200), 100.0)  # 1,200 - 200 = 1,000
    smaller = QuotaParams.model_validate(
        {"default": {"tokens_per_minute": 1200, "burst_tokens": 150}}
    )
    gate = TenantQuota(smaller)  # the policy swapped at that instant, the state kept
    accepted(gate, state, req("b", 150), 100.0)
    assert level(state, "b") == 0.0  # the 1,000 cut to the new 150 before the 150 was taken
    assert refused_for(gate.check(state, req("b", 20), ctx(100.0))) == 1.0  # 20 at 20/s


def test_an_acceptance_the_check_did_not_refill_for_fills_only_up_to_the_burst() -> None:
    # in shadow mode a concurrency refusal is let through: check returned before the bucket,
    # so on_accept refills it, up to the 300-token burst (not the 600 a minute)
    gate, state = TenantQuota(PARAMS), QuotaState()
    gate.on_accept(state, req("a", 250), 100.0)
    gate.on_accept(state, req("a", 50), 100.0)  # empty, and the cap of 2 reached
    late = req("a", 100)
    verdict = gate.check(state, late, ctx(200.0))
    assert verdict is not None and verdict.reason is Reason.TENANT_CONCURRENCY
    gate.on_accept(state, late, 200.0)
    assert level(state, "a") == 200.0  # 300 - 100
