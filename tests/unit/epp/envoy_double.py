"""Envoy's side of ext_proc, played by the test: messages as Envoy builds them, sent over a
real gRPC channel to the picker, the picker's answers read back."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from fastapi import FastAPI
from google.protobuf import struct_pb2

from gateway.app import create_app
from gateway.config.schema import GatewayConfig
from gateway.context import GatewayContext
from gateway.epp.server import start_picker
from tests.unit.gateway.fakes import API_KEY, FakeFleet

CHAT = "/v1/chat/completions"
Mode = processing_mode_pb2.ProcessingMode


def _header_map(headers: dict[str, str]) -> Any:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    )


def _metadata(namespaces: dict[str, dict[str, Any]]) -> Any:
    meta = base_pb2.Metadata()
    for namespace, fields in namespaces.items():
        struct = struct_pb2.Struct()
        struct.update(fields)
        meta.filter_metadata[namespace].CopyFrom(struct)
    return meta


def request_headers(
    path: str = CHAT,
    *,
    method: str = "POST",
    key: str | None = API_KEY,
    eos: bool = False,
    extra: dict[str, str] | None = None,
    subset: list[str] | None = None,
    buffered: bool = False,
) -> Any:
    headers = {
        ":method": method,
        ":path": path,
        ":authority": "gw",
        "content-type": "application/json",
        **({"authorization": f"Bearer {key}"} if key else {}),
        **(extra or {}),
    }
    message = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=_header_map(headers), end_of_stream=eos)
    )
    if subset is not None:
        namespaces = {"envoy.lb.subset_hint": {"x-gateway-destination-endpoint-subset": subset}}
        message.metadata_context.CopyFrom(_metadata(namespaces))
    body_mode = Mode.BUFFERED if buffered else Mode.FULL_DUPLEX_STREAMED
    message.protocol_config.CopyFrom(
        pb.ProtocolConfiguration(request_body_mode=body_mode, response_body_mode=Mode.STREAMED)
    )
    return message


def request_body(data: bytes, eos: bool = True) -> Any:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=data, end_of_stream=eos))


def response_headers(
    status: int = 200, content_type: str = "application/json", served: str | None = None
) -> Any:
    headers = {":status": str(status), "content-type": content_type}
    message = pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=_header_map(headers)))
    if served is not None:
        namespaces = {"envoy.lb": {"x-gateway-destination-endpoint-served": served}}
        message.metadata_context.CopyFrom(_metadata(namespaces))
    return message


def response_body(data: bytes, eos: bool) -> Any:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=data, end_of_stream=eos))


def set_headers(mutation: Any) -> dict[str, str]:
    return {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}


def chat(max_tokens: int = 3, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        **extra,
    }


@dataclass
class Routed:
    """What the picker told Envoy for one request (request side)."""

    headers: dict[str, str]
    metadata: dict[str, Any]
    body: bytes


class Call:
    """One ``Process`` call, as Envoy drives it."""

    def __init__(self, stub: Any) -> None:
        self.call = stub.Process()

    async def send(self, *messages: Any) -> None:
        for message in messages:
            await self.call.write(message)

    async def recv(self) -> Any:
        answer = await self.call.read()
        assert answer is not grpc.aio.EOF, "the picker ended the call"
        return answer

    async def route(self, body: dict[str, Any], **headers_kw: Any) -> Routed | Any:
        """Send a request (FULL_DUPLEX_STREAMED); the routing, or the ImmediateResponse."""
        await self.send(request_headers(**headers_kw), request_body(json.dumps(body).encode()))
        first = await self.recv()
        if first.HasField("immediate_response"):
            return first.immediate_response
        common = first.request_headers.response
        meta = {k: dict(v.struct_value.fields) for k, v in first.dynamic_metadata.fields.items()}
        pieces = []
        while True:
            piece = (await self.recv()).request_body.response.body_mutation.streamed_response
            pieces.append(piece.body)
            if piece.end_of_stream:
                break
        return Routed(set_headers(common.header_mutation), meta, b"".join(pieces))

    async def respond(
        self,
        status: int,
        content_type: str,
        chunks: Iterable[bytes],
        served: str | None = None,
        end: bool = True,
    ) -> tuple[dict[str, str], list[Any]]:
        """Play the backend's response through the picker (``STREAMED`` mode): the headers
        it adds for the client, and its answer to each body piece (the last one ends the
        response unless ``end`` is false)."""
        await self.send(response_headers(status, content_type, served))
        added = set_headers((await self.recv()).response_headers.response.header_mutation)
        answers = []
        pieces = list(chunks)
        for i, piece in enumerate(pieces):
            await self.send(response_body(piece, eos=end and i == len(pieces) - 1))
            answers.append((await self.recv()).response_body.response)
        return added, answers

    async def end(self) -> None:
        await self.call.done_writing()
        assert await self.call.read() is grpc.aio.EOF


@dataclass
class Picker:
    app: FastAPI
    ctx: GatewayContext
    stub: Any
    fleet: FakeFleet

    def call(self) -> Call:
        return Call(self.stub)


@contextlib.asynccontextmanager
async def picker(config: GatewayConfig, fleet: FakeFleet, **kw: Any) -> AsyncIterator[Picker]:
    """The picker's gRPC server on a free loopback port, over the gateway's context (the
    dispatcher running, no probes), and a stub connected to it; ``kw`` as ``create_app``'s."""
    app = create_app(config, transport=fleet.transport, background=False, **kw)
    async with app.router.lifespan_context(app):
        server, port, _health = await start_picker(app.state.ctx, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = external_processor_pb2_grpc.ExternalProcessorStub(channel)
                yield Picker(app, app.state.ctx, stub, fleet)
        finally:
            await server.stop(grace=None)


async def backend_answer(
    fleet: FakeFleet, endpoint: str, path: str, body: bytes
) -> tuple[int, str, list[bytes]]:
    """What the fake backend at ``endpoint`` (``host:port``) answers to ``body``: status,
    content type, and its body as the pieces it sends."""
    backend = fleet.backends[endpoint.split(".")[0]]
    answer = await backend.handle(httpx.Request("POST", f"http://{endpoint}{path}", content=body))
    chunks = [chunk async for chunk in answer.stream]  # type: ignore[union-attr]
    return answer.status_code, answer.headers.get("content-type", ""), chunks
