"""The response path through the picker: learn usage, show the client what the HTTP front
would, end the flight once.

A stream is read with the HTTP front's ``SseRelay``: it notes the usage chunk (the body
asked vLLM for one) and drops it again when the client did not ask for it. Where the
relay's output equals the piece Envoy sent, the piece goes on unchanged (in ``STREAMED``
mode the answer carries no bytes at all). A non-streamed body is kept until its end, for
``usage_from_body``.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.admission.flight import Flight
from gateway.forward.stream_relay import stream_usage
from gateway.forward.upstream import SseRelay, usage_from_body
from gateway.metrics.records import CLIENT_CLOSED_REQUEST
from policies.types import Outcome

_KEEP_LIMIT = 64 * 1024 * 1024
"""A non-streamed answer bigger than this is not kept for its usage (the estimate stays)."""


class ResponseWatch:
    def __init__(self, flight: Flight, stream: bool, client_wants_usage: bool) -> None:
        self.flight = flight
        self.stream = stream
        self.relay = SseRelay(strip_usage=not client_wants_usage) if stream else None
        self.status: int | None = None
        self._kept: list[bytes] = []
        self._kept_size = 0

    def headers(self, hdrs: Mapping[str, str]) -> None:
        status = hdrs.get(":status", "")
        self.learn_status(int(status) if status.isdigit() else 0)

    def learn_status(self, status: int) -> None:
        """The response's status (from its headers, or Envoy's ``response.code``)."""
        self.status = status
        if status != 200:
            self.relay = None  # an error body, relayed as is

    def body(self, chunk: bytes, end: bool) -> bytes | None:
        """The bytes the client gets for ``chunk`` when they differ from it, else None."""
        relay = self.relay
        if relay is None:
            self._keep(chunk)
            return None
        events = relay.feed(chunk)
        if events:
            self.flight.first_token()
        out = b"".join(events)
        if end:
            out += relay.rest()
        return None if out == chunk else out

    def _keep(self, chunk: bytes) -> None:
        if chunk:
            self.flight.first_byte()
        if self.stream or self.status != 200 or self._kept_size > _KEEP_LIMIT:
            return
        self._kept.append(chunk)
        self._kept_size += len(chunk)

    def complete(self) -> None:
        """The response ended normally (its last body piece, or its trailers)."""
        status = self.status or 200
        usage = None
        if self.relay is not None:
            usage = stream_usage(self.flight, self.relay)
        elif status == 200 and not self.stream and self._kept_size <= _KEEP_LIMIT:
            usage = usage_from_body(b"".join(self._kept))
        outcome = Outcome.COMPLETED if status < 500 else Outcome.FAILED
        self.flight.finish(outcome, status=status, usage=usage)

    def abandoned(self, error: str) -> None:
        """The stream ended before the response did: the client left, the endpoint died,
        or Envoy reset the call. A stream whose ``[DONE]`` passed is complete."""
        if self.relay is not None and self.relay.done:
            self.complete()
            return
        usage = stream_usage(self.flight, self.relay) if self.relay is not None else None
        self.flight.finish(
            Outcome.CANCELLED, status=CLIENT_CLOSED_REQUEST, usage=usage, error=error
        )
