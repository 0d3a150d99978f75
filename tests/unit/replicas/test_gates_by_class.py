"""The gateway finds the fleet's gates by plugin class, also with the compiled core (where an
interpreted ``isinstance`` against a compiled gate class answers True for any gate)."""

from __future__ import annotations

from gateway.replicas.quota_limits import quota_limits
from gateway.replicas.retry_share import retry_rule
from policies.gates.quota import TenantQuota
from policies.gates.retry_budget import RetryBudget
from policies.registry import build_policy
from policies.shared_mode import local_share, without_retry_budget

GATES = [
    {"name": "budget", "type": "retry_budget", "parameters": {"ratio": 0.25}},
    {"name": "quota", "type": "tenant_quota", "parameters": {"default": {"max_concurrent": 9}}},
]


def test_each_gate_is_found_by_its_own_class_whatever_the_order() -> None:
    for gates in (GATES, GATES[::-1]):
        policy = build_policy({"gates": gates})
        # an isinstance first, as the request path asks: it must not spoil later answers
        assert isinstance(next(g.gate for g in policy.gates if g.name == "quota"), TenantQuota)
        limits = quota_limits(policy, "acme")
        assert limits is not None and limits.max_concurrent == 9
        rule = retry_rule(policy)
        assert rule is not None and rule.params.ratio == 0.25
        assert [g.name for g in without_retry_budget(policy).gates] == ["quota"]
        shared = local_share(policy, 3)
        quota = next(g.gate for g in shared.gates if g.name == "quota")
        budget = next(g.gate for g in shared.gates if g.name == "budget")
        assert type(budget) is RetryBudget and type(quota) is TenantQuota
        assert quota.params.default.max_concurrent == 3
