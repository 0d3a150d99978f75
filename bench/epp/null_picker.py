"""The cheapest ext_proc processor that routes like the Endpoint Picker: the floor under
any picker written in Python with grpcio under Envoy's ext_proc protocol.

It answers every message with CONTINUE, built once at start: no decision, no parsing.
The request is routed exactly as ``sluicegate epp`` routes it: in ``BUFFERED`` request-body
mode the headers are answered at once and the body's answer carries the destination
header (``clear_route_cache``) and the ``envoy.lb`` metadata; in the streamed modes the
headers' answer carries them. Response headers, bodies and trailers are passed on as they
are. It also serves the gRPC health service Envoy's cluster checks.

    python -m bench.epp.null_picker --port 9002 --endpoint 127.0.0.1:8000 [--server sync]

``--server aio`` (default): ``grpc.aio``, reading and writing through the call's context as
the picker does, on asyncio's loop or (``--loop uvloop``) uvloop's. ``--server sync``:
``grpc.server`` with a thread pool, the servicer a generator over the request iterator.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import uvloop
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from gateway.epp.health import EXT_PROC, LIVENESS, READINESS
from gateway.epp.mutations import (
    body_response,
    request_headers_response,
    route_headers,
    routed_body_answer,
    trailers_response,
)
from simulation.flags import choice_flag

_BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED
_SERVING = health_pb2.HealthCheckResponse.SERVING
_HEALTH_NAMES = ("", LIVENESS, READINESS, EXT_PROC)


@dataclass(frozen=True)
class Answers:
    """The constant answers, one per kind of message Envoy sends."""

    headers_routed: Any
    """Request headers, streamed request body: the headers' answer routes."""
    headers_continue: Any
    """Request headers, ``BUFFERED`` request body: routed on the body."""
    body_routed: Any
    request_body: Any
    response_headers: Any
    response_body: Any
    request_trailers: Any
    response_trailers: Any

    @classmethod
    def to(cls, endpoint: str) -> Answers:
        return cls(
            headers_routed=request_headers_response(route_headers(endpoint, None), endpoint),
            headers_continue=request_headers_response(None, None),
            body_routed=routed_body_answer(endpoint),
            request_body=body_response(None, request=True),
            response_headers=pb.ProcessingResponse(response_headers=pb.HeadersResponse()),
            response_body=body_response(None, request=False),
            request_trailers=trailers_response(request=True),
            response_trailers=trailers_response(request=False),
        )


class Exchange:
    """One ``Process`` call's state: whether the request is routed on its body."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.route_on_body = False

    def answer(self, message: Any) -> Any:
        kind = message.WhichOneof("request")
        a = self.answers
        if kind == "request_headers":
            buffered = message.protocol_config.request_body_mode == _BUFFERED
            self.route_on_body = buffered and not message.request_headers.end_of_stream
            return a.headers_continue if self.route_on_body else a.headers_routed
        if kind == "request_body":
            return a.body_routed if self.route_on_body else a.request_body
        if kind == "response_headers":
            return a.response_headers
        if kind == "response_body":
            return a.response_body
        if kind == "request_trailers":
            return a.request_trailers
        return a.response_trailers


class AioNullPicker(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    async def Process(self, request_iterator: Any, context: Any) -> None:
        exchange = Exchange(self.answers)
        while (message := await context.read()) is not grpc.aio.EOF:
            await context.write(exchange.answer(message))


class SyncNullPicker(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    def Process(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        exchange = Exchange(self.answers)
        for message in request_iterator:
            yield exchange.answer(message)


async def serve_aio(host: str, port: int, endpoint: str) -> tuple[grpc.aio.Server, int]:
    """The aio null picker started on ``host:port`` (0: a free port), and its port."""
    server = grpc.aio.server()
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(
        AioNullPicker(Answers.to(endpoint)), server
    )
    servicer = health_aio.HealthServicer()
    for name in _HEALTH_NAMES:
        await servicer.set(name, _SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, bound


def serve_sync(host: str, port: int, endpoint: str, threads: int) -> tuple[grpc.Server, int]:
    """The thread-pool null picker started on ``host:port``, and its port. Each open call
    holds a thread, so ``threads`` bounds the concurrent requests it serves."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads), maximum_concurrent_rpcs=None
    )
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(
        SyncNullPicker(Answers.to(endpoint)), server
    )
    servicer = health.HealthServicer()
    for name in _HEALTH_NAMES:
        servicer.set(name, _SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    server.start()
    return server, bound


async def _run_aio(host: str, port: int, endpoint: str, loop: str) -> None:
    server, bound = await serve_aio(host, port, endpoint)
    print(f"null picker (aio, {loop}) on {host}:{bound}", file=sys.stderr, flush=True)
    await server.wait_for_termination()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--endpoint", required=True, help="ip:port every request is routed to")
    choice_flag(p, "--server", ("aio", "sync"))
    p.add_argument("--threads", type=int, default=512, help="sync server: worker threads")
    choice_flag(p, "--loop", ("asyncio", "uvloop"), "aio server: the event loop")
    args = p.parse_args(argv)
    if args.server == "aio":
        factory = uvloop.new_event_loop if args.loop == "uvloop" else None
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(_run_aio(args.host, args.port, args.endpoint, args.loop))
        return 0
    server, bound = serve_sync(args.host, args.port, args.endpoint, args.threads)
    print(f"null picker (sync) on {args.host}:{bound}", file=sys.stderr, flush=True)
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
