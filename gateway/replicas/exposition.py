"""The shared state's metrics: its mode, the replica count it knows, its failures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gateway.replicas.contract import SharedState
from policies.shared_mode import SharedMode


class SharedStateCollector:
    """Read at scrape time from the state object (``mode``, ``replicas``, ``failures``); one
    replica exports them too (mode local, 1 replica), so dashboards and alerts need no
    special case."""

    def __init__(self, state: Callable[[], SharedState]) -> None:
        self._state = state

    def collect(self) -> Iterator[Any]:
        state = self._state()
        mode = GaugeMetricFamily(
            "sluicegate_shared_state_mode",
            "1 for the shared state's current mode (fallback/closed: Redis does not answer)",
            labels=["mode"],
        )
        for each in SharedMode:
            mode.add_metric([each.value], 1.0 if state.mode is each else 0.0)
        yield mode
        yield GaugeMetricFamily(
            "sluicegate_fleet_replicas",
            "Gateway replicas alive at the last heartbeat",
            value=state.replicas,
        )
        yield CounterMetricFamily(
            "sluicegate_shared_state_failures",
            "Redis calls that failed or timed out",
            value=state.failures,
        )
