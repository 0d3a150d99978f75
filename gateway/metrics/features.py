"""Which optional features are on, as ``sluicegate_feature_enabled{feature}`` (1 on, 0 off),
read from the config and the policy in force at each scrape (a reload may switch the hot
ones). The dashboard's row of a feature shows it, so an empty panel there reads as
"switched off", not as broken (docs/observability-tests.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gateway.context import GatewayContext
from gateway.metrics.exporter import GaugeSample


def runs_enabled(ctx: GatewayContext) -> bool:
    """Agent runs (``policy.runs.enabled``, docs/runs.md) in the policy in force."""
    return ctx.full_policy is not None and ctx.full_policy.runs.enabled


FEATURES: tuple[tuple[str, Callable[[GatewayContext], bool]], ...] = (
    ("agent_runs", runs_enabled),
    ("async_jobs", lambda ctx: ctx.runtime.loaded.config.async_jobs.enabled),
    ("backend_scrape", lambda ctx: ctx.runtime.loaded.config.scrape.enabled),
    ("shared_state", lambda ctx: ctx.runtime.loaded.config.state.backend == "redis"),
    ("discovery", lambda ctx: ctx.runtime.loaded.config.discovery is not None),
)
"""Each feature's label and whether it is on: agent runs, the async handoff
(``async_jobs.enabled``), the backends' ``/metrics`` scrapes (``scrape.enabled``: every
``sluicegate_backend_*`` series), limits shared by replicas in Redis (``state.backend``,
docs/fleet.md), and backends discovered from a Kubernetes InferencePool (``discovery:``)."""


def feature_gauges(ctx: GatewayContext) -> Iterable[GaugeSample]:
    for feature, enabled in FEATURES:
        yield (
            "sluicegate_feature_enabled",
            "1 when the optional feature is switched on in the config in force, else 0",
            {"feature": feature},
            1.0 if enabled(ctx) else 0.0,
        )
