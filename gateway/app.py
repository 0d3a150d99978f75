"""The composition root: ``build_gateway`` (the context and the work beside the requests,
for any front), ``http_app`` (the HTTP front over it, ``front/routes.py``), ``create_app``
(both). Fleet mode's Redis wiring is ``replicas/wiring.py``; the scheduler's gauges are
``metrics/gauges.py``.

Handlers receive a ``GatewayContext`` through closures; nothing reaches into
``app.state`` on the request path (``app.state.ctx`` and ``app.state.async_jobs`` are
exposed for tests and tools).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette

from gateway.admission.dispatcher import Admission, SchedulerLike
from gateway.async_jobs.runner import AsyncJobs
from gateway.backends.discovery.apply import first_sync, kubernetes_discovery, scrape_targets
from gateway.backends.discovery.exposition import DiscoveryCollector
from gateway.backends.pool import BackendPool
from gateway.backends.scrape.exposition import register_backend_metrics
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeSettings
from gateway.config.reload import Reloader, build_loaded_policy
from gateway.config.schema import GatewayConfig, LoadedConfig, config_version
from gateway.config.yaml_lines import LineIndex
from gateway.context import GatewayContext, Runtime
from gateway.forward.stall import StallBounds
from gateway.front.routes import http_front
from gateway.metrics.event_loop import event_loop_gauges
from gateway.metrics.exporter import GatewayMetrics
from gateway.metrics.features import feature_gauges, runs_enabled
from gateway.metrics.gauges import scheduler_gauges
from gateway.metrics.known_labels import tenant_labels
from gateway.metrics.records import RecordSink
from gateway.metrics.runs import RunMetrics
from gateway.replicas.exposition import SharedStateCollector
from gateway.replicas.local import LocalState
from gateway.request.auth import Authenticator
from policies.engine.scheduler import Scheduler
from policies.estimate import TokenEstimator
from policies.policy_set import PolicySet
from policies.shared_mode import for_mode
from policies.types import Clock

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from gateway.backends.discovery.kubernetes_watch import InferencePoolWatcher


@dataclass(frozen=True)
class Gateway:
    """The gateway without a front: what every front is given (``ctx``, ``async_jobs``),
    and ``running``, the work beside the requests (dispatcher, probes, scrapes, reloads,
    discovery, async jobs) for as long as a front serves."""

    ctx: GatewayContext
    async_jobs: AsyncJobs
    """Calls handed off with ``Prefer: respond-async`` (``async_jobs:``, docs/async.md)."""
    running: Callable[[], contextlib.AbstractAsyncContextManager[None]]
    scraper: MetricsScraper | None = None
    """The backends' ``/metrics`` scrapes when enabled (the HTTP front's admin page)."""


def create_app(config: GatewayConfig | LoadedConfig, **options: Any) -> Starlette:
    """The gateway behind its HTTP front: ``http_app(build_gateway(config, **options))``."""
    return http_app(build_gateway(config, **options))


def build_gateway(
    config: GatewayConfig | LoadedConfig,
    *,
    clock: Clock = time.monotonic,
    transport: httpx.AsyncBaseTransport | None = None,
    scheduler: SchedulerLike | None = None,
    estimator: TokenEstimator | None = None,
    config_path: str | Path | None = None,
    rng: random.Random | None = None,
    background: bool = True,
    batch_records: bool = False,
    span_exporter: SpanExporter | None = None,
) -> Gateway:
    """Build the gateway. ``transport`` replaces the network for every upstream call
    (tests); ``config_path`` enables SIGHUP/file-change reload; ``background=False`` skips
    health probes, scraping and file watching (the dispatcher always runs);
    ``batch_records`` logs the decision records of one event-loop turn as one message;
    ``span_exporter`` replaces the OTLP/HTTP exporter when ``tracing:`` is on (tests).

    Raises ``gateway.config.schema.ConfigError`` (every error located) for an invalid policy.
    """
    loaded = config if isinstance(config, LoadedConfig) else _as_loaded(config)
    scheduler = scheduler or Scheduler(build_loaded_policy(loaded), clock=clock, rng=rng)
    closers: list[Any] = []
    ctx, scraper = _context(
        loaded, scheduler, estimator or TokenEstimator(), clock, transport, closers, batch_records
    )
    ctx.full_policy = scheduler.policy
    if loaded.config.tracing.enabled:
        from gateway.tracing.provider import start_tracing  # the SDK only when tracing is on

        ctx.tracing = start_tracing(loaded.config.tracing, span_exporter)
    jobs = AsyncJobs(ctx)
    if loaded.config.state.backend == "redis":
        from gateway.replicas.wiring import join_replicas  # one replica never loads Redis

        join_replicas(ctx, scraper, closers)
    ctx.metrics.registry.register(SharedStateCollector(lambda: ctx.shared))
    if config_path is not None:
        ctx.reloader = Reloader(
            config_path,
            lambda new, pol: _apply(ctx, new, pol),
            in_force=loaded,
            on_result=lambda ok: ctx.metrics.reloads.labels("ok" if ok else "error").inc(),
        )
    found = loaded.config.discovery
    watcher = None if found is None else kubernetes_discovery(found.kubernetes, ctx.pool, scraper)
    if watcher is not None:
        ctx.metrics.registry.register(DiscoveryCollector(watcher))
    running = _running(ctx, jobs, scraper, background, closers, watcher)
    return Gateway(ctx, jobs, running, scraper)


def http_app(gateway: Gateway) -> Starlette:
    """The HTTP front over ``gateway``: its lifespan runs ``gateway.running``."""
    return http_front(gateway.ctx, gateway.async_jobs, gateway.scraper, gateway.running)


def _context(
    loaded: LoadedConfig,
    scheduler: SchedulerLike,
    estimator: TokenEstimator,
    clock: Clock,
    transport: httpx.AsyncBaseTransport | None,
    closers: list[Any],
    batch_records: bool,
) -> tuple[GatewayContext, MetricsScraper | None]:
    """Pool, scraper, dispatcher and metrics, wired to each other."""
    cfg = loaded.config
    wakers: list[Any] = []
    scraper = _scraper(cfg, clock, transport, wakers, closers) if cfg.scrape.enabled else None
    pool = BackendPool(
        cfg.backends,
        clock=clock,
        health=cfg.health,
        transport=transport,
        signals=scraper,
        connect_timeout_s=cfg.server.connect_timeout_s,
        read_timeout_s=cfg.server.read_timeout_s,
    )
    wakers.append(pool.invalidate)  # a scrape landed: the next snapshot rebuilds its views
    pool.in_flight = lambda: scheduler.stats().in_flight_by_backend
    admission = Admission(scheduler, pool.snapshot, clock=clock)
    pool.on_change.append(admission.wake)
    wakers.append(admission.wake)
    metrics = GatewayMetrics(tenant_labels(cfg))
    metrics.config_info.labels(loaded.version).set(1)
    metrics.follow_backends(pool.labelled)
    ctx = GatewayContext(
        Runtime(loaded, Authenticator(cfg)),
        pool,
        admission,
        estimator,
        metrics,
        RecordSink(cfg.server.log_records, batch_per_turn=batch_records),
        clock,
        LocalState(),
        scraper=scraper,
    )
    ctx.stalls = StallBounds(
        cfg.stall,
        cfg.server.read_timeout_s,
        progress=scraper.progress if scraper else None,
        scrape_period_s=scraper.settings.period_s if scraper else 1.0,
        clock=clock,
    )
    metrics.add_scrape_time_gauges(lambda: scheduler_gauges(ctx))
    metrics.add_scrape_time_gauges(event_loop_gauges)
    metrics.add_scrape_time_gauges(lambda: feature_gauges(ctx))
    admission.on_run_end = RunMetrics(
        metrics, lambda: ctx.scheduler.runs.stats(), lambda: runs_enabled(ctx)
    ).ended
    if scraper is not None:
        register_backend_metrics(metrics.registry, scraper, clock=clock, health=pool.health)
    return ctx, scraper


def _as_loaded(cfg: GatewayConfig) -> LoadedConfig:
    return LoadedConfig(cfg, config_version(cfg), "<object>", LineIndex({}))


def _scraper(
    cfg: GatewayConfig, clock: Clock, transport: Any, wakers: list[Any], closers: list[Any]
) -> MetricsScraper:
    """The scraper, whose every fresh scrape wakes the dispatcher (a new snapshot)."""
    targets = scrape_targets(cfg.backends)
    settings = ScrapeSettings(interval_s=cfg.scrape.interval_s, max_age_s=cfg.scrape.max_age_s)
    client = httpx.AsyncClient(transport=transport, timeout=settings.timeout_s)
    closers.append(client.aclose)

    def on_scrape(_name: str) -> None:
        for wake in wakers:
            wake()

    return MetricsScraper(client, targets, clock=clock, settings=settings, on_scrape=on_scrape)


def _apply(ctx: GatewayContext, loaded: LoadedConfig, policy: PolicySet) -> None:
    """The swap: one scheduler call and one reference; queues and tickets stay."""
    ctx.full_policy = policy
    ctx.scheduler.swap(for_mode(policy, ctx.shared.mode, ctx.shared.replicas))
    ctx.runtime = Runtime(loaded, Authenticator(loaded.config))
    cfg = loaded.config
    ctx.metrics.set_tenants(tenant_labels(cfg))
    ctx.metrics.config_info.clear()
    ctx.metrics.config_info.labels(loaded.version).set(1)
    if ctx.tracing is not None:
        ctx.tracing.reloaded(cfg.tracing)


def _running(
    ctx: GatewayContext,
    async_jobs: AsyncJobs,
    scraper: MetricsScraper | None,
    background: bool,
    closers: list[Any],
    watcher: InferencePoolWatcher | None = None,
) -> Callable[[], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        jobs = [ctx.admission.run(), ctx.shared.run(), async_jobs.run()]
        if watcher is not None:  # the backends come from it: runs without background jobs too
            jobs.append(watcher.run())
        tasks = [asyncio.ensure_future(job) for job in jobs]
        jobs = []
        if watcher is not None:  # the pods, before the first probes and scrapes
            await first_sync(watcher, watcher.settings.initial_sync_s)
        if background:
            await ctx.pool.probe_all()
            jobs.append(ctx.pool.run_probes())
            if scraper is not None:
                # One scrape before serving: with no signal yet every backend is stale, which
                # counts as saturated, and the first requests would be degraded for nothing.
                await asyncio.gather(*(scraper.scrape_once(n) for n in scraper.names))
                jobs.append(scraper.run(scraped=True))
                if scraper.share is not None:
                    jobs.append(scraper.share.run())
            if ctx.reloader is not None:
                ctx.reloader.install_sighup(asyncio.get_running_loop())
                reload_cfg = ctx.runtime.loaded.config.reload
                if reload_cfg.watch:
                    jobs.append(ctx.reloader.watch(reload_cfg.interval_s))
        tasks += [asyncio.ensure_future(job) for job in jobs]
        try:
            yield
        finally:
            await async_jobs.aclose()  # pending jobs end cancelled, tickets released
            if scraper is not None:
                scraper.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await ctx.pool.aclose()
            for close in closers:
                await close()
            await ctx.shared.aclose()
            ctx.records.flush()
            if ctx.tracing is not None:  # the spans buffered, exported before the exit
                await asyncio.to_thread(ctx.tracing.shutdown)

    return running
