"""The scraper's view, exposed: gateway metrics ``sluicegate_backend_*`` and the JSON of
``GET /admin/backends``. Both read the scraper's last results; neither scrapes.

Health (``/health`` probes) belongs to the backend pool, which passes a ``health``
lookup in; without one, the health gauge is not exported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from gateway.backends.scrape.derive import Capacity, PhaseBreakdown, Quantile
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeState
from policies.backends import Health
from policies.types import Clock

HealthLookup = Callable[[str], Health | None]

GAUGES: tuple[tuple[str, str, str], ...] = (
    # (metric suffix, BackendView field, help)
    ("waiting", "waiting", "Requests waiting in the backend's queue (vLLM's own gauge)."),
    ("running", "running", "Requests in the backend's running batch."),
    ("kv_cache_usage", "kv_cache_usage", "KV-cache usage of the backend, 0..1."),
    (
        "capacity_estimate",
        "capacity_estimate",
        "min(KV tokens / p90 prompt tokens, max_num_seqs), recomputed each scrape.",
    ),
    ("queue_time_p90_seconds", "queue_time_p90_s", "p90 queue time over the signal window."),
    (
        "itl_seconds",
        "itl_s",
        "The backend's mean inter-token latency over the last second: its step time now.",
    ),
    (
        "itl_floor_seconds",
        "itl_floor_s",
        "The lowest such mean in the last 15 minutes: its step time with a light batch.",
    ),
    (
        "prefix_cache_hit_rate",
        "prefix_cache_hit_rate",
        "Prompt tokens the backend's prefix cache served over those looked up (its counters).",
    ),
    ("signal_age_seconds", "signal_age_s", "Age of the newest successful scrape."),
    ("stale", "stale", "1 when the signal is older than the max age (counts as saturated)."),
)


class BackendSignalsCollector:
    """A prometheus_client custom collector; values are computed at collection time."""

    def __init__(self, scraper: MetricsScraper, clock: Clock, health: HealthLookup | None) -> None:
        self._scraper, self._clock, self._health = scraper, clock, health

    def describe(self) -> Iterator[Metric]:
        return self._families(with_samples=False)

    def collect(self) -> Iterator[Metric]:
        return self._families(with_samples=True)

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        now, names = self._clock(), self._scraper.names if with_samples else ()
        for suffix, field, help_ in GAUGES:
            family = GaugeMetricFamily(f"sluicegate_backend_{suffix}", help_, labels=["backend"])
            for name in names:
                value = self._scraper.signals(name, now).get(field)
                if value is not None:
                    family.add_metric([name], float(value))  # type: ignore[arg-type]
            yield family
        failures = CounterMetricFamily(
            "sluicegate_backend_scrape_failures",
            "Failed scrapes of the backend's /metrics (status, size, timeout, garbage).",
            labels=["backend"],
        )
        for name in names:
            state = self._scraper.state(name)
            failures.add_metric([name], state.failures_total if state else 0)
        yield failures
        if self._health is not None:
            yield self._health_family(names)

    def _health_family(self, names: tuple[str, ...]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "sluicegate_backend_health",
            "1 for the backend's current health state (healthy, degraded, down).",
            labels=["backend", "state"],
        )
        for name in names:
            current = self._health(name) if self._health else None
            for state in Health:
                family.add_metric([name, state.value], 1.0 if state is current else 0.0)
        return family


def register_backend_metrics(
    registry: CollectorRegistry,
    scraper: MetricsScraper,
    *,
    clock: Clock,
    health: HealthLookup | None = None,
) -> BackendSignalsCollector:
    collector = BackendSignalsCollector(scraper, clock, health)
    registry.register(collector)
    return collector


def backends_admin(
    scraper: MetricsScraper, now: float, health: HealthLookup | None = None
) -> dict[str, Any]:
    """The body of ``GET /admin/backends``: per backend, the view fields plus the detail
    behind them (quantile bounds, rates, phase shares, capacity derivation, scrape state)."""
    backends = []
    for name in scraper.names:
        state = scraper.state(name)
        if state is None:
            continue
        current = health(name) if health is not None else None
        entry: dict[str, Any] = {
            "name": name,
            "health": current.value if current is not None else None,
            "signals": scraper.signals(name, now),
            "scrape": _scrape_state(state, now),
        }
        entry.update(_detail(state))
        backends.append(entry)
    stale_after = scraper.settings.stale_after_s
    return {"at": now, "stale_after_s": stale_after, "backends": backends}


def _scrape_state(state: ScrapeState, now: float) -> dict[str, Any]:
    return {
        "engine": state.engine.engine,
        "metrics_url": state.target.metrics_url,
        "last_success_age_s": None
        if state.last_success_at is None
        else now - state.last_success_at,
        "last_duration_s": state.last_duration_s,
        "consecutive_failures": state.consecutive_failures,
        "failures_total": state.failures_total,
        "last_error": state.last_error,
    }


def _detail(state: ScrapeState) -> dict[str, Any]:
    d = state.derived
    if d is None:
        return {}
    return {
        "window_s": d.window_s,
        "waiting_by_reason": d.waiting_by_reason,
        "rates_per_s": d.rates,
        "latency": {
            family: {f"p{round(q * 100)}": _quantile_json(est) for q, est in by_q.items()}
            for family, by_q in d.latency.items()
        },
        "phases": _phases_json(d.phases) if d.phases is not None else None,
        "capacity": _capacity_json(d.capacity, d.capacity_basis) if d.capacity else None,
    }


def _phases_json(p: PhaseBreakdown) -> dict[str, Any]:
    seconds = {"queue": p.queue_s, "prefill": p.prefill_s, "decode": p.decode_s}
    return {
        "requests": p.requests,
        "seconds": {**seconds, "e2e": p.e2e_s},
        "shares": {phase: p.share(value) for phase, value in seconds.items()},
    }


def _capacity_json(cap: Capacity, basis: str) -> dict[str, Any]:
    return {
        "value": cap.value,
        "limited_by": cap.limited_by,
        "basis": basis,
        "kv_cache_tokens": cap.kv_cache_tokens,
        "p90_prompt_tokens": cap.p90_prompt_tokens,
        "kv_bound": cap.kv_bound,
        "max_num_seqs": cap.max_num_seqs,
        "p90_output_tokens": cap.p90_output_tokens,
        "kv_bound_with_output": cap.kv_bound_with_output,
    }


def _quantile_json(est: Quantile) -> dict[str, Any]:
    return {
        "value": est.value,
        "bucket": [est.lower, None if est.upper == float("inf") else est.upper],
        "in_first_bucket": est.in_first_bucket,
        "in_overflow": est.in_overflow,
    }
