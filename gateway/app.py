"""All wiring of the gateway in one place: ``build_gateway`` (the context and the work
beside the requests, for any front), ``http_app`` (the HTTP front over it), ``create_app``
(both).

Handlers receive a ``GatewayContext`` through closures; nothing reaches into
``app.state`` on the request path (``app.state.ctx`` and ``app.state.async_jobs`` are
exposed for tests and tools).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import math
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from gateway.admission.dispatcher import Admission, SchedulerLike
from gateway.async_jobs.runner import AsyncJobs
from gateway.backends.discovery.apply import first_sync, kubernetes_discovery, scrape_targets
from gateway.backends.discovery.exposition import DiscoveryCollector
from gateway.backends.pool import BackendPool
from gateway.backends.scrape.exposition import backends_admin, register_backend_metrics
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeSettings
from gateway.config.reload import Reloader, build_loaded_policy
from gateway.config.schema import GatewayConfig, LoadedConfig, config_version
from gateway.config.yaml_lines import LineIndex
from gateway.context import Estimator, GatewayContext, Runtime
from gateway.forward.stall import StallBounds
from gateway.front import async_routes
from gateway.front.async_routes import ASYNC_PATH
from gateway.front.completions import handle_completion
from gateway.front.runs import cancel_run, complete_run, run_state
from gateway.metrics.event_loop import event_loop_gauges
from gateway.metrics.exporter import GatewayMetrics, GaugeSample
from gateway.metrics.records import RecordSink
from gateway.metrics.runs import RunMetrics
from gateway.replicas.exposition import SharedStateCollector
from gateway.request.auth import Authenticator
from gateway.request.errors import error_body
from gateway.request.inbound import CHAT, COMPLETIONS, request_id_from
from gateway.request.responses import NOT_SERVED, not_served, refusal_headers
from policies.engine.scheduler import Scheduler
from policies.estimate import TokenEstimator
from policies.fairness.fleet_share import FleetShare, ShareReport
from policies.policy_set import PolicySet
from policies.shared_mode import SharedMode, for_mode
from policies.types import Clock

if TYPE_CHECKING:
    from gateway.backends.discovery.kubernetes_watch import InferencePoolWatcher

log = logging.getLogger("sluicegate.app")
Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Gateway:
    """The gateway without a front: what every front is given (``ctx``, ``async_jobs``),
    and ``running``, the work beside the requests (dispatcher, probes, scrapes, reloads,
    discovery, async jobs) for as long as a front serves."""

    ctx: GatewayContext
    async_jobs: AsyncJobs
    """Calls handed off with ``Prefer: respond-async`` (``async_jobs:``, docs/async.md)."""
    running: Callable[[], contextlib.AbstractAsyncContextManager[None]]


def create_app(config: GatewayConfig | LoadedConfig, **options: Any) -> FastAPI:
    """The gateway behind its HTTP front: ``http_app(build_gateway(config, **options))``."""
    return http_app(build_gateway(config, **options))


def build_gateway(
    config: GatewayConfig | LoadedConfig,
    *,
    clock: Clock = time.monotonic,
    transport: httpx.AsyncBaseTransport | None = None,
    scheduler: SchedulerLike | None = None,
    estimator: Estimator | None = None,
    config_path: str | Path | None = None,
    rng: random.Random | None = None,
    background: bool = True,
    batch_records: bool = False,
) -> Gateway:
    """Build the gateway. ``transport`` replaces the network for every upstream call
    (tests); ``config_path`` enables SIGHUP/file-change reload; ``background=False`` skips
    health probes, scraping and file watching (the dispatcher always runs);
    ``batch_records`` logs the decision records of one event-loop turn as one message.

    Raises ``gateway.config.schema.ConfigError`` (every error located) for an invalid policy.
    """
    loaded = config if isinstance(config, LoadedConfig) else _as_loaded(config)
    scheduler = scheduler or Scheduler(build_loaded_policy(loaded), clock=clock, rng=rng)
    closers: list[Any] = []
    ctx = _context(
        loaded, scheduler, estimator or TokenEstimator(), clock, transport, closers, batch_records
    )
    ctx.full_policy = scheduler.policy
    jobs = AsyncJobs(ctx)
    if loaded.config.state.backend == "redis":
        ctx.shared = _redis_state(ctx)
        if ctx.scraper is not None:
            ctx.scraper.share = _shared_scrapes(ctx, ctx.scraper, closers)
        scheduler.swap(for_mode(scheduler.policy, ctx.shared.mode, ctx.shared.replicas))
    ctx.metrics.registry.register(SharedStateCollector(lambda: ctx.shared))
    if config_path is not None:
        ctx.reloader = Reloader(
            config_path, lambda new, pol: _apply(ctx, new, pol), in_force=loaded,
            on_result=lambda ok: ctx.metrics.reloads.labels("ok" if ok else "error").inc(),
        )  # fmt: skip
    found = loaded.config.discovery
    watcher = (
        None if found is None else kubernetes_discovery(found.kubernetes, ctx.pool, ctx.scraper)
    )
    if watcher is not None:
        ctx.metrics.registry.register(DiscoveryCollector(watcher))
    return Gateway(ctx, jobs, _running(ctx, jobs, ctx.scraper, background, closers, watcher))


def http_app(gateway: Gateway) -> FastAPI:
    """The HTTP front over ``gateway``: its lifespan runs ``gateway.running``."""
    ctx, jobs = gateway.ctx, gateway.async_jobs

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with gateway.running():
            yield

    app = GatewayApp(
        lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None, **_without_otel()
    )
    app.state.ctx = ctx
    app.state.async_jobs = jobs
    _routes(app, ctx, jobs, ctx.scraper)
    app.hot = {p: _completion(ctx, jobs, p) for p in (CHAT, COMPLETIONS)}
    return app


def _redis_state(ctx: GatewayContext) -> Any:
    """Fleet mode: the Redis state, swapping the scheduler to its local share on failure.
    Imported here: one replica never loads the Redis client."""
    from gateway.replicas.redis_store import FairShareHooks, RedisState, connect

    cfg = ctx.runtime.loaded.config.state
    replica = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def info() -> dict[str, Any]:
        stats = ctx.scheduler.stats()
        return {"queued": stats.queued, "in_flight": stats.in_flight}

    def on_mode(mode: SharedMode, replicas: int) -> None:
        if ctx.full_policy is not None:
            ctx.scheduler.swap(for_mode(ctx.full_policy, mode, replicas))

    def in_flight() -> dict[str, int]:
        return dict(ctx.scheduler.stats().in_flight_by_backend)

    def merge_fair_share(share: FleetShare | None, failed: ShareReport | None) -> None:
        ctx.scheduler.share_merge(share, failed)
        ctx.admission.wake()  # a tenant held back may go now, or one may be held

    fair = FairShareHooks(lambda: ctx.scheduler.share_report(), merge_fair_share)
    return RedisState(
        cfg, connect(cfg), replica_id=replica, info=info, on_mode=on_mode,
        in_flight=in_flight, on_peers=ctx.pool.set_peer_in_flight, fair=fair,
        policy=lambda: ctx.full_policy,
    )  # fmt: skip


def _shared_scrapes(ctx: GatewayContext, scraper: MetricsScraper, closers: list[Any]) -> Any:
    """Fleet mode: one replica scrapes each backend and publishes what it read."""
    from gateway.replicas.redis_store import connect
    from gateway.replicas.scrape_share import SharedScrapes

    cfg = ctx.runtime.loaded.config.state
    replica = getattr(ctx.shared, "replica_id", "")
    share = SharedScrapes(cfg, connect(cfg), replica, scraper, clock=ctx.clock)
    closers.append(share.aclose)
    return share


def _completion(ctx: GatewayContext, jobs: AsyncJobs, path: str) -> Endpoint:
    """``handle_completion`` for one path, called directly (no coroutine in between)."""
    return lambda request: handle_completion(ctx, request, path, jobs)


def _context(
    loaded: LoadedConfig, scheduler: SchedulerLike, estimator: Estimator, clock: Clock,
    transport: httpx.AsyncBaseTransport | None, closers: list[Any], batch_records: bool,
) -> GatewayContext:  # fmt: skip
    """Pool, scraper, dispatcher and metrics, wired to each other."""
    cfg = loaded.config
    wakers: list[Any] = []
    scraper = _scraper(cfg, clock, transport, wakers, closers) if cfg.scrape.enabled else None
    pool = BackendPool(
        cfg.backends, clock=clock, health=cfg.health, transport=transport, signals=scraper,
        connect_timeout_s=cfg.server.connect_timeout_s, read_timeout_s=cfg.server.read_timeout_s,
    )  # fmt: skip
    wakers.append(pool.invalidate)  # a scrape landed: the next snapshot rebuilds its views
    pool.in_flight = lambda: scheduler.stats().in_flight_by_backend
    admission = Admission(scheduler, pool.snapshot, clock=clock)
    pool.on_change.append(admission.wake)
    wakers.append(admission.wake)
    metrics = GatewayMetrics([t.name for t in cfg.tenants], cfg.server.tenant_label_limit)
    metrics.config_info.labels(loaded.version).set(1)
    metrics.follow_backends(pool.labelled)
    ctx = GatewayContext(
        Runtime(loaded, Authenticator(cfg)), pool, admission, estimator, metrics,
        RecordSink(cfg.server.log_records, batch_per_turn=batch_records), clock, scraper=scraper,
    )  # fmt: skip
    ctx.stalls = StallBounds(
        cfg.stall, cfg.server.read_timeout_s, progress=scraper.progress if scraper else None,
        scrape_period_s=scraper.settings.period_s if scraper else 1.0, clock=clock,
    )  # fmt: skip
    metrics.add_scrape_time_gauges(lambda: _scheduler_gauges(ctx))
    metrics.add_scrape_time_gauges(event_loop_gauges)
    admission.on_run_end = RunMetrics(metrics, lambda: ctx.scheduler.runs.stats()).ended
    if scraper is not None:
        register_backend_metrics(metrics.registry, scraper, clock=clock, health=pool.health)
    return ctx


class GatewayApp(FastAPI):
    """FastAPI, except that ``POST`` to the two completion paths goes straight to its
    endpoint, past Starlette's and FastAPI's middleware (error, telemetry and body-limit
    layers, each wrapping ``send``) and router: about a fifth of the CPU per request
    (docs/performance.md). An error before the response starts still gets the gateway's
    500 body (``_internal_error``, as ``ServerErrorMiddleware`` would send it) and is
    re-raised for the server to log; everything else is FastAPI's, unchanged."""

    hot: dict[str, Endpoint]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.hot.get(scope["path"])
            if endpoint is not None:
                request = Request(scope, receive, send)
                try:
                    response = await endpoint(request)
                except Exception as exc:
                    await (await _internal_error(request, exc))(scope, receive, send)
                    raise
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _without_otel() -> dict[str, Any]:
    """FastAPI >= 0.16x asks OpenTelemetry's global providers on every request whether
    to trace it (environment lookups included): 3-5 % of the CPU per request here, for
    nothing, since the gateway exports Prometheus metrics and records of its own."""
    if "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


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
    ctx.metrics.set_tenants([t.name for t in cfg.tenants], cfg.server.tenant_label_limit)
    ctx.metrics.config_info.clear()
    ctx.metrics.config_info.labels(loaded.version).set(1)


