"""An in-memory connection for ``UpstreamPool``: the pool that ships, without sockets.

``memory_connector(transport)`` returns what ``UpstreamPool(connect=...)`` calls instead of
opening a TCP connection. Bytes the pool writes are parsed as HTTP/1.1 requests (httptools,
as the pool parses responses), handed to an ``httpx.AsyncBaseTransport`` (an
``httpx.MockTransport`` in the tests, or any other), and its response is written back as
HTTP/1.1 bytes (chunked), piece by piece as the transport's stream yields them. So a test
drives the same request writing, response parsing, keep-alive, back-pressure and timeout
code that production runs; only the socket is replaced.

A ``httpx.TransportError`` the transport raises before a response (a fake backend that
refuses) ends the connection with that very error, which the pool raises as is; an error
mid-body ends it as a connection lost mid-response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httptools
import httpx

Connect = Callable[[Callable[[], asyncio.Protocol]], Awaitable[asyncio.Protocol]]
"""Open one connection: given the protocol factory, return the connected protocol."""


def memory_connector(transport: httpx.AsyncBaseTransport, base_url: str) -> Connect:
    """Connections to ``base_url`` served in memory by ``transport``."""

    async def connect(factory: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
        protocol = factory()
        protocol.connection_made(_MemoryTransport(protocol, transport, base_url.rstrip("/")))
        return protocol

    return connect


class _MemoryTransport(asyncio.Transport):
    """The pool's side of one in-memory connection (one request at a time, as HTTP/1.1)."""

    def __init__(
        self, protocol: asyncio.Protocol, upstream: httpx.AsyncBaseTransport, base_url: str
    ) -> None:
        super().__init__()
        self._protocol = protocol
        self._upstream = upstream
        self._base_url = base_url
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._closing = False
        self._reading = asyncio.Event()
        self._reading.set()
        self._task: asyncio.Task[None] | None = None

    # -- httptools callbacks -------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        method = self._parser.get_method().decode()
        request = httpx.Request(
            method,
            self._base_url + self._url.decode(),
            headers=self._headers,
            content=b"".join(self._body),
        )
        self._url, self._headers, self._body = b"", [], []
        self._task = asyncio.get_running_loop().create_task(self._serve(request))

    # -- asyncio.Transport -----------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._parser.feed_data(bytes(data))

    def close(self) -> None:
        self._end(None)

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    # -- the server side -----------------------------------------------------------------
    async def _serve(self, request: httpx.Request) -> None:
        try:
            response = await self._upstream.handle_async_request(request)
        except httpx.TransportError as exc:
            self._end(exc)
            return
        except Exception as exc:  # a broken fake: the connection drops without an answer
            self._end(ConnectionResetError(repr(exc)))
            return
        try:
            self._deliver(_head(response))
            async for piece in response.stream:  # type: ignore[union-attr]
                await self._reading.wait()
                if piece:
                    self._deliver(b"%x\r\n%b\r\n" % (len(piece), piece))
            self._deliver(b"0\r\n\r\n")
        except Exception as exc:  # the body failed mid-way: the connection breaks
            self._end(ConnectionResetError(repr(exc)))
        finally:
            await response.aclose()

    def _deliver(self, data: bytes) -> None:
        if not self._closing:
            self._protocol.data_received(data)

    def _end(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        task, current = self._task, asyncio.current_task()
        if task is not None and task is not current and not task.done():
            task.cancel()  # the pool hung up: the fake backend sees its stream closed
        asyncio.get_running_loop().call_soon(self._protocol.connection_lost, exc)


def _head(response: httpx.Response) -> bytes:
    lines = [b"HTTP/1.1 %d %b\r\n" % (response.status_code, response.reason_phrase.encode())]
    for name, value in response.headers.raw:
        if name.lower() not in (b"content-length", b"transfer-encoding"):
            lines.append(name + b": " + value + b"\r\n")
    lines.append(b"transfer-encoding: chunked\r\n\r\n")
    return b"".join(lines)
