"""The tenant quota the shared state takes for a request: the policy's first enforcing
``tenant_quota`` gate (``PolicySet.first_enforcing``, which reads the plugin class alike
from the compiled and the interpreted core).

While Redis cannot answer, the decision core runs the local share of the global limits
(``policies.shared_mode.for_mode``: each of N replicas gets ``global // N``, at least 1, of
every tenant quota, with N the last replica count Redis reported).
"""

from __future__ import annotations

from policies.gates.quota import TenantQuota
from policies.gates.quota_params import TenantLimits
from policies.policy_set import PolicySet


def quota_limits(policy: PolicySet, tenant: str) -> TenantLimits | None:
    """The tenant's limits under the policy's first enforcing ``tenant_quota`` gate (None:
    no quota gate, or the tenant has no limit)."""
    gate = policy.first_enforcing(TenantQuota)
    if gate is None:
        return None
    limits = gate.params.tenants.get(tenant, gate.params.default)
    has_any = limits.tokens_per_minute is not None or limits.max_concurrent is not None
    return limits if has_any else None
