"""The hot path's upstream pool over real loopback sockets: reuse, streaming, failures."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from gateway.backends.pool import BackendPool
from gateway.config.schema import BackendConfig, HealthConfig
from gateway.forward.connection_pool import UpstreamPool, _Connection
from tests.unit.gateway.conftest import wait_until

OK_BODY = b'{"ok":true}'
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    port: int
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)

    def pool(self, **kw: float) -> UpstreamPool:
        timeouts = {"connect_timeout_s": 2.0, "read_timeout_s": 2.0, **kw}
        return UpstreamPool(f"http://127.0.0.1:{self.port}", **timeouts)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


def ok_response(body: bytes = OK_BODY) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[Server]:
    server = Server(0)

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the test is over or the client left: the fake server just stops
        finally:
            writer.close()

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield server


def answering(raw: bytes) -> Handler:
    """A backend that reads one request and writes ``raw`` (a head and what it has of a body)
    back, then leaves the connection to the client."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(raw)
        await writer.drain()

    return handler


def keep_alive_ok(server_requests: list[bytes]) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            server_requests.append(await read_request(reader))
            writer.write(ok_response())
            await writer.drain()

    return handler


async def test_sequential_requests_share_one_keep_alive_connection() -> None:
    seen: list[bytes] = []
    async with serve(keep_alive_ok(seen)) as server:
        pool = server.pool()
        for i in range(3):
            response = await pool.send("POST", "/v1/x", b"{}", {"x-request-id": f"r{i}"})
            assert response.status_code == 200
            assert await response.aread() == OK_BODY
            assert response.headers.get("content-type") == "application/json"
            await response.aclose()
        await pool.aclose()
    assert server.connections == 1
    assert seen[2].startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert b"x-request-id: r2\r\n" in seen[2]
    assert seen[2].endswith(b"\r\n\r\n{}")


async def test_stream_chunks_arrive_before_the_response_ends() -> None:
    more = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        await more.wait()
        writer.write(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n")
        await writer.drain()
        await read_request(reader)  # keep the connection open for reuse

    async with serve(handler) as server:
        pool = server.pool()
        response = await pool.send("POST", "/s", b"{}", {})
        chunks = response.aiter_raw()
        assert await asyncio.wait_for(anext(chunks), 2.0) == b"data: 1\n\n"
        more.set()
        assert [c async for c in chunks] == [b"data: 2\n\n"]
        await response.aclose()
        await pool.aclose()


async def test_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout_s=2.0, read_timeout_s=2.0)
        with pytest.raises(httpx.ConnectError):
            await pool.send("POST", "/x", b"{}", {})


async def test_silent_backend_is_a_read_timeout_and_the_connection_is_dropped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await reader.read()  # silent until the client closes

    async with serve(handler) as server:
        pool = server.pool(read_timeout_s=0.05)
        response = await pool.send("POST", "/x", b"{}", {})
        with pytest.raises(httpx.ReadTimeout):
            await asyncio.wait_for(response.aread(), 5.0)
        await response.aclose()
        assert pool.idle == 0


