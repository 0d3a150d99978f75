"""The gauges read at scrape time from the scheduler and the estimator: queue, backlog,
in flight, saturation, fair-share deficits, the estimator's error."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.context import GatewayContext
from gateway.metrics.exporter import GaugeSample


def scheduler_gauges(ctx: GatewayContext) -> Iterable[GaugeSample]:
    """The scheduler's state as gauges (``GatewayMetrics.add_scrape_time_gauges``)."""
    stats = ctx.scheduler.stats()
    none: dict[str, str] = {}
    yield "sluicegate_queue_depth", "Requests queued in the gateway", none, stats.queued
    yield (
        "sluicegate_backlog_tokens",
        "Estimated tokens queued in the gateway",
        none,
        stats.queued_tokens,
    )
    yield (
        "sluicegate_oldest_queued_age_seconds",
        "Age of the oldest queued request",
        none,
        stats.oldest_age_s or 0.0,
    )
    yield "sluicegate_in_flight", "Requests dispatched, not released", none, stats.in_flight
    yield (
        "sluicegate_in_flight_tokens",
        "Estimated tokens in flight",
        none,
        stats.in_flight_tokens,
    )
    yield "sluicegate_saturation", "Fleet saturation the ladder sees (0-1)", none, stats.saturation
    labelled = ctx.pool.labelled()
    for backend, count in stats.in_flight_by_backend.items():
        if backend not in labelled:
            continue  # left the pool, nothing on it: its series is gone
        yield (
            "sluicegate_backend_in_flight",
            "Requests in flight per backend",
            {"backend": backend},
            count,
        )
    deficits: dict[str, float] = {}
    for tenant, deficit in stats.deficits.items():
        label = ctx.metrics.tenant_label(tenant)
        deficits[label] = deficits.get(label, 0.0) + deficit
    for label, deficit in deficits.items():
        yield (
            "sluicegate_tenant_deficit_tokens",
            "Fair-share deficit per tenant",
            {"tenant": label},
            deficit,
        )
    yield from _estimator_gauges(ctx)


def _estimator_gauges(ctx: GatewayContext) -> Iterable[GaugeSample]:
    error = getattr(ctx.estimator, "error", None)
    if error is None:
        return
    err = error()
    for kind, value in (("prompt", err.prompt_mape), ("output", err.output_mape)):
        if value is not None:
            yield (
                "sluicegate_estimator_mape",
                "Mean abs % error of token estimates (0-1)",
                {"kind": kind},
                value,
            )