def _running(
    ctx: GatewayContext, async_jobs: AsyncJobs, scraper: MetricsScraper | None,
    background: bool, closers: list[Any], watcher: InferencePoolWatcher | None = None,
) -> Callable[[], contextlib.AbstractAsyncContextManager[None]]:  # fmt: skip
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

    return running


def _routes(
    app: FastAPI, ctx: GatewayContext, async_jobs: AsyncJobs, scraper: MetricsScraper | None
) -> None:
    async def chat(request: Request) -> Response:
        return await handle_completion(ctx, request, CHAT, async_jobs)

    async def completions(request: Request) -> Response:
        return await handle_completion(ctx, request, COMPLETIONS, async_jobs)

    async def models(_request: Request) -> Response:
        data = [{"id": m, "object": "model", "owned_by": "sluicegate", "max_model_len": n}
                for m, n in sorted(ctx.pool.healthy_models().items())]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    async def metrics(_request: Request) -> Response:
        return Response(ctx.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> Response:
        ready = ctx.pool.snapshot().any_available
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    async def admin_backends(_request: Request) -> Response:
        if scraper is None:
            return JSONResponse({"backends": [{"name": n, "health": ctx.pool.health(n).value}
                                              for n in ctx.pool.names]})  # fmt: skip
        return JSONResponse(backends_admin(scraper, ctx.clock(), ctx.pool.health))

    app.add_route(CHAT, chat, methods=["POST"])
    app.add_route(COMPLETIONS, completions, methods=["POST"])
    app.add_route("/v1/models", models, methods=["GET"])
    app.add_route("/metrics", metrics, methods=["GET"])
    app.add_route("/healthz", healthz, methods=["GET"])
    app.add_route("/readyz", readyz, methods=["GET"])

    async def admin_scheduler(_request: Request) -> Response:
        stats = dataclasses.asdict(ctx.scheduler.stats())
        return JSONResponse(_finite({"policy_version": ctx.runtime.version, **stats}))

    async def admin_fleet(_request: Request) -> Response:
        return JSONResponse(_finite(await ctx.shared.fleet()))

    async def run_get(request: Request) -> Response:
        return await run_state(ctx, request)

    async def run_delete(request: Request) -> Response:
        return await cancel_run(ctx, request)

    async def run_complete(request: Request) -> Response:
        return await complete_run(ctx, request)

    app.add_route("/v1/runs/{run_id}", run_get, methods=["GET"])
    app.add_route("/v1/runs/{run_id}", run_delete, methods=["DELETE"])
    app.add_route("/v1/runs/{run_id}/complete", run_complete, methods=["POST"])
    app.add_route("/admin/fleet", admin_fleet, methods=["GET"])
    _async_routes(app, ctx, async_jobs)
    app.add_route("/admin/backends", admin_backends, methods=["GET"])
    app.add_route("/admin/scheduler", admin_scheduler, methods=["GET"])
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)


