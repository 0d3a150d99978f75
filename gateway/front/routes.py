"""The HTTP front's routes: the OpenAI endpoints, runs, async jobs, health, metrics and
admin pages over a ``GatewayContext``; errors in the OpenAI shape."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway.async_jobs.runner import AsyncJobs
from gateway.backends.scrape.exposition import backends_admin
from gateway.backends.scrape.scraper import MetricsScraper
from gateway.context import GatewayContext
from gateway.front import async_routes
from gateway.front.async_routes import ASYNC_PATH
from gateway.front.completions import handle_completion
from gateway.front.runs import cancel_run, complete_run, run_state
from gateway.request.errors import error_body
from gateway.request.inbound import CHAT, COMPLETIONS, request_id_from
from gateway.request.responses import NOT_SERVED, not_served, refusal_headers

log = logging.getLogger("sluicegate.app")
Endpoint = Callable[[Request], Awaitable[Response]]


def http_front(
    ctx: GatewayContext,
    jobs: AsyncJobs,
    scraper: MetricsScraper | None,
    running: Callable[[], contextlib.AbstractAsyncContextManager[None]],
) -> Starlette:
    """The ASGI app of the HTTP front; its lifespan runs ``running``. An error before the
    response starts gets the gateway's 500 body and is re-raised for the server to log."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with running():
            yield

    app = GatewayApp(
        routes=_routes(ctx, jobs, scraper),
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.hot = {p: _completion(ctx, jobs, p) for p in (CHAT, COMPLETIONS)}
    app.state.ctx = ctx
    app.state.async_jobs = jobs
    return app


def _completion(ctx: GatewayContext, jobs: AsyncJobs, path: str) -> Endpoint:
    """``handle_completion`` for one path, called directly (no coroutine in between)."""
    return lambda request: handle_completion(ctx, request, path, jobs)


class GatewayApp(Starlette):
    """Starlette, except that ``POST`` to the two completion paths goes straight to its
    endpoint, past the error and exception middleware (each wrapping ``send``, so each
    streamed chunk) and the router (docs/performance.md). An error before the response
    starts still gets the gateway's 500 body (``_internal_error``, as
    ``ServerErrorMiddleware`` would send it) and is re-raised for the server to log;
    every other request is Starlette's, unchanged."""

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


def _routes(ctx: GatewayContext, jobs: AsyncJobs, scraper: MetricsScraper | None) -> list[Route]:
    async def chat(request: Request) -> Response:
        return await handle_completion(ctx, request, CHAT, jobs)

    async def completions(request: Request) -> Response:
        return await handle_completion(ctx, request, COMPLETIONS, jobs)

    async def models(_request: Request) -> Response:
        data = [
            {"id": m, "object": "model", "owned_by": "sluicegate", "max_model_len": n}
            for m, n in sorted(ctx.pool.healthy_models().items())
        ]
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
            return JSONResponse(
                {
                    "backends": [
                        {"name": n, "health": ctx.pool.health(n).value} for n in ctx.pool.names
                    ]
                }
            )
        return JSONResponse(backends_admin(scraper, ctx.clock(), ctx.pool.health))

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

    async def async_poll(request: Request) -> Response:
        return await async_routes.poll(ctx, jobs, request)

    async def async_cancel(request: Request) -> Response:
        return await async_routes.cancel(ctx, jobs, request)

    return [
        Route(CHAT, chat, methods=["POST"]),
        Route(COMPLETIONS, completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/v1/runs/{run_id}", run_get, methods=["GET"]),
        Route("/v1/runs/{run_id}", run_delete, methods=["DELETE"]),
        Route("/v1/runs/{run_id}/complete", run_complete, methods=["POST"]),
        Route("/admin/fleet", admin_fleet, methods=["GET"]),
        Route(ASYNC_PATH, async_poll, methods=["GET"]),
        Route(ASYNC_PATH, async_cancel, methods=["DELETE"]),
        Route("/admin/backends", admin_backends, methods=["GET"]),
        Route("/admin/scheduler", admin_scheduler, methods=["GET"]),
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    request_id = request_id_from(request.headers)
    if status in NOT_SERVED:
        return not_served(status, request_id)
    message = str(getattr(exc, "detail", "error"))
    return JSONResponse(
        error_body(message, "invalid_request_error"),
        status_code=status,
        headers=refusal_headers(request_id, "invalid_request"),
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error", exc_info=exc)
    return JSONResponse(
        error_body("internal gateway error", "server_error"),
        status_code=500,
        headers=refusal_headers(request_id_from(request.headers), "internal_error"),
    )


def _finite(value: Any) -> Any:
    """JSON has no inf/nan: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
