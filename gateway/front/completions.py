"""The completion endpoints: validate, decide, forward, relay; one terminal outcome each.

Order of work: authenticate, read the body (size-capped), validate, estimate, submit.
Until ``submit`` nothing is taken, so every refusal before it needs no cleanup. After
it, every path goes through ``Flight.finish`` exactly once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from gateway.admission.flight import CLIENT_CLOSED_REQUEST, Flight
from gateway.context import GatewayContext, Runtime
from gateway.forward.stall import StallWatch
from gateway.forward.stream_relay import first_events, relay_stream
from gateway.forward.streaming_response import RelayResponse, race
from gateway.forward.upstream import (
    BackendBusy,
    SseRelay,
    Upstream,
    open_upstream,
    upstream_body,
    usage_from_body,
)
from gateway.front.async_routes import hand_off
from gateway.front.disconnect import DisconnectWatch
from gateway.front.prefer import prefers_async
from gateway.metrics.records import RequestRecord, prompt_sha256, run_digest
from gateway.request.auth import Tenant
from gateway.request.errors import ApiError
from gateway.request.inbound import (
    ParsedBody,
    RunHeaders,
    decode_json_object,
    header_map,
    parse_body,
    parse_metadata,
    request_id_from,
)
from gateway.request.responses import (
    UpstreamAnswer,
    error_response,
    exhausted,
    headers,
    refuse,
    rejection,
    run_ended,
)
from gateway.state.contract import Refusal
from gateway.state.fallback import quota_limits
from policies.engine.scheduler import DuplicateRequestId
from policies.engine.scheduler_types import Ticket, make_decision
from policies.types import (
    Decision,
    DecisionKind,
    FlowKey,
    Outcome,
    Reason,
    RequestInfo,
    RunHints,
    deadline_bucket,
)


@dataclass(frozen=True)
class Prepared:
    runtime: Runtime
    """The config this request was prepared under: read once, so a reload in the middle of
    one request never gives it a mixed view."""
    path: str
    parsed: ParsedBody
    request: RequestInfo
    raw: bytes
    """The body as the client sent it (``parsed.body`` is its decoding)."""
    prefer_async: bool = False
    """``Prefer: respond-async``: a refusal may become a 202 (``async_routes.refused``)."""


async def handle_completion(ctx: GatewayContext, request: Request, path: str) -> Response:
    hdrs = header_map(request.scope["headers"])
    request_id = request_id_from(hdrs)
    arrival = ctx.clock()
    try:
        prepared = await _prepare(ctx, request, hdrs, path, request_id, arrival)
    except ApiError as err:
        return refuse(ctx, err, request_id, path, arrival)
    flight = Flight(ctx, request_record(prepared, arrival), prepared.request)
    flight.prompt_chars = prepared.parsed.prompt_chars
    flight.fan_out = prepared.parsed.fan_out
    watch = DisconnectWatch(request.receive)
    try:
        return await _dispatch(ctx, flight, prepared, watch.gone)
    except asyncio.CancelledError:
        flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST, error="cancelled")
        raise
    except BaseException:
        flight.finish(Outcome.FAILED, status=500, error="gateway error")
        raise
    finally:
        watch.close()


async def _prepare(
    ctx: GatewayContext, request: Request, hdrs: Mapping[str, str], path: str, request_id: str,
    arrival: float,
) -> Prepared:  # fmt: skip
    runtime = ctx.runtime  # the one read of the config for this request
    tenant = authenticate(runtime, hdrs)
    server = runtime.loaded.config.server
    raw = await read_body(request, server.max_body_bytes, hdrs, server.body_timeout_s)
    prefer = "prefer" in hdrs and prefers_async(request.scope["headers"])
    return prepare(ctx, runtime, tenant, hdrs, path, request_id, arrival, raw,
                   prefer_async=prefer)  # fmt: skip


def authenticate(runtime: Runtime, hdrs: Mapping[str, str]) -> Tenant:
    """The caller's tenant from its API key; 401 without a valid one."""
    tenant = runtime.auth.authenticate(hdrs.get("authorization"))
    if tenant is None:
        raise ApiError(401, "missing or unknown API key", type_="authentication_error",
                       code="invalid_api_key", reason="unauthenticated")  # fmt: skip
    return tenant


