"""The HTTP/1.1 server protocol the gateway runs on: uvicorn's httptools protocol plus the
two limits it lacks for a request head (uvicorn bounds neither with httptools), and a
lingering close.

* A head (request line and headers) larger than ``max_header_bytes`` gets 431 and the
  connection is closed, while it is being parsed (the rest is never buffered).
* A head not complete within ``header_timeout_s`` of the connection opening, or of the
  request's first byte on a kept-alive connection, gets 408 and the connection is closed
  (a slowloris on the headers holds nothing for long).

Both are a client's own fault: answered in the OpenAI error shape, logged at no level, and
counted (with unparseable requests, 400) through ``on_refused`` in the gateway's
``sluicegate_invalid_requests`` by status. The body has its own timeout and size cap, in the
completion handler (``read_body``).

A request answered before its body has all arrived (a 413, a 401, a 408; also the 431 and
408 above) ends its connection with a bounded lingering close
(``gateway/front/lingering_close.py``): the answer carries ``connection: close``, and the
rest of the body is read and thrown away so the client can read the answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import httptools
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.config.schema import ServerConfig
from gateway.front.lingering_close import LingerBounds, Lingering
from gateway.request.errors import error_body

_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}
_CODES = {408: "request_timeout", 431: "request_header_fields_too_large"}


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a refused request."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    max_header_bytes = 32_768
    header_timeout_s = 10.0
    linger = LingerBounds()
    on_refused: Callable[[int], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._lingering: Lingering | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._lingering is not None:
            self._lingering.stop()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None:
            self._lingering.received(len(data))  # and thrown away
            return
        if self._refused:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError:
            if not self._refused:
                self._invalid()
        except httptools.HttpParserError:
            self._invalid()
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def _invalid(self) -> None:
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self._counted(400)
        self.send_400_response(msg)

    # The parser's callbacks call HttpToolsProtocol's by name, not through super(): they
    # run for every header of every request, and super() builds an object per call.

    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        self._head_bytes = 0
        if self._head_timer is None:
            self._arm()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        HttpToolsProtocol.on_url(self, url)

    def on_header(self, name: bytes, value: bytes) -> None:
        size = self._head_bytes = self._head_bytes + len(name) + len(value) + 4  # ": ", CRLF
        if size > self.max_header_bytes:
            self._head_too_large()
        HttpToolsProtocol.on_header(self, name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        before = self.cycle
        HttpToolsProtocol.on_headers_complete(self)
        if self.cycle is not before:
            self.cycle.send = self._early_answer_lingers(self.cycle)  # type: ignore[method-assign,assignment]

    def _early_answer_lingers(
        self, cycle: RequestResponseCycle
    ) -> Callable[[ASGISendEvent], Coroutine[Any, Any, None]]:
        """``cycle.send``, but an answer started before the request body has all arrived
        says ``connection: close`` and ends in a lingering close, not a close at once.
        Once the body is all in and no answer started early, it is ``cycle.send``'s own
        coroutine (no frame of its own per message: a stream sends one per event)."""
        send = cycle.send
        early = False

        async def lingering(message: ASGISendEvent) -> None:
            nonlocal early
            if message["type"] == "http.response.start" and cycle.more_body:
                early = True
                cycle.keep_alive = False  # uvicorn adds connection: close
            last = message["type"] == "http.response.body" and not message.get("more_body")
            linger = last and early and cycle.more_body and not cycle.disconnected
            if linger:
                cycle.keep_alive = True  # uvicorn would close at once: the drain closes
            await send(message)
            if linger:
                self._linger()

        def send_then_linger(message: ASGISendEvent) -> Coroutine[Any, Any, None]:
            if not early and not cycle.more_body:  # the body is all in: nothing to linger for
                return send(message)
            return lingering(message)

        return send_then_linger

    def _linger(self) -> None:
        if self.transport.is_closing() or self._lingering is not None:
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()  # uvicorn pauses reading while a body waits unread
        self._lingering = Lingering(self.transport, self.linger, asyncio.get_running_loop())

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_header_bytes:
            self._head_too_large()

    def _head_too_large(self) -> None:
        self._refuse(431, f"the request head exceeds {self.max_header_bytes} bytes")
        raise _Refused

    def _arm(self) -> None:
        self._head_timer = asyncio.get_running_loop().call_later(
            self.header_timeout_s, self._head_timed_out
        )

    def _disarm(self) -> None:
        timer, self._head_timer = self._head_timer, None
        if timer is not None:
            timer.cancel()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self._refuse(
                408, f"the request head was not received within {self.header_timeout_s:g} s"
            )

    def _refuse(self, status: int, message: str) -> None:
        self._refused = True
        self._disarm()
        self._counted(status)
        body = json.dumps(error_body(message, "invalid_request_error", None, _CODES[status]))
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write((head + body).encode("latin-1"))
        self._linger()

    def _counted(self, status: int) -> None:
        on_refused = type(self).on_refused
        if on_refused is not None:
            on_refused(status)


def guarded_http(
    server: ServerConfig, on_refused: Callable[[int], None] | None = None
) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http=``, with ``server``'s limits; ``on_refused``
    is told the status of every request refused before it reaches the app."""
    linger = LingerBounds(
        server.lingering_time_s, server.lingering_timeout_s, server.lingering_max_bytes
    )
    attrs = {
        "max_header_bytes": server.max_header_bytes,
        "header_timeout_s": server.header_timeout_s,
        "linger": linger,
        "on_refused": staticmethod(on_refused) if on_refused else None,
    }
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), attrs)
