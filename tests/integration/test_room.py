"""A request does not queue in the gateway while a healthy backend has room.

Room is what the engine is known to hold: its slots when the config states
``max_num_seqs``, else the most it was seen running at once. Between two scrapes the
default limit grows at most to twice what the engine reports running (slow start); it
must not hold requests back below what the engine is known to hold: after a quiet period
(the engine reports 0 running) and in a burst onto idle backends."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartEmulator
from tests.integration.harness import Gateway, chat_body, gateway_config, serve_gateway, wait_for

pytestmark = pytest.mark.emulator

NO_LADDER: dict[str, Any] = {"ladder": {"steps": []}}
SCRAPE = {"interval_s": 0.1, "max_age_s": 5.0}
"""Signals stay fresh through a busy moment of this process (its event loop also runs the
test's clients, and the emulators share its GIL): staleness is not what is tested here."""


async def _queued(client: httpx.AsyncClient, n: int, tokens: int) -> list[str]:
    """Send ``n`` streams at once, read them to the end; the queue positions of those that
    waited in the gateway."""

    async def one() -> str | None:
        body = chat_body(tokens, stream=True)
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            async for _ in r.aiter_lines():
                pass
            return r.headers.get("x-sluicegate-queue-position")

    return [p for p in await asyncio.gather(*(one() for _ in range(n))) if p is not None]


def _view(gw: Gateway, name: str = "emu-0") -> Any:
    return next(v for v in gw.ctx.pool.snapshot().backends if v.name == name)


async def test_after_a_quiet_period_what_the_engine_ran_before_does_not_queue(
    start_emulator: StartEmulator,
) -> None:
    emu = start_emulator(speed=20.0)
    seqs = emu.runner.profile.engine.max_num_seqs
    raw = gateway_config([emu.url], NO_LADDER, scrape=SCRAPE)  # no max_num_seqs
    async with serve_gateway(raw) as gw:
        client = gw.client()
        warm = asyncio.ensure_future(_queued(client, seqs, 400))
        await wait_for(lambda: (_view(gw).running_peak or 0) >= 4, what="a scrape saw 4 running")
        await warm
        await wait_for(lambda: _view(gw).running == 0, what="a scrape saw the engine idle")
        assert await _queued(client, 4, 16) == []


async def test_a_burst_onto_idle_backends_fills_their_slots_without_queueing(
    start_emulator: StartEmulator,
) -> None:
    emus = [start_emulator(speed=20.0, seed=i) for i in range(2)]
    seqs = emus[0].runner.profile.engine.max_num_seqs
    raw = gateway_config([e.url for e in emus], NO_LADDER, max_num_seqs=seqs, scrape=SCRAPE)
    async with serve_gateway(raw) as gw:
        client = gw.client()
        await wait_for(
            lambda: all(v.running == 0 and not v.stale for v in gw.ctx.pool.snapshot().backends)
        )
        assert await _queued(client, 2 * seqs, 64) == []
