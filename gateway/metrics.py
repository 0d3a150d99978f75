"""The gateway's own Prometheus metrics, in a registry owned by one app instance.

Labels stay low-cardinality: ``tenant`` is one of the first ``tenant_label_limit``
configured tenants or ``other``; ``class`` is a configured workload class; ``decision``,
``reason`` and ``outcome`` are the small enums from ``policies.types``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from policies.types import Decision, DecisionKind, Outcome, Usage, WorkEstimate

QUEUE_WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
OTHER = "other"

GaugeSample = tuple[str, str, Mapping[str, str], float]
"""(metric name, help, labels, value) of a gauge read at scrape time."""
StatsReader = Callable[[], Iterable[GaugeSample]]


class _ScrapeTimeGauges(Collector):
    def __init__(self, read: StatsReader) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for name, help_, labels, value in self._read():
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, help_, labels=list(labels))
            family.add_metric(list(labels.values()), value)
        yield from families.values()


class _Children:
    """``metric.labels(*values)`` looked up once per label combination, then from a dict
    (prometheus_client's ``labels`` re-validates and locks on every call). Every label
    value here comes from a bounded set, so the dict stays small."""

    def __init__(self, metric: Counter | Histogram) -> None:
        self._labels = metric.labels
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is None:
            child = self._cache[values] = self._labels(*values)
        return child


class GatewayMetrics:
    """Counters and histograms the request path updates; gauges read at scrape time."""

    def __init__(self, tenants: Sequence[str], tenant_label_limit: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.set_tenants(tenants, tenant_label_limit)
        r = self.registry
        labels = ["tenant", "class"]
        self.decisions = Counter(
            "sluicegate_decisions", "Decisions made", ["decision", "reason", *labels], registry=r
        )
        self.outcomes = Counter(
            "sluicegate_outcomes", "Terminal outcomes of requests", ["outcome", *labels], registry=r
        )
        self.queue_wait = Histogram(
            "sluicegate_queue_wait_seconds",
            "Time spent queued in the gateway before dispatch",
            labels,
            buckets=QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self.est_tokens = Counter(
            "sluicegate_estimated_tokens",
            "Estimated tokens of completed requests",
            ["kind"],
            registry=r,
        )
        self.actual_tokens = Counter(
            "sluicegate_actual_tokens", "Actual tokens reported by backends", ["kind"], registry=r
        )
        self.deadlines = Counter(
            "sluicegate_deadlines", "Requests with a deadline, by result", ["result"], registry=r
        )
        self.retries = Counter(
            "sluicegate_retries", "Requests marked as client retries", labels, registry=r
        )
        self.shed = Counter("sluicegate_shed", "Requests rejected by policy", labels, registry=r)
        self.invalid = Counter(
            "sluicegate_invalid_requests",
            "Requests refused before scheduling",
            ["status"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "sluicegate_upstream_errors", "Upstream failures", ["backend", "kind"], registry=r
        )
        self.reloads = Counter(
            "sluicegate_config_reloads", "Config reload attempts", ["result"], registry=r
        )
        for result in ("ok", "error"):
            # Exported at 0 from the start, so increase() sees the first failed reload.
            self.reloads.labels(result)
        self.config_info = Gauge(
            "sluicegate_config_info", "Active config version", ["version"], registry=r
        )
        self._decision = _Children(self.decisions)
        self._shed = _Children(self.shed)
        self._outcome = _Children(self.outcomes)
        self._waited = _Children(self.queue_wait)
        self.deadline = _Children(self.deadlines)
        """``deadline("met")`` is ``deadlines.labels("met")``, cached."""
        self._est = {k: self.est_tokens.labels(k) for k in ("prompt", "output")}
        self._actual = {k: self.actual_tokens.labels(k) for k in ("prompt", "output")}

    def set_tenants(self, tenants: Sequence[str], limit: int) -> None:
        self._named_tenants = frozenset(list(tenants)[:limit])

    def tenant_label(self, tenant: str) -> str:
        return tenant if tenant in self._named_tenants else OTHER

    def add_scrape_time_gauges(self, read: StatsReader) -> None:
        self.registry.register(_ScrapeTimeGauges(read))

    def decision(self, d: Decision, workload_class: str) -> None:
        tenant = self.tenant_label(d.tenant)
        self._decision(d.decision.value, d.reason.value, tenant, workload_class).inc()
        if d.decision is DecisionKind.REJECT:
            self._shed(tenant, workload_class).inc()

    def outcome(self, outcome: Outcome, tenant: str, workload_class: str) -> None:
        self._outcome(outcome.value, self.tenant_label(tenant), workload_class).inc()

    def waited(self, seconds: float, tenant: str, workload_class: str) -> None:
        self._waited(self.tenant_label(tenant), workload_class).observe(seconds)

    def tokens(self, estimate: WorkEstimate, usage: Usage) -> None:
        self._est["prompt"].inc(estimate.prompt_tokens)
        self._est["output"].inc(estimate.output_tokens)
        self._actual["prompt"].inc(usage.prompt_tokens)
        self._actual["output"].inc(usage.completion_tokens)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
