"""The fast fake OpenAI backend every setup of the hot-path benchmark talks to.

A raw asyncio ``Protocol`` on uvloop, HTTP/1.1 keep-alive, no framework: it was measured
against a minimal ASGI app under uvicorn+httptools (``backend_asgi.py``, see
``compare_backends.py``) and is the faster of the two, so the backend stays far from being
the bottleneck of any proxy in front of it.

- ``POST /v1/chat/completions`` (and ``/v1/completions``): 16 tokens, or with
  ``"stream": true`` an SSE stream of 64 events, one ``transport.write`` per event with a
  loop turn between events, like an engine that emits token by token;
- ``GET /metrics``: the real vLLM 0.32 dump with idle load gauges, except
  ``num_requests_running``: the connections that carried a completion since the previous
  scrape, or the streams open now if more (see ``_Load``);
- ``/health``, ``/v1/models``.

``--hold`` keeps every stream open after its first event until the client goes away
(the idle-stream memory benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from collections.abc import Callable
from typing import cast

from bench.hotpath import payloads

_MAX_HEAD = 64 * 1024
_JSON = b"application/json"


def _response(status: bytes, body: bytes, content_type: bytes = _JSON) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
_NOT_FOUND = _response(b"404 Not Found", b'{"error":"not found"}')
_HEALTH = _response(b"200 OK", b"")
_MODELS = _response(b"200 OK", payloads.MODELS_BODY)


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Stream:
    """Writes one SSE stream, one event per loop turn, honouring write back-pressure."""

    __slots__ = ("_conn", "_events", "_hold", "_i")

    def __init__(self, conn: FakeOpenAI, events: tuple[bytes, ...], hold: bool) -> None:
        self._conn, self._events, self._i, self._hold = conn, events, 0, hold

    def step(self) -> None:
        conn = self._conn
        if conn.transport is None or conn.transport.is_closing():
            return
        if conn.paused:
            conn.on_resume = self.step
            return
        conn.transport.write(_chunked(self._events[self._i]))
        self._i += 1
        if self._hold:
            return  # idle from here on, until the client closes
        if self._i < len(self._events):
            conn.loop.call_soon(self.step)
            return
        conn.transport.write(b"0\r\n\r\n")
        conn.end_stream()
        conn.parse_buffered()


class _Load:
    """Connections that carried a completion since the last /metrics read.

    A fake answer takes microseconds, so an instantaneous count of requests in progress
    would read "idle" at any concurrency. Over a scrape interval, each busy keep-alive
    connection is one request slot in use: that is what an engine's running batch shows.
    """

    epoch = 0
    active = 0
    open_streams = 0

    @classmethod
    def mark(cls, conn: FakeOpenAI) -> None:
        if conn.epoch != cls.epoch:
            conn.epoch = cls.epoch
            cls.active += 1

    @classmethod
    def read_running(cls) -> int:
        running = max(cls.active, cls.open_streams)
        cls.epoch += 1
        cls.active = 0
        return running


class FakeOpenAI(asyncio.Protocol):
    """One connection. Requests are handled in order; a stream blocks the next request."""

    hold_streams = False

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.paused = False
        self.streaming = False
        self.on_resume: Callable[[], None] | None = None
        self.epoch = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; the interface is the same
        self.transport = cast(asyncio.Transport, transport)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.streaming:
            self.end_stream()

    def end_stream(self) -> None:
        self.streaming = False
        _Load.open_streams -= 1

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.on_resume is not None:
            resume, self.on_resume = self.on_resume, None
            self.loop.call_soon(resume)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.streaming:
            self.parse_buffered()

    def parse_buffered(self) -> None:
        while not self.streaming and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    self.transport.close()
                return
            head = self.buf[:end]
            length = _content_length(head)
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body, self.buf = self.buf[end + 4 : total], self.buf[total:]
            self._handle(head.split(b" ", 2), body)

    def _handle(self, request_line: list[bytes], body: bytes) -> None:
        assert self.transport is not None
        method, path = request_line[0], request_line[1].split(b"?", 1)[0]
        if method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            self._complete(body)
        elif path == b"/metrics":
            body = payloads.metrics_body(_Load.read_running())
            self.transport.write(_response(b"200 OK", body, b"text/plain; version=0.0.4"))
        elif path == b"/health":
            self.transport.write(_HEALTH)
        elif path == b"/v1/models":
            self.transport.write(_MODELS)
        else:
            self.transport.write(_NOT_FOUND)

    def _complete(self, body: bytes) -> None:
        assert self.transport is not None
        req = json.loads(body) if body else {}
        model = str(req.get("model", "fake"))
        _Load.mark(self)
        if not req.get("stream"):
            self.transport.write(_response(b"200 OK", payloads.completion_body(model)))
            return
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        self.streaming = True
        _Load.open_streams += 1
        self.transport.write(_STREAM_HEAD)
        _Stream(self, payloads.sse_events(model, usage), self.hold_streams).step()


def _content_length(head: bytes) -> int:
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    start = at + len(b"\r\ncontent-length:")
    stop = lower.find(b"\r\n", start)
    return int(lower[start : stop if stop >= 0 else None])


async def serve(host: str, port: int, *, hold: bool = False, backlog: int = 4096) -> None:
    FakeOpenAI.hold_streams = hold
    server = await asyncio.get_running_loop().create_server(
        FakeOpenAI, host, port, backlog=backlog, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18000)
    parser.add_argument("--hold", action="store_true", help="keep streams open after one event")
    args = parser.parse_args(argv)
    import uvloop

    uvloop.run(serve(args.host, args.port, hold=args.hold))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
