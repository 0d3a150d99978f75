"""The async handoff's metrics, registered in the gateway's registry.

``sluicegate_async_jobs_queued_total``: calls handed off (202). ``..._ended_total{state}``:
each job's one ending (done, failed, expired, cancelled). ``..._refused_total``: handoffs
refused because the tenant's async queue was full (the client got the 429).
``sluicegate_async_results_dropped_total{fetched}``: results let go at their TTL, by whether
anybody fetched them. Gauges at scrape time: jobs not ended, bytes of results kept.

While the handoff is on, the counters of every tenant label (and job ending) are exported,
at 0 until their first job; the series of a tenant no longer named go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gateway.async_jobs.store import TERMINAL, JobState, JobStore
from gateway.metrics.exporter import GatewayMetrics, GaugeSample, forget_series


class AsyncMetrics:
    def __init__(
        self, metrics: GatewayMetrics, store: JobStore, enabled: Callable[[], bool]
    ) -> None:
        self._metrics = metrics
        self._store = store
        self._enabled = enabled
        self._queued = metrics.counter(
            "sluicegate_async_jobs_queued", "Calls handed off as async jobs (202)", ["tenant"]
        )
        self._ended = metrics.counter(
            "sluicegate_async_jobs_ended", "Async jobs by their one ending", ["tenant", "state"]
        )
        self._refused = metrics.counter(
            "sluicegate_async_jobs_refused",
            "Handoffs refused: the tenant's async queue was full",
            ["tenant"],
        )
        self._dropped = metrics.counter(
            "sluicegate_async_results_dropped", "Async results let go at their TTL", ["fetched"]
        )
        for fetched in ("true", "false"):
            self._dropped.labels(fetched)
        metrics.add_scrape_time_gauges(self._gauges)
        metrics.on_exposition(self._prime)

    def _prime(self) -> None:
        known = self._metrics.tenants.known
        forget_series(self._queued, ("tenant",), lambda key: known(key[0]))
        forget_series(self._ended, ("tenant", "state"), lambda key: known(key[0]))
        forget_series(self._refused, ("tenant",), lambda key: known(key[0]))
        if self._enabled():
            for tenant in self._metrics.tenants.tenants:
                self._touch(tenant)

    def _touch(self, label: str) -> None:
        self._queued.labels(label)
        self._refused.labels(label)
        for state in TERMINAL:
            self._ended.labels(label, state.value)

    def _tenant(self, tenant: str) -> str:
        return self._metrics.tenant_label(tenant)

    def queued(self, tenant: str) -> None:
        label = self._tenant(tenant)
        self._touch(label)  # a tenant's first job: its endings at 0 too, for rate()
        self._queued.labels(label).inc()

    def ended(self, tenant: str, state: JobState) -> None:
        self._ended.labels(self._tenant(tenant), state.value).inc()

    def refused(self, tenant: str) -> None:
        self._refused.labels(self._tenant(tenant)).inc()

    def dropped(self, fetched: bool) -> None:
        self._dropped.labels("true" if fetched else "false").inc()

    def _gauges(self) -> Iterable[GaugeSample]:
        none: dict[str, str] = {}
        yield (
            "sluicegate_async_jobs_pending",
            "Async jobs not ended (waiting or running)",
            none,
            self._store.pending(),
        )
        yield (
            "sluicegate_async_result_bytes",
            "Bytes of async results kept in memory",
            none,
            self._store.result_bytes,
        )