def prepare(
    ctx: GatewayContext, runtime: Runtime, tenant: Tenant, hdrs: Mapping[str, str], path: str,
    request_id: str, arrival: float, raw: bytes, body: dict[str, Any] | None = None,
    *, prefer_async: bool = False,
) -> Prepared:  # fmt: skip
    """The whole body ``raw`` (``body``: its decoding, when the caller has it) validated,
    estimated and described for the scheduler: what every front submits. ``prefer_async``:
    the client asked for the asynchronous handoff (only the HTTP front offers it)."""
    if body is None:
        body = decode_json_object(raw)
    meta = parse_metadata(hdrs, tenant, request_id)
    server = runtime.loaded.config.server
    parsed = parse_body(path, body, ctx.pool.known_models(), ctx.pool.model_limit,
                        server.max_sequences_per_request)  # fmt: skip
    model_limit = ctx.pool.model_limit(parsed.model)
    flow = FlowKey(tenant.name, meta.workload_class, parsed.model, deadline_bucket(meta.deadline_s))
    estimate = ctx.estimator.estimate(
        parsed.model, parsed.prompt_chars, max_tokens=parsed.max_tokens,
        max_model_len=model_limit, flow=flow, fan_out=parsed.fan_out,
        known_prompt_tokens=parsed.prompt_token_ids,
    )  # fmt: skip
    info = RequestInfo(
        request_id=request_id,
        tenant=tenant.name,
        workload_class=meta.workload_class,
        model=parsed.model,
        estimate=estimate,
        arrival=arrival,
        deadline=None if meta.deadline_s is None else arrival + meta.deadline_s,
        priority=tenant.priority,
        weight=tenant.weight,
        max_tokens=parsed.max_tokens,
        is_retry=meta.is_retry,
        session_id=meta.session_id,
        prompt_hash=prompt_sha256(parsed.prompt),
        stream=parsed.stream,
        run=_run_hints(meta.run, arrival),
    )
    return Prepared(runtime, path, parsed, info, raw, prefer_async)


def _run_hints(run: RunHeaders | None, arrival: float) -> RunHints | None:
    if run is None:
        return None
    deadline = None if run.deadline_s is None else arrival + run.deadline_s
    return RunHints(run.run_id, deadline, run.calls, run.tokens, run.branches)


async def read_body(
    request: Request, limit: int, hdrs: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> bytes:  # fmt: skip
    """The request body, at most ``limit`` bytes, whole within ``timeout_s`` seconds (408
    after). Reads ``receive`` directly, as ``Request.stream`` does minus its async generator
    (one body message, the usual case, is returned as is). A client that goes away before
    its body is whole gets 400 (nobody reads it; the record keeps it): its own fault, not an
    error of the gateway."""
    declared = (request.headers if hdrs is None else hdrs).get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    try:
        async with asyncio.timeout(timeout_s):
            return await _receive_body(request.receive, limit)
    except TimeoutError:
        raise ApiError(408, f"the request body was not received within {timeout_s:g} s",
                       code="request_timeout", reason="body_timeout") from None  # fmt: skip


async def _receive_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            if message["type"] == "http.disconnect":
                raise ApiError(400, "the request body ended before it was complete",
                               code="incomplete_body", reason="body_incomplete")  # fmt: skip
            continue
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        if not message.get("more_body", False):
            if not chunks:
                return bytes(chunk)
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body exceeds {limit} bytes", code="request_too_large",
                    reason="body_too_large")  # fmt: skip


def request_record(prepared: Prepared, arrival: float) -> RequestRecord:
    req = prepared.request
    record = RequestRecord(
        req.request_id, req.tenant, req.workload_class, req.model, prepared.path,
        prepared.parsed.stream, req.prompt_hash, arrival, is_retry=req.is_retry,
    )  # fmt: skip
    if req.run is not None:
        record.extra["run_sha256"] = run_digest(req.tenant, req.run.run_id)
    return record


async def _dispatch(
    ctx: GatewayContext, flight: Flight, prepared: Prepared, gone: asyncio.Future[None]
) -> Response:
    """Admit, open upstream; on a connect error or engine busy, try again (bounded)."""
    if prepared.request.is_retry:
        cls = prepared.request.workload_class
        ctx.metrics.retries.labels(ctx.metrics.tenant_label(prepared.request.tenant), cls).inc()
    if ctx.shared.mode != "local":
        refusal = await admit_shared(ctx, flight, prepared.request)
        if refusal is not None:
            return _refused(ctx, flight, prepared, refusal)
    attempts = prepared.runtime.loaded.config.server.max_attempts
    avoid: set[str] = set()
    last_failure = "busy"
    for attempt in range(1, attempts + 1):
        req = prepared.request
        if attempt > 1:
            req = replace(req, request_id=f"{req.request_id}~{attempt}")
        admitted = await admit(ctx, flight, req, gone, frozenset(avoid))
        if admitted is None:
            flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        if isinstance(admitted, Decision):
            if avoid and admitted.reason is Reason.NO_HEALTHY_BACKEND:
                break  # only backends that just failed this request were left
            return _refused(ctx, flight, prepared, admitted)
        outcome = await _open(ctx, flight, prepared, admitted, gone)
        if not isinstance(outcome, str):
            return outcome
        last_failure = outcome
        avoid.add(admitted.backend)
    return exhausted(ctx, prepared.runtime, flight, last_failure)


def _refused(
    ctx: GatewayContext, flight: Flight, prepared: Prepared, decision: Decision
) -> Response:
    """A REJECT's answer: the 429 (503), or the async handoff's 202 when the client asked
    for it (``Prefer: respond-async``, docs/async.md)."""
    if prepared.prefer_async:
        work = (prepared.path, prepared.parsed, prepared.raw)
        handed = hand_off(ctx, flight, decision, work)
        if handed is not None:
            return handed
    return rejection(flight, decision)


