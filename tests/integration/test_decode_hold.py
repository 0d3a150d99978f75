"""The decode hold over real HTTP in front of the emulator's CPU engine model (``cpu-tiny``:
each long context in the batch lengthens every step, as on vLLM-CPU). With
``headroom.decode_slowdown_max`` the gateway reads the engine's inter-token latency and
holds the flooding tenant while steps are slowed: the engine runs fewer sequences and the
short streamed turns end sooner. Switched off by config (the mutation), the flood fills
every slot the headroom leaves.

Only comparisons between the two runs, measured in this test, are asserted.
"""

from __future__ import annotations

import asyncio
import json
import time
from functools import partial

import httpx
import pytest

from emulator.embedded import EmbeddedEmulator
from tests.decode_flood import Phases, flood
from tests.integration.conftest import StartEmulator
from tests.integration.harness import MODEL, Gateway, gateway_config, prompt_body, serve_gateway

pytestmark = pytest.mark.emulator

PHASES = Phases(victims=2, noisy=12, alone_s=3.0, settle_s=1.5, flood_s=8.0, sample_s=0.1)


def _has_choices(line: str) -> bool:
    return (
        line.startswith("data:") and '"choices"' in line and bool(json.loads(line[5:])["choices"])
    )


async def _victim(client: httpx.AsyncClient, stop: asyncio.Event, turns: list[float]) -> None:
    while not stop.is_set():
        started, tokens = time.monotonic(), 0
        async with client.stream(
            "POST", "/v1/chat/completions", json=prompt_body(50, 32, True)
        ) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                tokens += _has_choices(line)
        assert tokens >= 32  # every token came (the first chunk may carry the role alone)
        turns.append(time.monotonic() - started)


async def _noisy(client: httpx.AsyncClient, stop: asyncio.Event) -> None:
    while not stop.is_set():
        resp = await client.post("/v1/chat/completions", json=prompt_body(1500, 256, False))
        assert resp.status_code == 200


async def _flood(gw: Gateway, engine_url: str) -> tuple[float, float]:
    """(the engine's mean running requests, the victims' median turn in seconds)."""
    victim, noisy = gw.client("victim"), gw.client("noisy", timeout=120.0)
    async with httpx.AsyncClient(base_url=engine_url, timeout=5.0) as engine:
        return await flood(PHASES, partial(_victim, victim), partial(_noisy, noisy), engine)


async def _measure(emulator: EmbeddedEmulator, hold: float | None) -> tuple[float, float]:
    # the hold alone: no slot reserve and no prefill bound, so without it the flood takes
    # every slot the quiet tenant leaves
    policy = {
        "ladder": {"steps": []},
        "fairness": {"type": "vtc"},
        "prefill_backlog": {"enabled": False},
        "headroom": {"reserve_fraction": 0.0, "decode_slowdown_max": hold},
    }
    slots = emulator.runner.profile.engine.max_num_seqs
    raw = gateway_config([emulator.url], policy, tenants=("victim", "noisy"), max_num_seqs=slots)
    async with serve_gateway(raw) as gw:
        return await _flood(gw, emulator.url)


async def test_the_decode_hold_shrinks_the_flood_in_the_batch_and_speeds_the_short_turns(
    start_emulator: StartEmulator,
) -> None:
    emulator = start_emulator(profile="cpu-tiny", model_name=MODEL, speed=1.0)
    batch_off, turn_off = await _measure(emulator, None)
    batch_on, turn_on = await _measure(emulator, 1.2)
    print(
        f"\nengine batch {batch_off:.2f} -> {batch_on:.2f}; victim turn s "
        f"{turn_off:.5f} -> {turn_on:.5f}"
    )
    assert batch_on < 0.8 * batch_off, (batch_off, batch_on)
    assert turn_on < turn_off, (turn_off, turn_on)
