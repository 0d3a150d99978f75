"""Admission: the fleet's lease (fleet mode), then the scheduler's answer, waiting in
the queue when it says DELAY. Every decision handed out is counted on the flight."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

from gateway.admission.flight import Flight
from gateway.context import GatewayContext
from gateway.replicas.contract import Refusal
from gateway.replicas.quota_limits import quota_limits
from policies.engine.scheduler import DuplicateRequestId
from policies.engine.scheduler_types import Ticket, make_decision
from policies.types import Decision, DecisionKind, RequestInfo


async def admit_shared(
    ctx: GatewayContext, flight: Flight, req: RequestInfo, *, count_refusal: bool = True
) -> Decision | None:
    """The tenant's global lease and token reservation (fleet mode), before the core decides;
    a refusal is returned to answer, a grant is released by ``Flight.finish``.
    ``count_refusal``: False for a refusal that is waited out, not answered (async jobs)."""
    policy = ctx.scheduler.policy
    # the global limits, not the local share the scheduler may be running meanwhile
    limits = quota_limits(ctx.full_policy or policy, req.tenant)
    held = await ctx.shared.admit(req, limits)
    if isinstance(held, Refusal):
        after = ctx.scheduler.retry_after(held.retry_after_s)
        decision = make_decision(policy, req, DecisionKind.REJECT, held.reason, retry_after_s=after)
        if count_refusal:
            flight.decided(decision)
        if flight.trace is not None:
            flight.trace.decided(decision)
        return decision
    flight.grant = held
    return None


async def admit(
    ctx: GatewayContext,
    flight: Flight,
    req: RequestInfo,
    gone: asyncio.Future[None],
    avoid: frozenset[str],
    *,
    count_refusal: bool = True,
) -> Ticket | Decision | None:
    """A Ticket, a REJECT Decision, or None when the client left while queued.
    Backends in ``avoid`` just refused this request (connect error, engine busy): it is
    not sent there again at once (if it queues, the dispatcher may pick them later).
    ``count_refusal``: as for ``admit_shared``."""
    trace = flight.trace
    if trace is not None:
        trace.deciding()
    try:
        result = ctx.admission.submit(req, avoid=avoid)
    except DuplicateRequestId:
        # X-Request-Id is the client's to choose and need not be unique; the scheduler's
        # key must be. The header and the record keep the client's id.
        req = replace(req, request_id=f"{req.request_id}#{uuid.uuid4().hex[:12]}")
        result = ctx.admission.submit(req, avoid=avoid)
    if isinstance(result, Decision) and result.decision is DecisionKind.DELAY:
        flight.decided(result)
        if trace is not None:
            trace.queued(result)
        waited = await ctx.admission.wait_dispatch(result, gone)
        if trace is not None:
            trace.dequeued(waited, _waited(ctx, flight))
        if waited is None:
            return None
        result = waited
    elif trace is not None:
        trace.decided(result)
    if isinstance(result, Decision):
        if count_refusal:
            flight.decided(result)
        return result
    flight.dispatched(result)
    return result


def _waited(ctx: GatewayContext, flight: Flight) -> float:
    """How long the request has been queued (its flight notes when it entered)."""
    return 0.0 if flight.enqueued_at is None else ctx.clock() - flight.enqueued_at
