"""The label values known before any request: the series the gateway exports at 0 from the
start.

A series that appears only when its event first happens reads as "No data" on a dashboard
(an SRE cannot tell zero from broken), and ``rate()``/``increase()`` lose its first
increments (they do not count what a series already had when Prometheus first saw it).
Prometheus's instrumentation guidance therefore asks to initialise the label values known in
advance. Known here means: an enum of the product (decision and reason, outcome, deadline
result, upstream error kind, the statuses refused before scheduling, run ends, async job
states), a configured tenant (the first ``server.tenant_label_limit``, and ``other`` when
more are configured) with each workload class it may use, or a backend in the pool. Never
a value read from a request.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config.schema import GatewayConfig
from policies.types import DecisionKind, Outcome, Reason

OTHER = "other"
"""The tenant label of every tenant past ``server.tenant_label_limit``."""

_NOT_REJECTED = {
    Reason.CAPACITY_AVAILABLE: DecisionKind.ADMIT,
    Reason.QUEUED_FOR_CAPACITY: DecisionKind.DELAY,
    Reason.DEGRADED_UNDER_LOAD: DecisionKind.DEGRADE,
}
DECISION_REASONS = tuple(
    (_NOT_REJECTED.get(reason, DecisionKind.REJECT).value, reason.value) for reason in Reason
)
"""The (decision, reason) pairs the core makes: each reason belongs to one kind of decision
(every reason but these three explains a rejection)."""
OUTCOMES = tuple(outcome.value for outcome in Outcome)
DEADLINE_RESULTS = ("met", "missed")
UPSTREAM_ERROR_KINDS = ("connect", "busy", "protocol", "stall", "stream")
"""How a backend failed a request: refused the connection, answered busy, broke the
protocol, stalled (down, no progress, silence), or broke a stream after it began."""
REFUSED_STATUSES = ("400", "401", "404", "408", "413", "431")
"""The statuses of a refusal before scheduling (408 and 431 by the HTTP protocol, before
the app)."""


@dataclass(frozen=True)
class TenantLabels:
    """The tenants named in metric labels, and the (tenant label, workload class) pairs a
    request can carry."""

    named: frozenset[str]
    pairs: tuple[tuple[str, str], ...]

    @property
    def tenants(self) -> tuple[str, ...]:
        """Every tenant label, in the config's order (``other`` last, when there is one)."""
        return tuple(dict.fromkeys(tenant for tenant, _ in self.pairs))

    def label(self, tenant: str) -> str:
        return tenant if tenant in self.named else OTHER

    def known(self, label: str) -> bool:
        """A label whose series stay: a named tenant's, or ``other`` (where a tenant's
        requests go once a reload stops naming it)."""
        return label in self.named or label == OTHER


def tenant_labels(cfg: GatewayConfig) -> TenantLabels:
    """The tenant labels of ``cfg``: its first ``server.tenant_label_limit`` tenants by
    name, the rest as ``other``; each with the workload classes it may use."""
    limit = cfg.server.tenant_label_limit
    named = [t.name for t in cfg.tenants[:limit]]
    pairs: dict[tuple[str, str], None] = {}
    for i, tenant in enumerate(cfg.tenants):
        label = tenant.name if i < limit else OTHER
        for workload_class in tenant.workload_classes or cfg.workload_classes:
            pairs[(label, workload_class)] = None
    return TenantLabels(frozenset(named), tuple(pairs))