async def admit_shared(ctx: GatewayContext, flight: Flight, req: RequestInfo) -> Decision | None:
    """The tenant's global lease and token reservation (fleet mode), before the core decides;
    a refusal is returned to answer, a grant is released by ``Flight.finish``."""
    policy = ctx.scheduler.policy
    held = await ctx.shared.admit(req, quota_limits(policy, req.tenant))
    if isinstance(held, Refusal):
        after = ctx.scheduler.retry_after(held.retry_after_s)
        decision = make_decision(policy, req, DecisionKind.REJECT, held.reason,
                                 retry_after_s=after)  # fmt: skip
        flight.decided(decision)
        return decision
    flight.grant = held
    return None


async def admit(
    ctx: GatewayContext,
    flight: Flight,
    req: RequestInfo,
    gone: asyncio.Future[None],
    avoid: frozenset[str],
) -> Ticket | Decision | None:
    """A Ticket, a REJECT Decision, or None when the client left while queued.
    Backends in ``avoid`` just refused this request (connect error, engine busy): it is
    not sent there again at once (if it queues, the dispatcher may pick them later)."""
    try:
        result = ctx.admission.submit(req, avoid=avoid)
    except DuplicateRequestId:
        # X-Request-Id is the client's to choose and need not be unique; the scheduler's
        # key must be. The header and the record keep the client's id.
        req = replace(req, request_id=f"{req.request_id}#{uuid.uuid4().hex[:12]}")
        result = ctx.admission.submit(req, avoid=avoid)
    if isinstance(result, Decision) and result.decision is DecisionKind.DELAY:
        flight.decided(result)
        waited = await ctx.admission.wait_dispatch(result, gone)
        if waited is None:
            return None
        result = waited
    if isinstance(result, Decision):
        flight.decided(result)
        return result
    flight.dispatched(result)
    return result


async def _open(
    ctx: GatewayContext, flight: Flight, prepared: Prepared, ticket: Ticket,
    gone: asyncio.Future[None],
) -> Response | str:  # fmt: skip
    """The response, or the kind of failure ("connect", "busy", "stall") that allows
    another try: nothing reached the client yet."""
    sent = ticket.request
    parsed = prepared.parsed
    body = upstream_body(parsed.body, model=sent.model, max_tokens=sent.max_tokens,
                         stream=parsed.stream, raw=prepared.raw,
                         key=parsed.max_tokens_field)  # fmt: skip
    client, pool = ctx.pool.client(ticket.backend), ctx.pool.upstream(ticket.backend)
    watch = _watch(ctx, ticket, prepared.parsed.stream, gone)
    handed_over = False
    try:
        started, upstream = await race(
            open_upstream(client, pool, prepared.path, body, prepared.request.request_id),
            watch.cut,
        )
        if upstream is not None:
            ctx.pool.note_success(ticket.backend)
        if not started or upstream is None:
            if watch.reason == "ended":
                return run_ended(flight, watch.ended_by)
            if watch.reason != "gone":
                return _stalled(ctx, flight, ticket.backend)
            flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        response = await _respond(ctx, flight, prepared, upstream, watch)
        handed_over = isinstance(response, RelayResponse)
        return response
    except (httpx.ConnectError, httpx.ConnectTimeout):
        ctx.metrics.upstream_errors.labels(ticket.backend, "connect").inc()
        ctx.pool.note_connect_error(ticket.backend)
        flight.release_attempt(Outcome.FAILED)
        return "connect"
    except BackendBusy:
        ctx.metrics.upstream_errors.labels(ticket.backend, "busy").inc()
        flight.release_attempt(Outcome.FAILED)
        return "busy"
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


def _stalled(ctx: GatewayContext, flight: Flight, backend: str) -> str:
    """The backend went down or silent before anything reached the client: give the
    ticket back, and let the request try a healthy backend."""
    ctx.metrics.upstream_errors.labels(backend, "stall").inc()
    flight.release_attempt(Outcome.FAILED)
    return "stall"


async def _respond(
    ctx: GatewayContext, flight: Flight, prepared: Prepared, upstream: Upstream,
    watch: StallWatch,
) -> Response | str:  # fmt: skip
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
            if watch.reason == "ended":
                return run_ended(flight, watch.ended_by)
            if watch.reason != "gone":
                return _stalled(ctx, flight, backend)
            flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
            return Response(status_code=CLIENT_CLOSED_REQUEST)
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
        if watch.reason == "ended":
            return run_ended(flight, watch.ended_by)
        if watch.reason != "gone":
            return _stalled(ctx, flight, backend)
        flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    flight.first_byte()
    usage = usage_from_body(data) if upstream.status_code == 200 else None
    status = upstream.status_code
    flight.finish(Outcome.COMPLETED if status < 500 else Outcome.FAILED, status=status,
                  usage=usage)  # fmt: skip
    media = upstream.headers.get("content-type", "application/json")
    return UpstreamAnswer(data, status, headers(flight), media)
