"""The completion endpoints over HTTP: the request pipeline (``gateway.request.pipeline``)
with the body read from ASGI ``receive``, sent on by a backend call relayed to the client,
and every outcome answered as an HTTP response."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from gateway.admission.flight import Flight
from gateway.async_jobs.runner import AsyncJobs
from gateway.context import GatewayContext, Runtime
from gateway.forward.stall import StallWatch
from gateway.forward.stream_relay import first_events, relay_stream
from gateway.forward.streaming_response import RelayResponse, race
from gateway.forward.upstream import (
    BackendBusy,
    SseRelay,
    Upstream,
    open_upstream,
    usage_from_body,
)
from gateway.front.async_routes import hand_off
from gateway.front.disconnect import DisconnectWatch
from gateway.front.prefer import prefers_async
from gateway.metrics.records import CLIENT_CLOSED_REQUEST
from gateway.request import body
from gateway.request.attempts import Failed
from gateway.request.auth import Tenant
from gateway.request.inbound import header_map
from gateway.request.pipeline import Front, handle
from gateway.request.prepare import Prepared
from gateway.request.responses import (
    UpstreamAnswer,
    error_response,
    exhausted,
    headers,
    rejection,
    run_ended,
)
from policies.engine.scheduler_types import Ticket
from policies.types import Decision, Outcome


def handle_completion(
    ctx: GatewayContext, request: Request, path: str, jobs: AsyncJobs | None = None
) -> Coroutine[Any, Any, Response]:
    """The request through the pipeline, to be awaited (``handle``'s own coroutine, none in
    between). ``jobs``: where a refused call that prefers an async answer is handed off."""
    return handle(ctx, HttpFront(ctx, request, path, jobs))


class HttpFront(Front[Response]):
    def __init__(
        self, ctx: GatewayContext, request: Request, path: str, jobs: AsyncJobs | None
    ) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.request = request
        self.headers = header_map(request.scope["headers"])
        self.path = path
        self.prefer_async = "prefer" in self.headers and prefers_async(request.scope["headers"])
        self.watch: DisconnectWatch | None = None

    async def body(self, runtime: Runtime, tenant: Tenant) -> tuple[bytes, dict[str, Any] | None]:
        server = runtime.loaded.config.server
        raw = await read_body(
            self.request, server.max_body_bytes, self.headers, server.body_timeout_s
        )
        return raw, None

    def listen(self) -> asyncio.Future[None]:
        self.watch = DisconnectWatch(self.request.receive)
        return self.watch.gone

    def stop_listening(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def send(
        self, flight: Flight, prepared: Prepared, ticket: Ticket
    ) -> Coroutine[Any, Any, Response | Failed]:
        assert self.watch is not None
        return _open(self.ctx, flight, prepared, ticket, self.watch.gone)

    def refused(self, flight: Flight, prepared: Prepared, decision: Decision) -> Response:
        """A REJECT's answer: the 429 (503), or the async handoff's 202 when the client
        asked for it (``Prefer: respond-async``, docs/async.md)."""
        if prepared.prefer_async:
            work = (prepared.path, prepared.parsed, prepared.raw)
            handed = hand_off(self.jobs, flight, decision, work)
            if handed is not None:
                return handed
        return rejection(flight, decision)

    def exhausted(self, flight: Flight, prepared: Prepared, failure: str) -> Response:
        return exhausted(self.ctx, prepared.runtime, flight, failure)

    def gone(self, flight: Flight) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)


def read_body(
    request: Request,
    limit: int,
    hdrs: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> Coroutine[Any, Any, bytes]:
    """The request body from ASGI ``receive`` (``body.read_body``, awaited by the caller:
    no coroutine of its own per request), as ``Request.stream`` reads it minus its async
    generator. A client that goes away before its body is whole gets 400
    (``body.incomplete``)."""
    declared = (request.headers if hdrs is None else hdrs).get("content-length")
    return body.read_body(_pieces(request.receive), limit, timeout_s, declared)


def _pieces(receive: Receive) -> body.NextPiece:
    async def next_piece() -> tuple[bytes, bool]:
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "http.request":
                return message.get("body", b""), message.get("more_body", False)
            if kind == "http.disconnect":
                raise body.incomplete()

    return next_piece


async def _open(
    ctx: GatewayContext,
    flight: Flight,
    prepared: Prepared,
    ticket: Ticket,
    gone: asyncio.Future[None],
) -> Response | Failed:
    """The response, or the kind of failure ("connect", "busy", "stall") that allows
    another try: nothing reached the client yet."""
    sent = ticket.request
    body = prepared.upstream_body(sent)
    client, pool = ctx.pool.client(ticket.backend), ctx.pool.upstream(ticket.backend)
    watch = _watch(ctx, ticket, prepared.parsed.stream, gone)
    handed_over = False
    carrier = None if flight.trace is None else flight.trace.carrier()
    try:
        started, upstream = await race(
            open_upstream(client, pool, prepared.path, body, prepared.request.request_id, carrier),
            watch.cut,
        )
        if upstream is not None:
            ctx.pool.note_success(ticket.backend)
        if not started or upstream is None:
            return _cut(ctx, flight, watch, ticket.backend)
        response = await _respond(ctx, flight, prepared, upstream, watch)
        handed_over = isinstance(response, RelayResponse)
        return response
    except (httpx.ConnectError, httpx.ConnectTimeout):
        ctx.metrics.upstream_errors.labels(ticket.backend, "connect").inc()
        ctx.pool.note_connect_error(ticket.backend)
        flight.release_attempt(Outcome.FAILED)
        return Failed("connect")
    except BackendBusy:
        ctx.metrics.upstream_errors.labels(ticket.backend, "busy").inc()
        flight.release_attempt(Outcome.FAILED)
        return Failed("busy")
    except httpx.HTTPError as exc:
        ctx.metrics.upstream_errors.labels(ticket.backend, "protocol").inc()
        flight.finish(Outcome.FAILED, status=502, error=type(exc).__name__)
        return error_response(flight, 502, "the backend failed before responding", "upstream_error")
    finally:
        if not handed_over:
            watch.close()


def _watch(
    ctx: GatewayContext, ticket: Ticket, stream: bool, gone: asyncio.Future[None]
) -> StallWatch:
    """The attempt's watchdog: the client leaving, the backend going down or stopping
    making progress, the call's agent run ending, and for a stream, silence before the
    first event beyond a fixed bound (if set) or the read timeout."""
    backend, run = ticket.backend, ticket.request.run
    ended = None
    if run is not None and ctx.scheduler.policy.runs.enabled:
        ended = ctx.admission.run_cuts.future(ticket.request.tenant, run.run_id)
    stalls = ctx.stalls
    down = ctx.pool.down_signal(backend) if stalls and stalls.config.cut_when_down else None
    bound = stalls.first_token_s() if stream and stalls is not None else None
    progress = stalls.progress_left(backend) if stalls is not None else None
    return StallWatch(bound, down=down, gone=gone, ended=ended, progress=progress)


def _cut(ctx: GatewayContext, flight: Flight, watch: StallWatch, backend: str) -> Response | Failed:
    """The watchdog cut the wait before anything reached the client: the agent run ended
    (409), the client left (499, recorded), or the backend went down or silent (another
    attempt may help)."""
    if watch.reason == "ended":
        return run_ended(flight, watch.ended_by)
    if watch.reason != "gone":
        return _stalled(ctx, flight, backend)
    flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def _stalled(ctx: GatewayContext, flight: Flight, backend: str) -> Failed:
    """The backend went down or silent before anything reached the client: give the
    ticket back, and let the request try a healthy backend."""
    ctx.metrics.upstream_errors.labels(backend, "stall").inc()
    flight.release_attempt(Outcome.FAILED)
    return Failed("stall")


async def _respond(
    ctx: GatewayContext,
    flight: Flight,
    prepared: Prepared,
    upstream: Upstream,
    watch: StallWatch,
) -> Response | Failed:
    backend = flight.record.backend or ""
    if prepared.parsed.stream and upstream.status_code == 200:
        relay = SseRelay(strip_usage=not prepared.parsed.client_wants_usage)
        chunks = upstream.aiter_raw()
        try:
            first = await first_events(flight, relay, chunks, watch)
        except BaseException:
            await upstream.aclose()
            raise
        if first is None:
            await upstream.aclose()
            return _cut(ctx, flight, watch, backend)
        if ctx.stalls is not None:
            watch.rebound(ctx.stalls.inter_token_s(backend))
        relayed = relay_stream(flight, upstream, relay, watch=watch, chunks=chunks, first=first)
        return RelayResponse(relayed, 200, headers(flight))
    try:
        done, data = await race(upstream.aread(), watch.cut)
    except httpx.HTTPError as exc:
        flight.finish(Outcome.FAILED, status=502, error=type(exc).__name__)
        return error_response(flight, 502, "the backend failed while responding", "upstream_error")
    finally:
        await upstream.aclose()
    if not done or data is None:
        return _cut(ctx, flight, watch, backend)
    flight.first_byte()
    usage = usage_from_body(data) if upstream.status_code == 200 else None
    status = upstream.status_code
    flight.finish(Outcome.COMPLETED if status < 500 else Outcome.FAILED, status=status, usage=usage)
    media = upstream.headers.get("content-type", "application/json")
    return UpstreamAnswer(data, status, headers(flight), media)
