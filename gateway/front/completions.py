"""The completion endpoints: validate, decide, forward, relay; one terminal outcome each.

Order of work: authenticate, read the body (size-capped), validate, estimate, submit.
Until ``submit`` nothing is taken, so every refusal before it needs no cleanup. After
it, every path goes through ``Flight.finish`` exactly once.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace

import httpx
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.admission.flight import CLIENT_CLOSED_REQUEST, Flight
from gateway.context import GatewayContext, Runtime
from gateway.forward.stream_relay import relay_stream
from gateway.forward.streaming_response import RelayResponse, race
from gateway.forward.upstream import (
    BackendBusy,
    SseRelay,
    Upstream,
    open_upstream,
    upstream_body,
    usage_from_body,
)
from gateway.front.disconnect import DisconnectWatch
from gateway.front.errors import ApiError
from gateway.front.inbound import (
    ParsedBody,
    decode_json_object,
    header_map,
    parse_body,
    parse_metadata,
    request_id_from,
)
from gateway.front.responses import (
    UpstreamAnswer,
    error_response,
    exhausted,
    headers,
    refuse,
    rejection,
)
from gateway.metrics.records import RequestRecord, prompt_sha256
from gateway.state.contract import Refusal
from gateway.state.fallback import quota_limits
from policies.engine.retry_after import retry_after
from policies.engine.scheduler import DuplicateRequestId
from policies.engine.scheduler_types import Ticket, make_decision
from policies.types import (
    Decision,
    DecisionKind,
    FlowKey,
    Outcome,
    Reason,
    RequestInfo,
    deadline_bucket,
)

_RNG = random.Random()  # Retry-After jitter of refusals by the shared state


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


async def handle_completion(ctx: GatewayContext, request: Request, path: str) -> Response:
    hdrs = header_map(request.scope["headers"])
    request_id = request_id_from(hdrs)
    arrival = ctx.clock()
    try:
        prepared = await _prepare(ctx, request, hdrs, path, request_id, arrival)
    except ApiError as err:
        return refuse(ctx, err, request_id, path, arrival)
    flight = Flight(ctx, _record(prepared, arrival), prepared.request)
    flight.prompt_chars = prepared.parsed.prompt_chars
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
    tenant = runtime.auth.authenticate(hdrs.get("authorization"))
    if tenant is None:
        raise ApiError(401, "missing or unknown API key", type_="authentication_error",
                       code="invalid_api_key", reason="unauthenticated")  # fmt: skip
    raw = await read_body(request, runtime.loaded.config.server.max_body_bytes, hdrs)
    body = decode_json_object(raw)
    meta = parse_metadata(hdrs, tenant, request_id)
    parsed = parse_body(path, body, ctx.pool.known_models(), ctx.pool.model_limit)
    model_limit = ctx.pool.model_limit(parsed.model)
    flow = FlowKey(tenant.name, meta.workload_class, parsed.model, deadline_bucket(meta.deadline_s))
    estimate = ctx.estimator.estimate(
        parsed.model, parsed.prompt_chars, max_tokens=parsed.max_tokens,
        max_model_len=model_limit, flow=flow,
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
    )
    return Prepared(runtime, path, parsed, info, raw)


async def read_body(request: Request, limit: int, hdrs: Mapping[str, str] | None = None) -> bytes:
    """The request body, at most ``limit`` bytes. Reads ``receive`` directly, as
    ``Request.stream`` does minus its async generator (one body message, the usual case,
    is returned as is); a disconnect raises ``ClientDisconnect`` as there."""
    declared = (request.headers if hdrs is None else hdrs).get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            continue
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            if not chunks:
                return bytes(chunk)
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body exceeds {limit} bytes", code="request_too_large",
                    reason="body_too_large")  # fmt: skip


def _record(prepared: Prepared, arrival: float) -> RequestRecord:
    req = prepared.request
    record = RequestRecord(
        req.request_id, req.tenant, req.workload_class, req.model, prepared.path,
        prepared.parsed.stream, req.prompt_hash, arrival, is_retry=req.is_retry,
    )  # fmt: skip
    return record


async def _dispatch(
    ctx: GatewayContext, flight: Flight, prepared: Prepared, gone: asyncio.Future[None]
) -> Response:
    """Admit, open upstream; on a connect error or engine busy, try again (bounded)."""
    if prepared.request.is_retry:
        cls = prepared.request.workload_class
        ctx.metrics.retries.labels(ctx.metrics.tenant_label(prepared.request.tenant), cls).inc()
    if ctx.shared.mode != "local":
        refused = await _admit_shared(ctx, flight, prepared.request)
        if refused is not None:
            return refused
    attempts = prepared.runtime.loaded.config.server.max_attempts
    avoid: set[str] = set()
    last_failure = "busy"
    for attempt in range(1, attempts + 1):
        req = prepared.request
        if attempt > 1:
            req = replace(req, request_id=f"{req.request_id}~{attempt}")
        admitted = await _admit(ctx, flight, req, gone, frozenset(avoid))
        if admitted is None:
            flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        if isinstance(admitted, Decision):
            if avoid and admitted.reason is Reason.NO_HEALTHY_BACKEND:
                break  # only backends that just failed this request were left
            return rejection(flight, admitted)
        outcome = await _open(ctx, flight, prepared, admitted, gone)
        if not isinstance(outcome, str):
            return outcome
        last_failure = outcome
        avoid.add(admitted.backend)
    return exhausted(ctx, prepared.runtime, flight, last_failure)


async def _admit_shared(ctx: GatewayContext, flight: Flight, req: RequestInfo) -> Response | None:
    """The tenant's global lease and token reservation (fleet mode), before the core decides;
    a refusal is answered here, a grant is released by ``Flight.finish``."""
    policy = ctx.scheduler.policy
    held = await ctx.shared.admit(req, quota_limits(policy, req.tenant))
    if isinstance(held, Refusal):
        after = retry_after(held.retry_after_s, policy.retry_after, _RNG)
        decision = make_decision(policy, req, DecisionKind.REJECT, held.reason,
                                 retry_after_s=after)  # fmt: skip
        flight.decided(decision)
        return rejection(flight, decision)
    flight.grant = held
    return None


async def _admit(
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
    """The response, or the kind of failure ("connect", "busy") that allows another try."""
    sent = ticket.request
    body = upstream_body(prepared.parsed.body, model=sent.model, max_tokens=sent.max_tokens,
                         stream=prepared.parsed.stream, raw=prepared.raw)  # fmt: skip
    client, pool = ctx.pool.client(ticket.backend), ctx.pool.upstream(ticket.backend)
    try:
        started, upstream = await race(
            open_upstream(client, pool, prepared.path, body, prepared.request.request_id), gone
        )
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
    if upstream is not None:
        ctx.pool.note_success(ticket.backend)
    if not started or upstream is None:
        flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return await _respond(flight, prepared, upstream, gone)


async def _respond(
    flight: Flight, prepared: Prepared, upstream: Upstream, gone: asyncio.Future[None]
) -> Response:
    if prepared.parsed.stream and upstream.status_code == 200:
        relay = SseRelay(strip_usage=not prepared.parsed.client_wants_usage)
        return RelayResponse(relay_stream(flight, upstream, relay), 200, headers(flight))
    try:
        done, data = await race(upstream.aread(), gone)
    except httpx.HTTPError as exc:
        flight.finish(Outcome.FAILED, status=502, error=type(exc).__name__)
        return error_response(flight, 502, "the backend failed while responding", "upstream_error")
    finally:
        await upstream.aclose()
    if not done or data is None:
        flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    flight.first_byte()
    usage = usage_from_body(data) if upstream.status_code == 200 else None
    status = upstream.status_code
    flight.finish(Outcome.COMPLETED if status < 500 else Outcome.FAILED, status=status,
                  usage=usage)  # fmt: skip
    media = upstream.headers.get("content-type", "application/json")
    return UpstreamAnswer(data, status, headers(flight), media)
