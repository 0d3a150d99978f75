"""Metrics of agent runs (docs/runs.md): runs started and ended (completed, abandoned,
cancelled), run latency, the tokens of runs that never completed ("wasted"), and the
reservations outstanding.

The counts live in the run book (``Scheduler.runs.stats``) and are exported at scrape
time, so nothing is counted twice on the request path; the latency histogram is observed
once per completed run as the dispatcher reports the run's end. While runs are on, every
tenant label and run end is exported, at 0 until its first run; while they are off, only
what runs there were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.metrics.exporter import GatewayMetrics
from gateway.metrics.tally import HistogramTally
from policies.runs.run import RunEnd, RunEnded, RunStats

RUN_LATENCY_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


Tenants = Callable[[], Sequence[str]]
"""The tenant labels whose run series are exported at 0 (none while runs are off)."""


class RunMetrics:
    def __init__(
        self, metrics: GatewayMetrics, stats: Callable[[], RunStats], enabled: Callable[[], bool]
    ) -> None:
        self._metrics = metrics
        self._enabled = enabled
        self._label = metrics.tenant_label
        self.latency = HistogramTally(
            "sluicegate_run_latency_seconds",
            "Completed agent runs, from the arrival of their first call to the end of their last",
            ["tenant"],
            RUN_LATENCY_BUCKETS,
        )
        metrics.registry.register(self.latency)
        metrics.registry.register(_RunCounts(stats, metrics.tenant_label, self._primed))
        metrics.on_exposition(self._prime)

    def _primed(self) -> Sequence[str]:
        return self._metrics.tenants.tenants if self._enabled() else ()

    def _prime(self) -> None:
        known = self._metrics.tenants.known
        self.latency.forget(lambda key: known(key[0]))
        for tenant in self._primed():
            self.latency.touch((tenant,))

    def ended(self, ended: RunEnded) -> None:
        if ended.end is RunEnd.COMPLETED:
            self.latency.observe((self._label(ended.tenant),), ended.ended_at - ended.started_at)


class _RunCounts(Collector):
    def __init__(
        self, stats: Callable[[], RunStats], label: Callable[[str], str], primed: Tenants
    ) -> None:
        self._stats = stats
        self._label = label
        self._primed = primed

    def collect(self) -> Iterable[Metric]:
        stats = self._stats()
        primed = self._primed()
        started = CounterMetricFamily(
            "sluicegate_runs_started", "Agent runs admitted (their first call)", labels=["tenant"]
        )
        for tenant, n in _by_label(stats.started, self._label, primed).items():
            started.add_metric([tenant], n)
        ended = CounterMetricFamily(
            "sluicegate_runs_ended", "Agent runs ended, by how", labels=["tenant", "end"]
        )
        per = {(tenant, end.value): 0 for tenant in primed for end in RunEnd}
        for (tenant, end), n in stats.ended.items():
            key = (self._label(tenant), end)
            per[key] = per.get(key, 0) + n
        for (tenant, end), n in per.items():
            ended.add_metric([tenant, end], n)
        wasted = CounterMetricFamily(
            "sluicegate_run_wasted_tokens",
            "Tokens spent on agent runs that did not complete (abandoned or cancelled)",
            labels=["tenant"],
        )
        for tenant, n in _by_label(stats.wasted_tokens, self._label, primed).items():
            wasted.add_metric([tenant], n)
        yield from (started, ended, wasted, *_gauges(stats))


def _gauges(stats: RunStats) -> Iterable[Metric]:
    yield GaugeMetricFamily("sluicegate_runs_open", "Agent runs open now", stats.open_runs)
    yield GaugeMetricFamily(
        "sluicegate_run_reserved_tokens",
        "Tokens reserved by open agent runs and not yet drawn (reservations outstanding)",
        stats.promised_tokens,
    )
    yield GaugeMetricFamily(
        "sluicegate_run_waiting_calls",
        "Calls waiting in their run's own queue (beyond its fan-out ceiling)",
        stats.held_calls,
    )
    if stats.reservation_error is not None:
        yield GaugeMetricFamily(
            "sluicegate_run_reservation_error",
            "Mean relative error of learned run reservations against the tokens used (0-1+)",
            stats.reservation_error,
        )


def _by_label(
    values: dict[str, int], label: Callable[[str], str], primed: Sequence[str]
) -> dict[str, int]:
    out = dict.fromkeys(primed, 0)
    for tenant, n in values.items():
        key = label(tenant)
        out[key] = out.get(key, 0) + n
    return out
