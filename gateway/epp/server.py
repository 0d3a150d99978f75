"""The Endpoint Picker's gRPC server: ext_proc's ``Process`` and the health service."""

from __future__ import annotations

from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health_pb2_grpc

from gateway.context import GatewayContext
from gateway.epp.health import PickerHealth
from gateway.epp.stream import ProcessStream


class Picker(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx

    async def Process(self, request_iterator: Any, context: Any) -> None:
        await ProcessStream(self.ctx, context).run()


async def start_picker(
    ctx: GatewayContext, host: str, port: int
) -> tuple[grpc.aio.Server, int, PickerHealth]:
    """The server started on ``host:port`` (0: a free port), its port and health."""
    server = grpc.aio.server()
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(Picker(ctx), server)
    health = PickerHealth(ctx)
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await health.update()
    await server.start()
    return server, bound, health
