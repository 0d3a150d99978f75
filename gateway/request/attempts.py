"""The attempt loop: admit, send; when the send fails before anything reached the client
(a refused connection, a busy engine, a backend gone silent), admit again, away from the
backends that failed, up to ``server.max_attempts`` times."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from gateway.admission.flight import Flight
from gateway.config.schema import host_port
from gateway.context import GatewayContext
from gateway.request.admit import admit
from policies.engine.scheduler_types import Ticket
from policies.types import Decision, Reason, RequestInfo

T = TypeVar("T")


@dataclass(frozen=True)
class Failed:
    """An attempt that failed before anything reached the client: another may help.
    ``kind``: "connect", "busy", "stall", or the front's own."""

    kind: str
    avoid: bool = True
    """The tries after avoid the backend that failed."""


@dataclass(frozen=True)
class Gone:
    """The client left while the request was queued (it has left the queue)."""


GONE = Gone()


async def attempt(
    ctx: GatewayContext,
    flight: Flight,
    request: RequestInfo,
    send: Callable[[Ticket], Awaitable[T | Failed]],
    *,
    tries: int,
    gone: asyncio.Future[None],
    avoid: frozenset[str] = frozenset(),
    count_refusal: bool = True,
) -> T | Decision | Failed | Gone:
    """What ``send`` made of the first ticket it did not fail; the refusal (a REJECT
    Decision); the last failure when every try failed, or when only backends that failed
    this request were left (no healthy backend); ``GONE``. Backends in ``avoid`` are never
    chosen; a failed backend outside it is avoided by the tries after (when the failure
    says so). ``count_refusal``: as for ``admit.admit``."""
    failed: set[str] = set()
    last = Failed("busy")
    for n in range(1, tries + 1):
        req = request if n == 1 else replace(request, request_id=f"{request.request_id}~{n}")
        away = avoid | failed if failed else avoid
        admitted = await admit(ctx, flight, req, gone, away, count_refusal=count_refusal)
        if admitted is None:
            return GONE
        if isinstance(admitted, Decision):
            if failed and admitted.reason is Reason.NO_HEALTHY_BACKEND:
                break  # only backends that just failed this request were left
            return admitted
        trace = flight.trace
        if trace is not None:
            trace.attempting(admitted, *host_port(ctx.pool.config(admitted.backend).url))
        outcome = await send(admitted)
        if not isinstance(outcome, Failed):
            return outcome
        if trace is not None:
            trace.failed(outcome.kind)
        last = outcome
        if outcome.avoid and admitted.backend not in avoid:
            failed.add(admitted.backend)
    return last
