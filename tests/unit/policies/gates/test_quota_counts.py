"""``tenant_quota`` with ``counts``: all prompt tokens (what an API bills) or the tokens the
engine computes (the prompt its prefix cache does not serve, and the output), to the token."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from policies.contracts import GateContext
from policies.gates.quota import QuotaState, TenantQuota
from policies.gates.quota_params import QuotaCounts, QuotaParams
from policies.types import Reason, RequestInfo, Usage, WorkEstimate

TPM = 600  # 10 tokens/s, a 600-token bucket


def gate(counts: str | None) -> TenantQuota:
    extra = {} if counts is None else {"counts": counts}
    return TenantQuota(QuotaParams.model_validate({"default": {"tokens_per_minute": TPM}, **extra}))


def req(prompt: int, cached: int, output: int = 50) -> RequestInfo:
    estimate = WorkEstimate(prompt, output, cached_prompt_tokens=cached)
    return RequestInfo(f"r-{prompt}-{cached}", "t", "interactive", "m", estimate, 0.0)


def ctx(now: float) -> GateContext:
    return GateContext(now, 0, None, None, True)


def admit(g: TenantQuota, state: QuotaState, r: RequestInfo, now: float = 0.0) -> None:
    assert g.check(state, r, ctx(now)) is None
    g.on_accept(state, r, now)


def _level_after(r: RequestInfo, usage: Usage) -> float:
    """Tenant t's bucket level after ``r`` was admitted by a ``computed_tokens`` quota and
    finished having used ``usage``."""
    g, state = gate("computed_tokens"), QuotaState()
    admit(g, state, r)
    g.on_finish(state, r, 0.0, usage, True)
    return state.buckets["t"].level


def test_the_default_counts_every_prompt_token_cached_or_not() -> None:
    g, state = gate(None), QuotaState()
    assert g.params.counts is QuotaCounts.PROMPT_TOKENS
    admit(g, state, req(400, cached=350))
    assert state.buckets["t"].level == 600 - 450
    g.on_finish(state, req(400, cached=350), 0.0, Usage(400, 50, cached_tokens=384), True)
    assert state.buckets["t"].level == 600 - 450


def test_computed_tokens_charge_the_uncached_prompt_and_the_output() -> None:
    g, state = gate("computed_tokens"), QuotaState()
    admit(g, state, req(400, cached=350))
    assert state.buckets["t"].level == 600 - 100
    verdict = g.check(state, req(1000, cached=0), ctx(0.0))
    assert verdict is not None and verdict.reason is Reason.TENANT_QUOTA
    assert verdict.retry_after_s == pytest.approx((600 - 500) / 10.0)  # needs its 600 (full)


def test_release_corrects_with_the_cached_tokens_the_engine_reports() -> None:
    level = _level_after(req(400, cached=350), Usage(400, 40, cached_tokens=256))
    assert level == 600 - (400 - 256 + 40)


def test_without_reported_cached_tokens_release_applies_the_admission_hit_rate() -> None:
    level = _level_after(req(400, cached=300), Usage(480, 40))  # a hit rate of 0.75
    assert level == 600 - (480 - 360 + 40)


def test_reported_cached_tokens_beyond_the_prompt_count_no_more_than_the_prompt() -> None:
    level = _level_after(req(400, cached=0), Usage(100, 40, cached_tokens=500))
    assert level == 600 - 40


def test_an_empty_prompt_without_reported_cache_costs_its_output() -> None:
    level = _level_after(req(0, cached=0), Usage(0, 30))
    assert level == 600 - 30


def test_a_request_that_never_reached_a_backend_is_refunded_what_it_was_charged() -> None:
    g, state = gate("computed_tokens"), QuotaState()
    admit(g, state, req(100, cached=0))
    r = req(400, cached=350)
    admit(g, state, r)
    g.on_finish(state, r, 0.0, None, False)
    assert state.buckets["t"].level == 600 - 150


def test_an_unknown_count_is_a_config_error() -> None:
    with pytest.raises(ValidationError):
        gate("cached_tokens")


def test_an_estimate_without_a_prompt_charges_the_whole_actual_prompt() -> None:
    level = _level_after(req(0, cached=0), Usage(100, 30))
    assert level == 600 - 130


def test_a_one_token_estimate_carries_its_hit_rate_to_the_actual_prompt() -> None:
    level = _level_after(req(1, cached=1, output=0), Usage(100, 30))
    assert level == 600 - 30
