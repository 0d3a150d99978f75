"""The gRPC health service with the names the Endpoint Picker protocol lists.

``liveness``: the process answers. ``readiness`` and the ext_proc service name: some
backend is available (a picker with nothing to pick from is not ready).
"""

from __future__ import annotations

import asyncio

from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from gateway.context import GatewayContext

EXT_PROC = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS = "liveness"
READINESS = "readiness"
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class PickerHealth:
    def __init__(self, ctx: GatewayContext, interval_s: float = 0.5) -> None:
        self.ctx = ctx
        self.servicer = health_aio.HealthServicer()
        self.interval_s = interval_s
        self._ready: bool | None = None

    async def update(self) -> None:
        await self.servicer.set(LIVENESS, _SERVING)
        ready = self.ctx.pool.snapshot().any_available
        if ready != self._ready:
            self._ready = ready
            status = _SERVING if ready else _NOT_SERVING
            for name in (READINESS, EXT_PROC, ""):
                await self.servicer.set(name, status)

    async def run(self) -> None:
        while True:
            await self.update()
            await asyncio.sleep(self.interval_s)