def _async_routes(app: FastAPI, ctx: GatewayContext, jobs: AsyncJobs) -> None:
    async def poll(request: Request) -> Response:
        return await async_routes.poll(ctx, jobs, request)

    async def cancel(request: Request) -> Response:
        return await async_routes.cancel(ctx, jobs, request)

    app.add_route(ASYNC_PATH, poll, methods=["GET"])
    app.add_route(ASYNC_PATH, cancel, methods=["DELETE"])


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    request_id = request_id_from(request.headers)
    if status in NOT_SERVED:
        return not_served(status, request_id)
    message = str(getattr(exc, "detail", "error"))
    return JSONResponse(error_body(message, "invalid_request_error"), status_code=status,
                        headers=refusal_headers(request_id, "invalid_request"))  # fmt: skip


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error", exc_info=exc)
    return JSONResponse(error_body("internal gateway error", "server_error"), status_code=500,
                        headers=refusal_headers(request_id_from(request.headers),
                                                "internal_error"))  # fmt: skip


def _finite(value: Any) -> Any:
    """JSON has no inf/nan: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _scheduler_gauges(ctx: GatewayContext) -> Iterable[GaugeSample]:
    stats = ctx.scheduler.stats()
    none: dict[str, str] = {}
    yield "sluicegate_queue_depth", "Requests queued in the gateway", none, stats.queued
    yield ("sluicegate_backlog_tokens", "Estimated tokens queued in the gateway", none,
           stats.queued_tokens)  # fmt: skip
    yield ("sluicegate_oldest_queued_age_seconds", "Age of the oldest queued request", none,
           stats.oldest_age_s or 0.0)  # fmt: skip
    yield "sluicegate_in_flight", "Requests dispatched, not released", none, stats.in_flight
    yield ("sluicegate_in_flight_tokens", "Estimated tokens in flight", none,
           stats.in_flight_tokens)  # fmt: skip
    yield "sluicegate_saturation", "Fleet saturation the ladder sees (0-1)", none, stats.saturation
    labelled = ctx.pool.labelled()
    for backend, count in stats.in_flight_by_backend.items():
        if backend not in labelled:
            continue  # left the pool, nothing on it: its series is gone
        yield ("sluicegate_backend_in_flight", "Requests in flight per backend",
               {"backend": backend}, count)  # fmt: skip
    deficits: dict[str, float] = {}
    for tenant, deficit in stats.deficits.items():
        label = ctx.metrics.tenant_label(tenant)
        deficits[label] = deficits.get(label, 0.0) + deficit
    for label, deficit in deficits.items():
        yield ("sluicegate_tenant_deficit_tokens", "Fair-share deficit per tenant",
               {"tenant": label}, deficit)  # fmt: skip
    yield from _estimator_gauges(ctx)


def _estimator_gauges(ctx: GatewayContext) -> Iterable[GaugeSample]:
    error = getattr(ctx.estimator, "error", None)
    if error is None:
        return
    err = error()
    for kind, value in (("prompt", err.prompt_mape), ("output", err.output_mape)):
        if value is not None:
            yield ("sluicegate_estimator_mape", "Mean abs % error of token estimates (0-1)",
                   {"kind": kind}, value)  # fmt: skip
