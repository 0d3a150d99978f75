"""One request's walk, the same for every front: authenticate, read and prepare the body,
decide (the fleet's lease, then the scheduler), queue, forward (the attempt loop), and
end in exactly one terminal outcome, measured on its ``Flight``.

A front (the HTTP endpoints, the Endpoint Picker) is an adapter: a ``Front`` says where
the body comes from, how to send an admitted request on, and what each outcome looks
like in its protocol; ``handle`` does the rest. An async job carries on the flight of a
call the HTTP front handed off, through the same attempt loop (``attempts.attempt``).

Until the request is prepared nothing is taken, so every refusal before needs no cleanup
(``refuse`` counts and records it); after, every path ends the flight once: by the front's
answer, or by ``handle`` when an error or a cancellation escapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from starlette.responses import Response

from gateway.admission.flight import Flight
from gateway.context import GatewayContext, Runtime
from gateway.metrics.records import CLIENT_CLOSED_REQUEST
from gateway.request.admit import admit_shared
from gateway.request.attempts import Failed, Gone, attempt
from gateway.request.auth import Tenant, authenticate
from gateway.request.errors import ApiError
from gateway.request.inbound import request_id_from
from gateway.request.prepare import Prepared, prepare, request_record
from gateway.request.responses import refuse
from policies.engine.scheduler_types import Ticket
from policies.shared_mode import rules
from policies.types import Decision, Outcome

if TYPE_CHECKING:
    from gateway.tracing.request_trace import RequestTrace

T = TypeVar("T")


class Front(Generic[T]):
    """What a front does where its protocol speaks; ``T``: its answer."""

    headers: Mapping[str, str]
    path: str
    prefer_async = False
    """The client asked for the asynchronous handoff of a refusal (the HTTP front)."""
    avoid: frozenset[str] = frozenset()
    """Backends this request may not go to (the picker's subset hint)."""

    def tenant(self, runtime: Runtime) -> Tenant:
        return authenticate(runtime.auth, self.headers)

    async def body(self, runtime: Runtime, tenant: Tenant) -> tuple[bytes, dict[str, Any] | None]:
        """The whole body (and its decoding, when the front has it); raises ``ApiError``."""
        raise NotImplementedError

    def listen(self) -> asyncio.Future[None]:
        """Called once the body is read: a future done when the client leaves."""
        raise NotImplementedError

    def stop_listening(self) -> None:
        """The request is answered (or failed): ``listen``'s future is not needed."""

    def unservable(self) -> bool:
        """No backend is left to this request before it is decided on."""
        return False

    async def send(self, flight: Flight, prepared: Prepared, ticket: Ticket) -> T | Failed:
        """The admitted request sent on, or the failure that allows another attempt."""
        raise NotImplementedError

    def refused(self, flight: Flight, prepared: Prepared, decision: Decision) -> T | Response:
        raise NotImplementedError

    def exhausted(self, flight: Flight, prepared: Prepared, failure: str) -> T | Response:
        """Every attempt failed (``failure``: the last one's kind), or ``unservable``."""
        raise NotImplementedError

    def gone(self, flight: Flight) -> T | Response:
        """The client left while queued (the flight is finished, cancelled)."""
        raise NotImplementedError


async def handle(
    ctx: GatewayContext, front: Front[T], runtime: Runtime | None = None
) -> T | Response:
    """The request through the pipeline, answered in the front's protocol, under
    ``runtime`` (the front's one read of the config) or the config in force now."""
    request_id = request_id_from(front.headers)
    arrival = ctx.clock()
    if runtime is None:
        runtime = ctx.runtime  # the one read of the config for this request
    tracing = ctx.tracing  # None unless the ``tracing:`` section is on: no span is built
    trace = None if tracing is None else tracing.start(front.headers, front.path)
    try:
        tenant = front.tenant(runtime)
        raw, body = await front.body(runtime, tenant)
        prepared = prepare(
            ctx,
            runtime,
            tenant,
            front.headers,
            front.path,
            request_id,
            arrival,
            raw,
            body,
            prefer_async=front.prefer_async,
        )
    except ApiError as err:
        if trace is not None:
            trace.refused_early(err.status, err.reason)
        return refuse(ctx, err, request_id, front.path, arrival)
    except BaseException as exc:
        if trace is not None:
            trace.escaped(exc)
        raise
    gone = front.listen()
    try:
        flight = flight_of(ctx, prepared, arrival, trace)
        try:
            return await _decide(ctx, front, flight, prepared, gone)
        except asyncio.CancelledError:  # the client or the front went away
            flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST, error="cancelled")
            raise
        except BaseException:
            flight.finish(Outcome.FAILED, status=500, error="gateway error")
            raise
    finally:
        front.stop_listening()


def flight_of(
    ctx: GatewayContext, prepared: Prepared, arrival: float, trace: RequestTrace | None = None
) -> Flight:
    """The request's flight; ``handle`` ends it as cancelled (the client or the front went
    away) or as a gateway error when either escapes, else whoever answered ends it.
    ``trace``: the request's spans (tracing on), told what the flight does. (A plain
    try in ``handle``, not a context manager: no generator per request.)"""
    record = request_record(prepared, arrival)
    flight = Flight(ctx, record, prepared.request)
    flight.prompt_chars = prepared.parsed.prompt_chars
    flight.fan_out = prepared.parsed.fan_out
    if trace is not None:
        req = prepared.request
        label = ctx.metrics.tenant_label(req.tenant)
        trace.prepared(req, prepared.path, label, record.extra.get("run_sha256"))
        flight.trace = trace
    return flight


async def _decide(
    ctx: GatewayContext,
    front: Front[T],
    flight: Flight,
    prepared: Prepared,
    gone: asyncio.Future[None],
) -> T | Response:
    req = prepared.request
    if req.is_retry:
        ctx.metrics.retries.labels(ctx.metrics.tenant_label(req.tenant), req.workload_class).inc()
    if front.unservable():
        return front.exhausted(flight, prepared, "no_endpoint")
    if rules(ctx.shared.mode).consults_store:
        refusal = await admit_shared(ctx, flight, req)
        if refusal is not None:
            return front.refused(flight, prepared, refusal)

    send = partial(front.send, flight, prepared)  # no coroutine of its own per attempt
    tries = prepared.runtime.loaded.config.server.max_attempts
    outcome = await attempt(ctx, flight, req, send, tries=tries, gone=gone, avoid=front.avoid)
    if isinstance(outcome, Gone):
        flight.finish(Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST)
        return front.gone(flight)
    if isinstance(outcome, Decision):
        return front.refused(flight, prepared, outcome)
    if isinstance(outcome, Failed):
        return front.exhausted(flight, prepared, outcome.kind)
    return outcome
