"""One request's decision for Envoy, with the HTTP front's own code: the same parser, the
same admission, the same refusals (as a ``Response`` the stream turns into an
``ImmediateResponse``).

``decide`` returns a ``Routed`` (admitted or degraded: where to, and the body to forward),
a ``Response`` (refused, rejected, no endpoint), or None when Envoy ended the stream while
the request was queued (it has left the queue; its flight is finished).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace

import orjson
from starlette.responses import Response

from gateway.admission.flight import CLIENT_CLOSED_REQUEST, Flight
from gateway.config.schema import EppConfig
from gateway.context import GatewayContext, Runtime
from gateway.epp.endpoints import Endpoints
from gateway.epp.headers import FAIRNESS_ID, MODEL_REWRITE, OBJECTIVE
from gateway.forward.upstream import upstream_body
from gateway.front.completions import (
    Prepared,
    admit,
    admit_shared,
    authenticate,
    prepare,
    request_record,
)
from gateway.request.auth import Tenant
from gateway.request.errors import ApiError
from gateway.request.inbound import decode_json_object, request_id_from
from gateway.request.responses import refuse, rejection
from policies.engine.scheduler_types import make_decision
from policies.types import Decision, DecisionKind, Outcome, Reason


@dataclass
class Routed:
    flight: Flight
    prepared: Prepared
    endpoints: str
    """``ip:port[,ip:port...]``: the chosen backend first, then fallbacks."""
    body: bytes
    """The body to forward (degraded, usage requested for a stream)."""
    changed: bool
    """``body`` differs from the bytes Envoy holds."""


@dataclass(frozen=True)
class Inbound:
    """What the stream collected of the request."""

    headers: Mapping[str, str]
    path: str
    raw: bytes
    subset: frozenset[str] | None


async def decide(
    ctx: GatewayContext, settings: EppConfig, inbound: Inbound, gone: asyncio.Future[None]
) -> Routed | Response | None:
    hdrs = inbound.headers
    request_id, arrival, runtime = request_id_from(hdrs), ctx.clock(), ctx.runtime
    try:
        prepared = _prepare(ctx, runtime, settings, inbound, request_id, arrival)
    except ApiError as err:
        return refuse(ctx, err, request_id, inbound.path, arrival)
    flight = Flight(ctx, request_record(prepared, arrival), prepared.request)
    flight.prompt_chars = prepared.parsed.prompt_chars
    flight.fan_out = prepared.parsed.fan_out
    try:
        return await _admit(ctx, settings, flight, prepared, inbound, gone)
    except asyncio.CancelledError:
        flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST, error="cancelled")
        raise
    except BaseException:
        flight.finish(Outcome.FAILED, status=500, error="gateway error")
        raise


def _prepare(
    ctx: GatewayContext, runtime: Runtime, settings: EppConfig, inbound: Inbound,
    request_id: str, arrival: float,
) -> Prepared:  # fmt: skip
    """The HTTP front's ``prepare``, after the protocol's headers have had their say: the
    fairness id as the tenant (when configured), the objective as the workload class (when
    the tenant may use it and none was asked for), the model rewrite in the body."""
    hdrs = dict(inbound.headers)
    tenant = _tenant(runtime, settings, hdrs)
    objective = hdrs.get(OBJECTIVE)
    if objective and "x-workload-class" not in hdrs and objective in tenant.workload_classes:
        hdrs["x-workload-class"] = objective
    raw, body = inbound.raw, None
    rewrite = hdrs.get(MODEL_REWRITE)
    if rewrite:
        body = decode_json_object(raw)
        body["model"] = rewrite
        raw = orjson.dumps(body)
    return prepare(ctx, runtime, tenant, hdrs, inbound.path, request_id, arrival, raw, body)


def _tenant(runtime: Runtime, settings: EppConfig, hdrs: Mapping[str, str]) -> Tenant:
    fairness_id = hdrs.get(FAIRNESS_ID)
    if settings.fairness_id == "tenant" and fairness_id:
        tenant = runtime.auth.named(fairness_id)
        if tenant is None:
            raise ApiError(401, f"unknown tenant {fairness_id!r} in {FAIRNESS_ID}",
                           type_="authentication_error", code="unknown_tenant",
                           reason="unauthenticated")  # fmt: skip
        return tenant
    return authenticate(runtime, hdrs)


async def _admit(
    ctx: GatewayContext, settings: EppConfig, flight: Flight, prepared: Prepared,
    inbound: Inbound, gone: asyncio.Future[None],
) -> Routed | Response | None:  # fmt: skip
    endpoints = Endpoints.of(ctx.pool.configs())
    avoid = frozenset() if inbound.subset is None else endpoints.outside(inbound.subset)
    if avoid and avoid >= frozenset(endpoints.by_name):
        return _no_endpoint(ctx, flight, prepared)
    if ctx.shared.mode != "local":
        refusal = await admit_shared(ctx, flight, prepared.request)
        if refusal is not None:
            return rejection(flight, refusal)
    req = prepared.request
    for attempt in range(1, prepared.runtime.loaded.config.server.max_attempts + 1):
        if attempt > 1:
            req = replace(prepared.request, request_id=f"{prepared.request.request_id}~{attempt}")
        admitted = await admit(ctx, flight, req, gone, avoid)
        if admitted is None:
            flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
            return None
        if isinstance(admitted, Decision):
            return rejection(flight, admitted)
        if admitted.backend not in avoid:
            return _routed(ctx, settings, flight, prepared, endpoints, admitted.backend, inbound)
        flight.release_attempt(Outcome.CANCELLED)  # dispatched from the queue outside the subset
    return _no_endpoint(ctx, flight, prepared)


def _no_endpoint(ctx: GatewayContext, flight: Flight, prepared: Prepared) -> Response:
    """503 with the HTTP front's body: no endpoint the gateway allows is available."""
    after = ctx.scheduler.retry_after(prepared.runtime.loaded.config.health.interval_s)
    decision = make_decision(ctx.scheduler.policy, prepared.request, DecisionKind.REJECT,
                             Reason.NO_HEALTHY_BACKEND, retry_after_s=after)  # fmt: skip
    flight.decided(decision)
    return rejection(flight, decision)


def _routed(
    ctx: GatewayContext, settings: EppConfig, flight: Flight, prepared: Prepared,
    endpoints: Endpoints, backend: str, inbound: Inbound,
) -> Routed:  # fmt: skip
    assert flight.ticket is not None
    sent, parsed = flight.ticket.request, prepared.parsed
    body = upstream_body(parsed.body, model=sent.model, max_tokens=sent.max_tokens,
                         stream=parsed.stream, raw=prepared.raw,
                         key=parsed.max_tokens_field)  # fmt: skip
    avoid = frozenset() if inbound.subset is None else endpoints.outside(inbound.subset)
    route = endpoints.route(backend, sent.model, ctx.pool.snapshot(), settings.fallbacks, avoid)
    return Routed(flight, prepared, route, body, changed=body != inbound.raw)
