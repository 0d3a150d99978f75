"""The SSE relay generator. Its ``finally`` is where a streamed request ends: it closes
the upstream response (vLLM aborts the request when the connection drops) and finishes
the flight, whether the stream completed, the backend died, or the client left."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx

from gateway.admission.flight import CLIENT_CLOSED_REQUEST, Flight
from gateway.forward.upstream import SseRelay, Upstream, sse_error_event
from policies.types import Outcome, Usage


async def relay_stream(
    flight: Flight, upstream: Upstream, relay: SseRelay
) -> AsyncGenerator[bytes, None]:
    """Yields upstream SSE events as they arrive: all complete events of one upstream read
    as one chunk (one send to the client; none waits for a later read)."""
    outcome, status, error = Outcome.CANCELLED, CLIENT_CLOSED_REQUEST, None
    try:
        async for chunk in upstream.aiter_raw():
            events = relay.feed(chunk)
            if events:
                flight.first_token()
                yield events[0] if len(events) == 1 else b"".join(events)
        rest = relay.rest()
        if rest:
            yield rest
        outcome, status = Outcome.COMPLETED, 200
    except httpx.HTTPError as exc:
        # Bytes were already sent: the status line cannot change, so end with an error event.
        outcome, status, error = Outcome.FAILED, 502, type(exc).__name__
        flight.ctx.metrics.upstream_errors.labels(flight.record.backend or "", "stream").inc()
        yield sse_error_event("the backend failed mid-stream; the response is incomplete")
    finally:
        await upstream.aclose()
        flight.finish(outcome, status=status, usage=_usage(flight, relay), error=error)


def _usage(flight: Flight, relay: SseRelay) -> Usage | None:
    """The backend's own numbers; for a cut stream, a lower bound from the events seen."""
    if relay.usage is not None:
        return relay.usage
    if flight.request is None or relay.content_events == 0:
        return None
    return Usage(flight.request.estimate.prompt_tokens, relay.content_events)
