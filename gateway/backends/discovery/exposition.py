"""Discovery's metrics, read at scrape time from the watcher: how many backends it found,
whether the API server is failing it now, and its failures and lists in all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from gateway.backends.discovery.kubernetes_watch import InferencePoolWatcher


class DiscoveryCollector:
    def __init__(self, watcher: InferencePoolWatcher) -> None:
        self._watcher = watcher

    def collect(self) -> Iterator[Any]:
        w = self._watcher
        yield GaugeMetricFamily(
            "sluicegate_discovery_backends",
            "Backends discovery found at its last list or watch event (ready pods x ports)",
            value=w.found,
        )
        yield GaugeMetricFamily(
            "sluicegate_discovery_failing",
            "1 while the API server fails discovery (the backends last known are kept)",
            value=1.0 if w.failures else 0.0,
        )
        yield CounterMetricFamily(
            "sluicegate_discovery_errors",
            "API server calls of discovery that failed",
            value=w.errors,
        )
        yield CounterMetricFamily(
            "sluicegate_discovery_lists",
            "Lists of the pool and its pods (first, relist, resync)",
            value=w.lists,
        )
