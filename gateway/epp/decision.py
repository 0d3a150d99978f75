"""One request's decision for Envoy: the request pipeline (``gateway.request.pipeline``),
as every front runs it, behind the ext_proc protocol.

``decide`` returns a ``Routed`` (admitted or degraded: where to, and the body to forward),
a ``Response`` (refused, rejected, no endpoint), or None when Envoy ended the stream while
the request was queued (it has left the queue; its flight is finished).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from gateway.admission.flight import Flight
from gateway.config.schema import EppConfig
from gateway.context import GatewayContext, Runtime
from gateway.epp.endpoints import Endpoints
from gateway.epp.headers import FAIRNESS_ID, MODEL_REWRITE, OBJECTIVE
from gateway.request.attempts import Failed
from gateway.request.auth import Tenant, authenticate, tenant_named
from gateway.request.inbound import decode_json_object
from gateway.request.pipeline import Front, handle
from gateway.request.prepare import Prepared
from gateway.request.responses import rejection
from policies.engine.scheduler_types import Ticket, make_decision
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
    ctx: GatewayContext, runtime: Runtime, inbound: Inbound, gone: asyncio.Future[None]
) -> Routed | Response | None:
    """The request through the pipeline, under ``runtime`` (the stream's one read of the
    config); ``gone``: Envoy ended the call."""
    return await handle(ctx, PickerFront(ctx, runtime, inbound, gone), runtime)


class PickerFront(Front[Routed | None]):
    """The pipeline behind Envoy: the protocol's headers have their say (the fairness id
    as the tenant, when configured; the objective as the workload class, when the tenant
    may use it and none was asked for; the model rewrite in the body); an admitted request
    is routed, not sent (Envoy sends it); a refusal is a ``Response`` the stream turns into
    an ``ImmediateResponse``."""

    def __init__(
        self, ctx: GatewayContext, runtime: Runtime, inbound: Inbound, gone: asyncio.Future[None]
    ) -> None:
        self.ctx = ctx
        self.settings: EppConfig = runtime.loaded.config.epp
        self.inbound = inbound
        self.rewritten = dict(inbound.headers)
        """The headers, the objective's workload class added."""
        self.headers = self.rewritten
        self.path = inbound.path
        self.gone_future = gone
        self.endpoints = Endpoints.of(ctx.pool.configs())
        subset = inbound.subset
        self.avoid = frozenset() if subset is None else self.endpoints.outside(subset)

    def tenant(self, runtime: Runtime) -> Tenant:
        fairness_id = self.headers.get(FAIRNESS_ID)
        if self.settings.fairness_id == "tenant" and fairness_id:
            tenant = tenant_named(runtime.auth, fairness_id, FAIRNESS_ID)
        else:
            tenant = authenticate(runtime.auth, self.headers)
        objective = self.headers.get(OBJECTIVE)
        if (
            objective
            and "x-workload-class" not in self.headers
            and objective in tenant.workload_classes
        ):
            self.rewritten["x-workload-class"] = objective
        return tenant

    async def body(self, runtime: Runtime, tenant: Tenant) -> tuple[bytes, dict[str, Any] | None]:
        raw = self.inbound.raw
        rewrite = self.headers.get(MODEL_REWRITE)
        if not rewrite:
            return raw, None
        body = decode_json_object(raw)
        body["model"] = rewrite
        return orjson.dumps(body), body

    def listen(self) -> asyncio.Future[None]:
        return self.gone_future

    def unservable(self) -> bool:
        return bool(self.avoid) and self.avoid >= frozenset(self.endpoints.by_name)

    async def send(self, flight: Flight, prepared: Prepared, ticket: Ticket) -> Routed | Failed:
        if ticket.backend in self.avoid:  # dispatched from the queue outside the subset
            flight.release_attempt(Outcome.CANCELLED)
            return Failed("outside_subset")
        return self._routed(flight, prepared, ticket.backend)

    def refused(self, flight: Flight, prepared: Prepared, decision: Decision) -> Response:
        return rejection(flight, decision)

    def exhausted(self, flight: Flight, prepared: Prepared, failure: str) -> Response:
        """503 with the HTTP front's body: no endpoint the gateway allows is available."""
        after = self.ctx.scheduler.retry_after(prepared.runtime.loaded.config.health.interval_s)
        decision = make_decision(
            self.ctx.scheduler.policy,
            prepared.request,
            DecisionKind.REJECT,
            Reason.NO_HEALTHY_BACKEND,
            retry_after_s=after,
        )
        flight.decided(decision)
        return rejection(flight, decision)

    def gone(self, flight: Flight) -> None:
        return None

    def _routed(self, flight: Flight, prepared: Prepared, backend: str) -> Routed:
        assert flight.ticket is not None
        sent = flight.ticket.request
        body = prepared.upstream_body(sent)
        route = self.endpoints.route(
            backend, sent.model, self.ctx.pool.snapshot(), self.settings.fallbacks, self.avoid
        )
        return Routed(flight, prepared, route, body, changed=body != self.inbound.raw)
