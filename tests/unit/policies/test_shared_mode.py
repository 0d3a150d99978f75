"""The shared state's modes: every mode maps to its rules, and the policy the core runs in
each never opens a limit (a quota is divided, never lifted, when the store fails)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.gates.quota import TenantQuota
from policies.gates.quota_params import TenantLimits
from policies.gates.retry_budget import RetryBudget
from policies.policy_set import PolicySet
from policies.registry import build_policy
from policies.shared_mode import ModeRules, SharedMode, for_mode, rules, share

GATES = [
    {"name": "budget", "type": "retry_budget", "parameters": {"min_retries_per_s": 0.9}},
    {
        "name": "quota",
        "type": "tenant_quota",
        "parameters": {
            "default": {"tokens_per_minute": 9000, "max_concurrent": 9},
            "tenants": {"big": {"tokens_per_minute": 90000}},
        },
    },
    {
        "name": "watch",
        "type": "tenant_quota",
        "shadow": True,
        "parameters": {"default": {"max_concurrent": 9}},
    },
]


def policy() -> PolicySet:
    return build_policy({"gates": GATES})


def gate(p: PolicySet, name: str) -> Any:
    return next(g.gate for g in p.gates if g.name == name)


def test_every_mode_has_its_rules_and_its_metric_label() -> None:
    assert {m.value for m in SharedMode} == {"local", "shared", "rejoining", "fallback", "closed"}
    assert rules(SharedMode.LOCAL) == ModeRules(False, False, False, False, False)
    assert rules(SharedMode.SHARED) == ModeRules(True, True, False, False, False)
    assert rules(SharedMode.REJOINING) == ModeRules(True, True, False, True, True)
    assert rules(SharedMode.FALLBACK) == ModeRules(True, False, False, True, True)
    assert rules(SharedMode.CLOSED) == ModeRules(True, False, True, False, True)


@pytest.mark.parametrize("mode", list(SharedMode))
def test_no_mode_opens_a_limit(mode: SharedMode) -> None:
    full = policy()
    for replicas in (1, 2, 3):
        run = for_mode(full, mode, replicas)
        quota = gate(run, "quota").params
        assert quota.default.max_concurrent <= 9 and quota.default.tokens_per_minute <= 9000
        assert quota.tenants["big"].tokens_per_minute <= 90000
        assert [g.name for g in run.gates][-2:] == ["quota", "watch"]
        assert gate(run, "watch") is gate(full, "watch")  # a shadow gate is left as it is
        budget = next((g.gate for g in run.gates if g.name == "budget"), None)
        rule = rules(mode)
        assert (budget is None) is (rule.store_decides and not rule.divides_retry_floor)
        if budget is not None:
            assert 0 < budget.params.min_retries_per_s <= 0.9
            assert budget.params.ratio == gate(full, "budget").params.ratio


def test_fallback_divides_quotas_and_the_retry_floor_closed_the_floor_only() -> None:
    full = policy()
    fallback = for_mode(full, SharedMode.FALLBACK, 3)
    assert type(gate(fallback, "quota")) is TenantQuota
    assert gate(fallback, "quota").params.default == TenantLimits(
        tokens_per_minute=3000, max_concurrent=3
    )
    assert gate(fallback, "quota").params.tenants["big"].tokens_per_minute == 30000
    assert type(gate(fallback, "budget")) is RetryBudget
    assert gate(fallback, "budget").params.min_retries_per_s == pytest.approx(0.3)
    # rejoining: the local share holds beside the store's limits, as in fallback
    rejoining = for_mode(full, SharedMode.REJOINING, 3)
    assert gate(rejoining, "quota").params == gate(fallback, "quota").params
    assert gate(rejoining, "budget").params == gate(fallback, "budget").params
    closed = for_mode(full, SharedMode.CLOSED, 3)
    assert gate(closed, "quota") is gate(full, "quota")
    assert gate(closed, "budget").params.min_retries_per_s == pytest.approx(0.3)
    assert for_mode(full, SharedMode.FALLBACK, 1) is full
    assert for_mode(full, SharedMode.LOCAL, 3) is full


def test_a_share_is_at_least_one() -> None:
    assert share(TenantLimits(tokens_per_minute=2, burst_tokens=5, max_concurrent=1), 4) == (
        TenantLimits(tokens_per_minute=1, burst_tokens=1, max_concurrent=1)
    )
    assert share(TenantLimits(), 4) == TenantLimits()
