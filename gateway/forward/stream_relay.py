"""The SSE relay generator. Its ``finally`` is where a streamed request ends: it closes
the upstream response (vLLM aborts the request when the connection drops) and finishes
the flight, whether the stream completed, the backend died or stalled, or the client left.

A stream whose last event (``data: [DONE]``) was handed to the client is completed, even
if the client closes before the backend's end of stream is read: the answer was whole.

The first events are read before the response starts (``first_events``), so a backend
that goes down or silent before them can still be replaced by another; after them, a
stall (``StallWatch``) ends the stream with an SSE error event.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import httpx

from gateway.admission.flight import Flight
from gateway.forward.stall import StallWatch
from gateway.forward.streaming_response import race
from gateway.forward.upstream import SseRelay, Upstream, sse_error_event
from gateway.metrics.records import CLIENT_CLOSED_REQUEST
from policies.types import Outcome, Reason, Usage

STALLED = 504  # the record's status for a stream the backend stopped feeding
RUN_ENDED = 409  # the record's status for a stream cut because its agent run ended


class _Stalled(Exception):
    pass


async def _read(chunks: AsyncIterator[bytes], watch: StallWatch | None) -> bytes | None:
    """The next upstream read (None at its end); ``_Stalled`` when ``watch`` cuts first."""
    if watch is None:
        return await anext(chunks, None)
    if watch.cut.done():
        raise _Stalled
    done, chunk = await race(anext(chunks, None), watch.cut)
    if not done:
        raise _Stalled
    return chunk


async def first_events(
    flight: Flight, relay: SseRelay, chunks: AsyncIterator[bytes], watch: StallWatch
) -> bytes | None:
    """The stream's first complete events (b"" if it ended without any); None when
    ``watch`` cut first (its ``reason`` says why)."""
    while True:
        try:
            chunk = await _read(chunks, watch)
        except _Stalled:
            return None
        if chunk is None:
            return b""
        events = relay.feed(chunk)
        if events:
            watch.heard()
            flight.first_token()
            watch.paused = True  # until the relay has handed these to the client
            return events[0] if len(events) == 1 else b"".join(events)


async def relay_stream(
    flight: Flight,
    upstream: Upstream,
    relay: SseRelay,
    *,
    watch: StallWatch | None = None,
    chunks: AsyncIterator[bytes] | None = None,
    first: bytes = b"",
) -> AsyncGenerator[bytes, None]:
    """Yields upstream SSE events as they arrive: ``first`` (already read), then all
    complete events of one upstream read as one chunk (one send to the client; none waits
    for a later read)."""
    outcome, status, error = Outcome.CANCELLED, CLIENT_CLOSED_REQUEST, None
    delivered = False  # the client was handed ``data: [DONE]``
    reads = chunks if chunks is not None else upstream.aiter_raw()
    try:
        if first:
            yield first
            delivered = relay.done
        _resume(watch)
        while (chunk := await _read(reads, watch)) is not None:
            events = relay.feed(chunk)
            if events:
                _heard(flight, watch)
                flight.first_token()
                yield events[0] if len(events) == 1 else b"".join(events)
                delivered = relay.done
                _resume(watch)
        rest = relay.rest()
        if rest:
            yield rest
        outcome, status = Outcome.COMPLETED, 200
    except _Stalled:
        assert watch is not None
        if watch.reason == "ended":  # the call's agent run was cancelled or expired
            expired = watch.ended_by is Reason.RUN_DEADLINE_EXPIRED
            outcome = Outcome.EXPIRED if expired else Outcome.CANCELLED
            status, error = RUN_ENDED, f"run {getattr(watch.ended_by, 'value', 'ended')}"
            yield sse_error_event("the agent run ended; the response is incomplete", "run_ended")
        else:
            outcome, status, error = Outcome.FAILED, STALLED, f"backend {watch.reason}"
            flight.ctx.metrics.upstream_errors.labels(flight.record.backend or "", "stall").inc()
            yield sse_error_event("the backend stopped responding; the response is incomplete")
    except httpx.HTTPError as exc:
        if relay.done:  # the answer was whole; the connection broke after it
            outcome, status = Outcome.COMPLETED, 200
            return
        # Bytes were already sent: the status line cannot change, so end with an error event.
        outcome, status, error = Outcome.FAILED, 502, type(exc).__name__
        flight.ctx.metrics.upstream_errors.labels(flight.record.backend or "", "stream").inc()
        yield sse_error_event("the backend failed mid-stream; the response is incomplete")
    finally:
        if delivered and outcome is Outcome.CANCELLED:
            outcome, status = Outcome.COMPLETED, 200
        if watch is not None:
            watch.close()
        await upstream.aclose()
        flight.finish(outcome, status=status, usage=stream_usage(flight, relay), error=error)


def _heard(flight: Flight, watch: StallWatch | None) -> None:
    """An event arrived: the silence it ended is one inter-token measurement. The watch
    pauses while the relay hands the events to the client (a slow reader is no stall)."""
    if watch is None:
        return
    silence = watch.heard()
    watch.paused = True
    stalls = flight.ctx.stalls
    if stalls is not None:
        stalls.observe_gap(flight.record.backend or "", silence)


def _resume(watch: StallWatch | None) -> None:
    """The client took the events: silence counts again from now."""
    if watch is not None:
        watch.paused = False
        watch.heard()


def stream_usage(flight: Flight, relay: SseRelay) -> Usage | None:
    """The backend's own numbers; for a cut stream, a lower bound from the events seen."""
    if relay.usage is not None:
        return relay.usage
    if flight.request is None or relay.content_events == 0:
        return None
    return Usage(flight.request.estimate.prompt_tokens, relay.content_events)
