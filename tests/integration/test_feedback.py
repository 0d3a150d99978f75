"""The feedback loop over real HTTP: the default ``server_signals`` limit holds a request in
the gateway because the backend's own /metrics report requests waiting (load the gateway
never saw), not because of anything the gateway counted itself."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.conftest import StartEmulator
from tests.integration.harness import (
    NO_LADDER,
    chat_body,
    direct_load,
    engine_slots,
    gateway_config,
    serve_gateway,
    wait_for,
)

pytestmark = pytest.mark.emulator


async def test_backend_reported_waiting_holds_new_requests_until_it_drains(
    start_emulator: StartEmulator,
) -> None:
    emu = start_emulator(speed=20.0)
    burst_tokens = 200
    async with serve_gateway(gateway_config([emu.url], NO_LADDER)) as gw:
        client = gw.client()
        idle = await client.post("/v1/chat/completions", json=chat_body(8))
        assert idle.headers["x-sluicegate-decision"] == "admit"
        assert "x-sluicegate-queue-position" not in idle.headers, "held with an idle backend"

        # One of ours in flight, outlasting the direct load (the liveness floor always lets
        # one through to a backend with nothing of ours on it).
        ours = asyncio.ensure_future(
            client.post("/v1/chat/completions", json=chat_body(6 * burst_tokens))
        )
        await wait_for(lambda: gw.ctx.scheduler.stats().in_flight == 1, what="ours in flight")
        async with direct_load(emu.url, 2 * engine_slots(emu), burst_tokens):
            await wait_for(
                lambda: (gw.ctx.pool.snapshot().backends[0].waiting or 0) > 1,
                what="the gateway sees the backend's waiting",
            )
            held = asyncio.ensure_future(client.post("/v1/chat/completions", json=chat_body(8)))
            await wait_for(lambda: gw.ctx.scheduler.stats().queued == 1, what="held in gateway")
            stats = gw.ctx.scheduler.stats()
            assert stats.in_flight == 1, "only our own request is in flight: no count holds it"
            assert emu.runner.engine.num_waiting > 0
            released = await held
            assert emu.runner.engine.num_waiting <= 1, "dispatched while the backend queued"
        assert released.status_code == 200
        assert released.headers["x-sluicegate-decision"] == "admit"
        assert "x-sluicegate-queue-position" in released.headers
        assert (await ours).status_code == 200
        again = await client.post("/v1/chat/completions", json=chat_body(8))
        assert "x-sluicegate-queue-position" not in again.headers, "still held after draining"
