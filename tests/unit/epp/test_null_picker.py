"""The benchmark's null picker routes as the Endpoint Picker does, with either gRPC server."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.epp.null_picker import serve_aio, serve_sync
from gateway.epp.health import EXT_PROC
from tests.unit.epp.envoy_double import (
    Call,
    request_body,
    request_headers,
    response_body,
    response_headers,
    set_headers,
)

DESTINATION = "x-gateway-destination-endpoint"
REPO = Path(__file__).resolve().parents[3]
ENDPOINT = "10.0.0.7:8000"


@pytest.fixture(params=["aio", "sync"])
async def channel(request: pytest.FixtureRequest) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to the null picker served by either gRPC server."""
    server = request.param
    if server == "aio":
        aio_server, port = await serve_aio("127.0.0.1", 0, ENDPOINT)
        stop: Any = aio_server.stop
    else:
        sync_server, port = serve_sync("127.0.0.1", 0, ENDPOINT, threads=4)
        stop = sync_server.stop
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        result = stop(None)
        if server == "aio":
            await result


def _routed(answer: Any, common: Any) -> tuple[dict[str, str], str]:
    meta = answer.dynamic_metadata.fields["envoy.lb"].struct_value.fields[DESTINATION]
    return set_headers(common.header_mutation), meta.string_value


async def test_buffered_request_is_routed_on_its_body_and_the_response_continues(
    channel: grpc.aio.Channel,
) -> None:
    call = Call(external_processor_pb2_grpc.ExternalProcessorStub(channel))
    await call.send(request_headers(buffered=True))
    first = await call.recv()
    assert not first.request_headers.response.HasField("header_mutation")
    await call.send(request_body(b'{"model": "m"}'))
    answer = await call.recv()
    common = answer.request_body.response
    assert _routed(answer, common) == ({DESTINATION: ENDPOINT}, ENDPOINT)
    assert common.clear_route_cache and not common.HasField("body_mutation")
    await call.send(response_headers())
    assert (await call.recv()).HasField("response_headers")
    await call.send(response_body(b"{}", eos=True))
    reply = await call.recv()
    assert reply.HasField("response_body")
    assert not reply.response_body.response.HasField("body_mutation")
    await call.end()


async def test_streamed_request_is_routed_on_its_headers(channel: grpc.aio.Channel) -> None:
    call = Call(external_processor_pb2_grpc.ExternalProcessorStub(channel))
    await call.send(request_headers(), request_body(b"{}"))
    first = await call.recv()
    assert _routed(first, first.request_headers.response) == ({DESTINATION: ENDPOINT}, ENDPOINT)
    body = await call.recv()
    assert body.HasField("request_body")
    assert not body.request_body.response.HasField("header_mutation")
    await call.end()


async def test_health_is_serving_for_envoys_check(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=EXT_PROC))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_the_command_serves_on_either_event_loop(loop: str) -> None:
    """``python -m bench.epp.null_picker`` as the benchmark starts it."""
    argv = [
        sys.executable,
        "-m",
        "bench.epp.null_picker",
        "--port",
        "0",
        "--endpoint",
        ENDPOINT,
        "--loop",
        loop,
    ]
    # bench/ is not part of the installed package: the checkout goes on the path, after
    # whatever the run put first (the compiled tier's site)
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)
    proc = await asyncio.create_subprocess_exec(
        *argv, stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": path}
    )
    try:
        assert proc.stderr is not None
        async with asyncio.timeout(30):
            line = (await proc.stderr.readline()).decode()
        assert f"(aio, {loop})" in line, line
        port = int(line.rsplit(":", 1)[1])
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = Call(external_processor_pb2_grpc.ExternalProcessorStub(channel))
            await call.send(request_headers(), request_body(b"{}"))
            first = await call.recv()
            assert set_headers(first.request_headers.response.header_mutation) == {
                DESTINATION: ENDPOINT
            }
            await call.recv()
            await call.end()
    finally:
        proc.terminate()
        await proc.wait()
