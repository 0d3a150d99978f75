"""The local share of the global limits, enforced while Redis cannot answer.

Each of N replicas gets ``global // N`` (at least 1) of every tenant quota: tokens per
minute, burst and ``max_concurrent``, with N the last replica count Redis reported. N
replicas together then stay within the global limit, never the full limit each.
"""

from __future__ import annotations

import dataclasses

from gateway.state.gate_kind import is_a
from gateway.state.retry_share import retry_share, without_retry_budget
from policies.contracts import NamedGate
from policies.gates.quota import TenantQuota
from policies.gates.quota_params import QuotaParams, TenantLimits
from policies.policy_set import PolicySet


def quota_limits(policy: PolicySet, tenant: str) -> TenantLimits | None:
    """The tenant's limits under the policy's first enforcing ``tenant_quota`` gate (None:
    no quota gate, or the tenant has no limit)."""
    for named in policy.gates:
        gate = named.gate
        if is_a(gate, TenantQuota) and not named.shadow:
            params = gate.params
            limits = params.tenants.get(tenant, params.default)
            has_any = limits.tokens_per_minute is not None or limits.max_concurrent is not None
            return limits if has_any else None
    return None


def effective(policy: PolicySet, mode: str, replicas: int) -> PolicySet:
    """The policy the scheduler runs in ``mode``: Redis decides retries when shared; the
    local share in fallback (and the retry budget's share when closed)."""
    if mode == "shared":
        return without_retry_budget(policy)
    if mode == "fallback":
        return retry_share(local_share(policy, replicas), replicas)
    return retry_share(policy, replicas) if mode == "closed" else policy


def local_share(policy: PolicySet, replicas: int) -> PolicySet:
    """``policy`` with every enforcing ``tenant_quota`` gate divided by ``replicas``."""
    if replicas <= 1:
        return policy
    gates = tuple(_divided(named, replicas) for named in policy.gates)
    return dataclasses.replace(policy, gates=gates)


def _divided(named: NamedGate, replicas: int) -> NamedGate:
    gate = named.gate
    if not is_a(gate, TenantQuota) or named.shadow:
        return named
    params = gate.params
    divided = QuotaParams(
        default=share(params.default, replicas),
        tenants={t: share(lim, replicas) for t, lim in params.tenants.items()},
    )
    return NamedGate(named.name, TenantQuota(divided), named.shadow)


def share(limits: TenantLimits, replicas: int) -> TenantLimits:
    def part(value: int | None) -> int | None:
        return None if value is None else max(1, value // replicas)

    return TenantLimits(
        tokens_per_minute=part(limits.tokens_per_minute),
        burst_tokens=part(limits.burst_tokens),
        max_concurrent=part(limits.max_concurrent),
    )
