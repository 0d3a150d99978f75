"""A lean HTTP/1.1 upstream client for the hot path: one keep-alive pool per backend.

Why not httpx here: under load its connection pool (httpcore) walks every connection on
each request and asks each whether it expired, through anyio's typed-attribute lookups;
with 64-256 connections that walk dominates the gateway's CPU (see docs/performance.md).
This pool keeps idle connections in a LIFO deque (take and put are O(1)), parses responses
with httptools (C, already installed with uvicorn[standard]) and never scans.

Only what the gateway uses of ``httpx.Response`` is offered (``status_code``,
``headers.get``, ``aread``, ``aiter_raw``, ``aclose``), and failures are raised as the
httpx exceptions the gateway already handles: ``ConnectError``/``ConnectTimeout`` when
nothing reached the backend, ``ReadTimeout`` after ``read_timeout_s`` of silence,
``RemoteProtocolError``/``ReadError`` when the connection breaks mid-response.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import httptools
import httpx

from gateway.forward.memory_connection import Connect

_HIGH_WATER = 256 * 1024
"""Buffered, unread body bytes past which reading from the backend pauses (back-pressure)."""


class _Connection(asyncio.Protocol):
    """One upstream connection; carries one response at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.response: UpstreamResponse | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.response is None:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        self.response.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response.lost(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class UpstreamResponse:
    """A response whose head has arrived; the body is read with ``aread``/``aiter_raw``.
    ``aclose`` must always be called: it returns the connection to the pool or closes it."""

    def __init__(self, conn: _Connection, read_timeout_s: float) -> None:
        self._conn = conn
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._timeout_s = read_timeout_s
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head_done = False
        self._complete = False
        self._error: BaseException | None = None
        self._paused = False
        self._last_data = self._loop.time()
        self._released = False
        self._keep_alive = False
        self.status_code = 0
        self.headers: dict[str, str] = {}

    # -- httptools callbacks ------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status_code = self._parser.get_status_code()
        # Only meaningful here: after the message completes, httptools answers False.
        self._keep_alive = self._parser.should_keep_alive()
        self._head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self._conn.transport:
            self._paused = True
            self._conn.transport.pause_reading()

    def on_message_complete(self) -> None:
        self._complete = True

    # -- from the connection ----------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        self._last_data = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"bad upstream response: {exc}"))
            self._conn.close()
            return
        self._wake()

    def lost(self, exc: Exception | None) -> None:
        if self._complete:
            pass
        elif not self._head_done and isinstance(exc, httpx.TransportError):
            self._fail(exc)  # an in-memory connection reports its transport's own error
        elif not self._head_done:  # nothing came back: safe to retry on a fresh connection
            why = f" ({exc})" if exc else ""
            self._fail(httpx.RemoteProtocolError(f"server disconnected without a response{why}"))
        elif exc is None and self._delimited_by_close():
            self._complete = True  # HTTP/1.0-style body: it ends where the connection does
            self._keep_alive = False
        else:
            self._fail(httpx.ReadError(str(exc or "connection closed mid-response")))
        self._wake()

    def _delimited_by_close(self) -> bool:
        framed = "content-length" in self.headers
        return not framed and "chunked" not in self.headers.get("transfer-encoding", "")

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- for the gateway ----------------------------------------------------------------
    async def _wait(self) -> None:
        """Until more arrives; ``ReadTimeout`` after ``read_timeout_s`` without any byte.

        One timer per response, re-armed lazily from the newest byte: not one per chunk."""
        self._waiter = self._loop.create_future()
        if self._timer is None:
            self._timer = self._loop.call_at(self._last_data + self._timeout_s, self._on_timer)
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        if self._waiter is None:
            return  # nobody waiting: the next wait arms it again
        if self._loop.time() - self._last_data >= self._timeout_s:
            self._fail(httpx.ReadTimeout(f"no data from upstream for {self._timeout_s:g} s"))
            self._conn.close()
            self._wake()
        else:
            self._timer = self._loop.call_at(self._last_data + self._timeout_s, self._on_timer)

    async def head(self) -> None:
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (transfer decoding done, no content decoding): all that
        is buffered now as one piece (several HTTP chunks of one read are one relay step)."""
        while True:
            if self._chunks:
                yield self._take()
                continue
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            await self._wait()

    async def aread(self) -> bytes:
        """The whole body: ``aiter_raw``'s pieces joined, without an async generator (a
        small answer is usually all buffered when the head is)."""
        pieces: list[bytes] = []
        while True:
            if self._chunks:
                pieces.append(self._take())
                continue
            if self._complete:
                return pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if self._error is not None:
                raise self._error
            await self._wait()

    def _take(self) -> bytes:
        """All that is buffered, as one piece; reading resumes once the buffer drained."""
        chunks = self._chunks
        chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= _HIGH_WATER // 4:
            self._paused = False
            if self._conn.transport is not None:
                self._conn.transport.resume_reading()
        return chunk

    async def aclose(self) -> None:
        self.release(reuse=self._complete and self._error is None and self._keep_alive)

    def release(self, *, reuse: bool) -> None:
        """Give the connection back (``reuse``) or close it; once. The read timer is
        cancelled here: armed, it holds this response and its connection until it fires,
        ``read_timeout_s`` later."""
        if self._released:
            return
        self._released = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        conn = self._conn
        conn.response = None
        if reuse:
            conn.pool.put(conn)
        else:
            conn.close()


class UpstreamPool:
    """Keep-alive connections to one backend (``base_url``), reused newest first.

    No cap on connections: how many requests are in flight is the scheduler's decision.
    At most ``max_idle`` idle connections are kept; more are closed when they come back.
    """

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_idle: int = 256,
        connect: Connect | None = None,
    ) -> None:
        """``connect`` replaces the TCP connect (``memory_connection.memory_connector``)."""
        url = urlsplit(base_url)
        if url.scheme != "http" or url.hostname is None:
            raise ValueError(f"only http:// upstreams are served by this pool: {base_url}")
        self._host, self._port = url.hostname, url.port or 80
        self._prefix = url.path.rstrip("/")
        self._host_header = f"Host: {url.netloc}\r\n".encode()
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_idle = max_idle
        self._idle: collections.deque[_Connection] = collections.deque()
        self._closed = False
        self._connect_with = connect

    async def send(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamResponse:
        """Send one request; return once the response head has arrived."""
        head = self._head(method, path, len(body), headers)
        conn = self._take_idle()
        if conn is not None:
            try:
                return await self._exchange(conn, head, body)
            except httpx.RemoteProtocolError:
                pass  # the backend closed this idle connection meanwhile: one fresh try
        return await self._exchange(await self._connect(), head, body)

    def _head(self, method: str, path: str, length: int, headers: Mapping[str, str]) -> bytes:
        lines = [f"{method} {self._prefix}{path} HTTP/1.1\r\n".encode(), self._host_header]
        lines += [f"{k}: {v}\r\n".encode("latin-1") for k, v in headers.items()]
        lines.append(b"content-length: %d\r\n\r\n" % length)
        return b"".join(lines)

    async def _exchange(self, conn: _Connection, head: bytes, body: bytes) -> UpstreamResponse:
        response = UpstreamResponse(conn, self._read_timeout_s)
        conn.response = response
        assert conn.transport is not None
        conn.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            conn.transport.write(body)
        try:
            await response.head()
        except BaseException:  # no head (or the caller left): the connection is not reused
            response.release(reuse=False)
            raise
        return response

    @property
    def idle(self) -> int:
        """Idle keep-alive connections held now."""
        return sum(not c.closed for c in self._idle)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def put(self, conn: _Connection) -> None:
        if self._closed or conn.closed or len(self._idle) >= self._max_idle:
            conn.close()
        else:
            self._idle.append(conn)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._connect_with is not None:
            made = await self._connect_with(lambda: _Connection(self))
            assert isinstance(made, _Connection)
            return made
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self), self._host, self._port
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connect to {self._host}:{self._port}") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"connect to {self._host}:{self._port}: {exc}") from exc
        return conn

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)
