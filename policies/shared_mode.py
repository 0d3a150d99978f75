"""Where the limits shared by several replicas are decided now, and what each mode means.

The gateway's shared state reports its mode; ``rules`` is the one table that says what a
mode implies, for the policy the core runs (``for_mode``) and for the shared state itself.
While the shared store does not answer, a limit is never opened: each replica enforces its
local share of the global limits (fallback), or refuses quota-gated work (closed); and
while it answers again but a replica may still be out, a replica admits through the store
and within its local share (rejoining).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from policies.contracts import NamedGate
from policies.gates.quota import TenantQuota
from policies.gates.quota_params import QuotaParams, TenantLimits
from policies.gates.retry_budget import RetryBudget
from policies.policy_set import PolicySet, is_enforcing


class SharedMode(str, enum.Enum):  # noqa: UP042
    """The shared state's mode. A metric label: small and closed."""

    LOCAL = "local"
    """One replica: nothing is shared, the core's own gates enforce every limit."""
    SHARED = "shared"
    """The shared store answers: it decides quotas, concurrency and retries for the fleet."""
    REJOINING = "rejoining"
    """The store answers again, but a replica may still be out (in fallback, holding leases
    and retries the store does not count): admissions go through the store *and* the local
    share of the quotas and the retry floor, until every replica has been heard since this
    one rejoined."""
    FALLBACK = "fallback"
    """The store does not answer: each replica enforces its share of the global limits."""
    CLOSED = "closed"
    """The store does not answer and its limits fail closed: quota-gated work is refused."""


@dataclass(frozen=True, slots=True)
class ModeRules:
    """What a mode implies."""

    consults_store: bool
    """The request path asks the shared state before the core (leases, reservations)."""
    store_decides: bool
    """The store answers: admissions, settlements and syncs go to it, and it decides retries
    (the core's own retry budget counts this replica's retries only, so it is left out
    unless the mode divides its floor)."""
    refuses_quota_work: bool
    """A request under a tenant quota is refused (Retry-After: the store's retry interval)."""
    divides_quotas: bool
    """The core's enforcing tenant quotas are divided by the replica count."""
    divides_retry_floor: bool
    """The core's enforcing retry budget keeps its ratio, its floor divided by the count."""


_RULES: dict[SharedMode, ModeRules] = {
    SharedMode.LOCAL: ModeRules(False, False, False, False, False),
    SharedMode.SHARED: ModeRules(True, True, False, False, False),
    SharedMode.REJOINING: ModeRules(True, True, False, True, True),
    SharedMode.FALLBACK: ModeRules(True, False, False, True, True),
    SharedMode.CLOSED: ModeRules(True, False, True, False, True),
}


def rules(mode: SharedMode) -> ModeRules:
    return _RULES[mode]


def for_mode(policy: PolicySet, mode: SharedMode, replicas: int) -> PolicySet:
    """The policy the scheduler runs in ``mode`` among ``replicas`` replicas (the last count
    the store reported): with the local share of its enforcing quotas and retry floor where
    the mode says, else without the retry budget where the store decides; a limit is never
    opened."""
    rule = rules(mode)
    if rule.divides_quotas:
        policy = local_share(policy, replicas)
    if rule.divides_retry_floor:
        policy = retry_share(policy, replicas)
    elif rule.store_decides:
        policy = without_retry_budget(policy)
    return policy


def without_retry_budget(policy: PolicySet) -> PolicySet:
    """``policy`` without its enforcing ``retry_budget`` gate (the store decides retries)."""
    gates = tuple(g for g in policy.gates if not is_enforcing(g, RetryBudget))
    return policy if len(gates) == len(policy.gates) else dataclasses.replace(policy, gates=gates)


def local_share(policy: PolicySet, replicas: int) -> PolicySet:
    """``policy`` with every enforcing ``tenant_quota`` gate divided by ``replicas``."""
    if replicas <= 1:
        return policy
    gates = tuple(_divided_quota(g, replicas) for g in policy.gates)
    return dataclasses.replace(policy, gates=gates)


def retry_share(policy: PolicySet, replicas: int) -> PolicySet:
    """``policy`` with its enforcing ``retry_budget`` gate's floor divided by ``replicas``;
    its ratio is kept (each replica holds its retries to it of its own first attempts)."""
    if replicas <= 1:
        return policy
    gates = tuple(_divided_budget(g, replicas) for g in policy.gates)
    return dataclasses.replace(policy, gates=gates)


def share(limits: TenantLimits, replicas: int) -> TenantLimits:
    """One replica's share of ``limits``: each divided by ``replicas``, at least 1."""

    def part(value: int | None) -> int | None:
        return None if value is None else max(1, value // replicas)

    return TenantLimits(
        tokens_per_minute=part(limits.tokens_per_minute),
        burst_tokens=part(limits.burst_tokens),
        max_concurrent=part(limits.max_concurrent),
    )


def _divided_quota(named: NamedGate, replicas: int) -> NamedGate:
    gate = named.gate
    if not is_enforcing(named, TenantQuota):
        return named
    params = gate.params
    divided = QuotaParams(
        default=share(params.default, replicas),
        tenants={t: share(lim, replicas) for t, lim in params.tenants.items()},
    )
    return NamedGate(named.name, TenantQuota(divided), named.shadow)


def _divided_budget(named: NamedGate, replicas: int) -> NamedGate:
    if not is_enforcing(named, RetryBudget):
        return named
    params = named.gate.params
    divided = params.model_copy(update={"min_retries_per_s": params.min_retries_per_s / replicas})
    return NamedGate(named.name, RetryBudget(divided), named.shadow)
