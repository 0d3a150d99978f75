"""The Endpoint Picker's gRPC server: ext_proc's ``Process`` and the health service."""

from __future__ import annotations

from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health_pb2_grpc

from gateway.config.schema import EppTlsConfig
from gateway.context import GatewayContext
from gateway.epp.health import PickerHealth
from gateway.epp.stream import ProcessStream
from gateway.epp.tls import file_reloader, reload_counter, server_credentials


class Picker(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx

    async def Process(self, request_iterator: Any, context: Any) -> None:
        await ProcessStream(self.ctx, context).run()


async def start_picker(
    ctx: GatewayContext, host: str, port: int, tls: EppTlsConfig | None = None
) -> tuple[grpc.aio.Server, int, PickerHealth]:
    """The server started on ``host:port`` (0: a free port), its port and health; over
    TLS with ``tls`` (ext_proc and health alike: one port), else cleartext."""
    server = grpc.aio.server()
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(Picker(ctx), server)
    health = PickerHealth(ctx)
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
    address = f"{host}:{port}"
    if tls is None:
        bound = server.add_insecure_port(address)
    else:
        reloader = file_reloader(tls, reload_counter(ctx.metrics.registry))
        bound = server.add_secure_port(address, server_credentials(reloader))
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await health.update()
    await server.start()
    return server, bound, health