async def test_backend_dying_mid_body_raises_and_is_not_reused() -> None:
    async with serve(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")) as server:
        pool = server.pool()
        response = await pool.send("POST", "/x", b"{}", {})
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await asyncio.wait_for(response.aread(), 5.0)
        await response.aclose()
        assert pool.idle == 0


async def test_idle_connection_closed_by_the_backend_is_replaced_transparently() -> None:
    served = 0

    async def one_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonlocal served
        await read_request(reader)
        served += 1
        writer.write(ok_response())
        await writer.drain()
        # then close: the client still holds the connection as idle keep-alive

    async with serve(one_per_connection) as server:
        pool = server.pool()
        first = await pool.send("POST", "/x", b"{}", {})
        await first.aread()
        await first.aclose()
        second = await pool.send("POST", "/x", b"{}", {})
        assert await second.aread() == OK_BODY
        await second.aclose()
        await pool.aclose()
    assert served == 2


async def test_a_response_closed_before_its_body_ended_is_not_reused() -> None:
    closed_by_client = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        if await reader.read() == b"":  # EOF: the client dropped the connection
            closed_by_client.set()

    async with serve(handler) as server:
        pool = server.pool()
        response = await pool.send("POST", "/x", b"{}", {})
        await response.aclose()  # 93 body bytes still due: the connection is unusable
        assert pool.idle == 0
        await asyncio.wait_for(closed_by_client.wait(), 2.0)


async def test_a_body_delimited_by_the_connection_closing_is_complete() -> None:
    async with serve(answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello")) as server:
        pool = server.pool()
        response = await pool.send("POST", "/x", b"{}", {})
        assert await asyncio.wait_for(response.aread(), 5.0) == b"hello"
        await response.aclose()
        assert pool.idle == 0


async def test_idle_connections_beyond_max_idle_are_closed() -> None:
    seen: list[bytes] = []
    async with serve(keep_alive_ok(seen)) as server:
        pool = UpstreamPool(
            f"http://127.0.0.1:{server.port}", connect_timeout_s=2.0, read_timeout_s=2.0, max_idle=2
        )
        responses = await asyncio.gather(*(pool.send("POST", "/x", b"{}", {}) for _ in range(4)))
        for response in responses:
            await response.aread()
            await response.aclose()
        assert pool.idle == 2
        await pool.aclose()


async def test_aread_of_a_body_past_the_high_water_mark_resumes_reading() -> None:
    """A body several times the pool's read buffer arrives whole: ``aread`` drains what
    is buffered, so a paused connection resumes (else it would wait forever)."""
    big = bytes(range(256)) * 4096  # 1 MiB, four times the high-water mark

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok_response(big))
        await writer.drain()
        await read_request(reader)

    async with serve(handler) as server:
        pool = server.pool()
        response = await pool.send("POST", "/big", b"{}", {})
        await wait_until(lambda: response._paused, timeout=5.0)  # the buffer is full
        assert await asyncio.wait_for(response.aread(), 5.0) == big
        await response.aclose()
        assert pool.idle == 1  # complete: the connection went back for reuse
        await pool.aclose()


async def test_completions_to_plain_http_backends_use_the_lean_pool() -> None:
    """The backend pool gives each http:// backend its lean pool, also behind an injected
    transport (the tests' fakes then answer through the same pool, in memory); an https
    backend sends completions through httpx."""
    backends = [
        BackendConfig(name="plain", url="http://127.0.0.1:9", models=["m"]),
        BackendConfig(name="tls", url="https://127.0.0.1:9", models=["m"]),
    ]
    timeouts = {"connect_timeout_s": 1.0, "read_timeout_s": 1.0}
    pool = BackendPool(backends, clock=lambda: 0.0, health=HealthConfig(), **timeouts)
    injected = BackendPool(
        backends,
        clock=lambda: 0.0,
        health=HealthConfig(),
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text="hi")),
        **timeouts,
    )
    try:
        assert isinstance(pool.upstream("plain"), UpstreamPool)
        assert pool.upstream("tls") is None and injected.upstream("tls") is None
        in_memory = injected.upstream("plain")
        assert isinstance(in_memory, UpstreamPool)
        response = await in_memory.send("POST", "/v1/completions", b"{}", {})
        assert (response.status_code, await response.aread()) == (200, b"hi")
        await response.aclose()
        assert in_memory.idle == 1  # a complete answer: the connection is kept alive
    finally:
        await pool.aclose()
        await injected.aclose()


def _alive_connections(pool: UpstreamPool) -> int:
    """The pool's connections still reachable from anywhere (the loop's timers included)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, _Connection) and o.pool is pool)


async def test_a_response_without_a_head_leaves_nothing_behind() -> None:
    """A connection closed before the head, many times over: none of those responses and
    connections is kept (an armed read timer would hold each for ``read_timeout_s``)."""

    async def close_before_the_head(reader: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with serve(close_before_the_head) as server:
        pool = server.pool(read_timeout_s=600.0)
        for _ in range(20):
            with pytest.raises(httpx.RemoteProtocolError):
                await pool.send("POST", "/x", b"{}", {})
        assert _alive_connections(pool) == 0


async def _leave_before_the_head(pool: UpstreamPool, heard: asyncio.Event) -> None:
    """One request whose caller is cancelled once the backend has it (the exception, and
    the frames its traceback holds, end with this call)."""
    heard.clear()
    waiting = asyncio.create_task(pool.send("POST", "/x", b"{}", {}))
    await heard.wait()
    waiting.cancel()
    (left,) = await asyncio.gather(waiting, return_exceptions=True)
    assert isinstance(left, asyncio.CancelledError)


async def test_a_caller_leaving_before_the_head_leaves_nothing_behind() -> None:
    heard = asyncio.Event()

    async def never_answer(reader: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
        await read_request(reader)
        heard.set()
        await reader.read()

    async with serve(never_answer) as server:
        pool = server.pool(read_timeout_s=600.0)
        for _ in range(20):
            await _leave_before_the_head(pool, heard)
        # the newest cancellation may still be referenced by the loop; none before it
        assert _alive_connections(pool) <= 1
