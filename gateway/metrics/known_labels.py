"""The label values known before any request: the series the gateway exports at 0 from the
start.

A series that appears only when its event first happens reads as "No data" on a dashboard
(an SRE cannot tell zero from broken), and ``rate()``/``increase()`` lose its first
increments (they do not count what a series already had when Prometheus first saw it).
Prometheus's instrumentation guidance therefore asks to initialise the label values known in
advance. Known here means: an enum of the product (decision and reason, outcome, deadline
result, upstream error kind, the statuses refused before scheduling, run ends, async job
states), a configured tenant (the first ``server.tenant_label_limit``, and ``other`` when
more are configured) with its default workload class, or a backend in the pool. Never a
value read from a request.

A tenant's other workload classes are not primed: its calls carry its default class unless
they ask for another, and priming every class would multiply the exposition (with the four
default classes, 20 tenants would export some 5,300 samples instead of some 1,400, and
every scrape would hold the event loop that much longer).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config.schema import GatewayConfig
from gateway.request.auth import Authenticator
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
    """The tenants named in metric labels, and the (tenant label, default workload class)
    pairs exported at 0 from the start."""

    named: frozenset[str]
    pairs: tuple[tuple[str, str], ...]

    @property
    def tenants(self) -> tuple[str, ...]:
        """Every tenant label, in the config's order (``other`` last, when there is one)."""
        return tuple(dict.fromkeys(tenant for tenant, _ in self.pairs))

    def known(self, label: str) -> bool:
        """A label whose series stay: a named tenant's, or ``other`` (where a tenant's
        requests go once a reload stops naming it)."""
        return label in self.named or label == OTHER


def tenant_labels(cfg: GatewayConfig) -> TenantLabels:
    """The tenant labels of ``cfg``: its first ``server.tenant_label_limit`` tenants by
    name, the rest as ``other``; each with its default workload class (``other`` with the
    default class of each tenant it stands for)."""
    limit = cfg.server.tenant_label_limit
    auth = Authenticator(cfg)
    pairs: dict[tuple[str, str], None] = {}
    for i, configured in enumerate(cfg.tenants):
        tenant = auth.named(configured.name)
        assert tenant is not None
        pairs[(tenant.name if i < limit else OTHER, tenant.default_class)] = None
    return TenantLabels(frozenset(t.name for t in cfg.tenants[:limit]), tuple(pairs))
