"""The gateway's own Prometheus metrics, in a registry owned by one app instance.

Labels stay low-cardinality: ``tenant`` is one of the first ``tenant_label_limit``
configured tenants or ``other``; ``class`` is a configured workload class; ``decision``,
``reason`` and ``outcome`` are the small enums from ``policies.types``.

Every series of a label value known in advance (``gateway/metrics/known_labels.py``) is
exported at 0 from the start: the tenants' when they are set (at start and on each
reload, when the series of a tenant no longer named go), the backends' and those of
the features switched on at each exposition (``on_exposition``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.metrics.known_labels import (
    DEADLINE_RESULTS,
    DECISION_REASONS,
    OTHER,
    OUTCOMES,
    REFUSED_STATUSES,
    UPSTREAM_ERROR_KINDS,
    TenantLabels,
)
from gateway.metrics.tally import CounterTally, HistogramTally, Key
from policies.build import core
from policies.types import Decision, DecisionKind, Outcome, Usage, WorkEstimate

QUEUE_WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_PROMPT, _OUTPUT = ("prompt",), ("output",)
T = TypeVar("T", CounterTally, HistogramTally)


def _version() -> str:
    try:
        return importlib.metadata.version("sluicegate")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown"


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


class GatewayMetrics:
    """Counters and histograms the request path updates; gauges read at scrape time."""

    def __init__(self, tenants: TenantLabels) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._labelled: Callable[[], Collection[str]] | None = None
        self._before_exposition: list[Callable[[], None]] = []
        r = self.registry
        labels = ["tenant", "class"]
        # The per-request series are plain numbers (``gateway/metrics/tally.py``), registered in
        # the order the prometheus_client metrics were, so /metrics reads the same.
        self.decisions = self._tally(
            CounterTally("sluicegate_decisions", "Decisions made", ["decision", "reason", *labels])
        )
        self.outcomes = self._tally(
            CounterTally(
                "sluicegate_outcomes", "Terminal outcomes of requests", ["outcome", *labels]
            )
        )
        self.queue_wait = self._tally(
            HistogramTally(
                "sluicegate_queue_wait_seconds",
                "Time spent queued in the gateway before dispatch",
                labels,
                QUEUE_WAIT_BUCKETS,
            )
        )
        self.est_tokens = self._tally(
            CounterTally(
                "sluicegate_estimated_tokens", "Estimated tokens of completed requests", ["kind"]
            )
        )
        self.actual_tokens = self._tally(
            CounterTally("sluicegate_actual_tokens", "Actual tokens reported by backends", ["kind"])
        )
        self.deadlines = self._tally(
            CounterTally("sluicegate_deadlines", "Requests with a deadline, by result", ["result"])
        )
        self.retries = self.counter(
            "sluicegate_retries", "Requests marked as client retries", labels
        )
        self.shed = self._tally(
            CounterTally("sluicegate_shed", "Requests rejected by policy", labels)
        )
        self.invalid = self.counter(
            "sluicegate_invalid_requests", "Requests refused before scheduling", ["status"]
        )
        self.upstream_errors = self.counter(
            "sluicegate_upstream_errors", "Upstream failures", ["backend", "kind"]
        )
        self.reloads = self.counter(
            "sluicegate_config_reloads", "Config reload attempts", ["result"]
        )
        for result in ("ok", "error"):
            # Exported at 0 from the start, so increase() sees the first failed reload.
            self.reloads.labels(result)
        self.config_info = Gauge(
            "sluicegate_config_info", "Active config version", ["version"], registry=r
        )
        self.build_info = Gauge(
            "sluicegate_build_info",
            "The running build: package version, and whether the decision core is compiled "
            "(mypyc), interpreted (plain Python) or mixed (a broken install)",
            ["version", "core"],
            registry=r,
        )
        self.build_info.labels(_version(), core()).set(1)
        for kind in ("prompt", "output"):
            self.est_tokens.touch((kind,))
            self.actual_tokens.touch((kind,))
        for result in DEADLINE_RESULTS:
            self.deadlines.touch((result,))
        for status in REFUSED_STATUSES:
            self.invalid.labels(status)
        self.set_tenants(tenants)

    def set_tenants(self, tenants: TenantLabels) -> None:
        """The tenants named in labels from now on: each one's series at 0 for its default
        class; the series of a tenant no longer named are removed (its requests count as
        ``other`` from now on, so its series would never move again)."""
        self.tenants = tenants
        self._named = tenants.named
        known = tenants.known
        self.decisions.forget(lambda key: known(key[2]))
        self.outcomes.forget(lambda key: known(key[1]))
        self.queue_wait.forget(lambda key: known(key[0]))
        self.shed.forget(lambda key: known(key[0]))
        forget_series(self.retries, ("tenant", "class"), lambda key: known(key[0]))
        for pair in tenants.pairs:
            for decision_reason in DECISION_REASONS:
                self.decisions.touch((*decision_reason, *pair))
            for outcome in OUTCOMES:
                self.outcomes.touch((outcome, *pair))
            self.queue_wait.touch(pair)
            self.shed.touch(pair)
            self.retries.labels(*pair)

    def tenant_label(self, tenant: str) -> str:
        return tenant if tenant in self._named else OTHER

    def on_exposition(self, prime: Callable[[], None]) -> None:
        """Call ``prime`` before each exposition: it brings series known only at that
        moment into being (or removes those no longer known)."""
        self._before_exposition.append(prime)

    def follow_backends(self, labelled: Callable[[], Collection[str]]) -> None:
        """Export per-backend series only for the backends ``labelled`` names (read at each
        exposition); the series of any other backend are removed."""
        self._labelled = labelled

    def _follow_backends(self) -> None:
        """The upstream error series of every backend in the pool, at 0 until its first
        error; those of backends gone from the pool with nothing left on them removed: a
        departed pod's name never comes back, and Prometheus's rate() and increase() end a
        series that disappears (a name that does come back starts at 0, which they read as
        a counter reset)."""
        if self._labelled is None:
            return
        keep = self._labelled()
        forget_series(self.upstream_errors, ("backend", "kind"), lambda key: key[0] in keep)
        for backend in keep:
            for kind in UPSTREAM_ERROR_KINDS:
                self.upstream_errors.labels(backend, kind)

    def counter(self, name: str, documentation: str, labels: list[str]) -> Counter:
        """A labelled counter in this registry (exported as ``name``'s ``_total``)."""
        return Counter(name, documentation, labels, registry=self.registry)

    def add_scrape_time_gauges(self, read: StatsReader) -> None:
        self.registry.register(_ScrapeTimeGauges(read))

    def _tally(self, tally: T) -> T:
        self.registry.register(tally)
        return tally

    def deadline(self, result: str) -> None:
        """A request with a deadline ended: ``result`` is "met" or "missed"."""
        self.deadlines.inc((result,))

    def decision(self, d: Decision, workload_class: str) -> None:
        tenant = self.tenant_label(d.tenant)
        self.decisions.inc((d.decision.value, d.reason.value, tenant, workload_class))
        if d.decision is DecisionKind.REJECT:
            self.shed.inc((tenant, workload_class))

    def outcome(self, outcome: Outcome, tenant: str, workload_class: str) -> None:
        label = self.tenant_label(tenant)
        self.outcomes.inc((outcome.value, label, workload_class))

    def waited(self, seconds: float, tenant: str, workload_class: str) -> None:
        label = self.tenant_label(tenant)
        self.queue_wait.observe((label, workload_class), seconds)

    def tokens(self, estimate: WorkEstimate, usage: Usage) -> None:
        self.est_tokens.inc(_PROMPT, estimate.prompt_tokens)
        self.est_tokens.inc(_OUTPUT, estimate.output_tokens)
        self.actual_tokens.inc(_PROMPT, usage.prompt_tokens)
        self.actual_tokens.inc(_OUTPUT, usage.completion_tokens)

    def refused(self, status: int) -> None:
        """A request refused before scheduling (also by the HTTP protocol, before the app)."""
        self.invalid.labels(str(status)).inc()

    def exposition(self) -> bytes:
        self._follow_backends()
        for prime in self._before_exposition:
            prime()
        return generate_latest(self.registry)


def forget_series(metric: Counter, labelnames: Sequence[str], keep: Callable[[Key], bool]) -> None:
    """Remove each series of ``metric`` whose label values (in ``labelnames``' order)
    ``keep`` refuses."""
    seen = {
        tuple(sample.labels[name] for name in labelnames)
        for family in metric.collect()
        for sample in family.samples
    }
    for key in seen:
        if not keep(key):
            metric.remove(*key)
