"""The decode hold on a real engine: vLLM-CPU's step grows with every long sequence in its
batch, so a flood of long requests slows a quiet tenant's decode. With
``headroom.decode_slowdown_max`` the gateway reads the engine's own inter-token latency,
holds the flooding tenant while the steps are slowed, and the engine runs fewer sequences;
switched off by config (the mutation), the flood fills every slot the headroom leaves.

Both runs are measured side by side in one test; only their comparison is asserted, never
an absolute time. The margins are what a 2-core machine under a full flood keeps apart:
the engine's mean batch (running requests, sampled from its /metrics) and the quiet
tenant's median turn (request to last token). Five runs on 2026-12-05, quiet and loaded,
this tree and the two before it: the batch 5.8-6.6 -> 4.8-5.0 (0.74-0.81 of it), the turn
6.3-13.2 s -> 0.46-6.8 s (0.07-0.51 of it). The batch's fall is the smaller signal, so its
margin is the wider one; the turn must at least lose 40 %.
"""

from __future__ import annotations

import asyncio
import random
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.request.auth import key_digest
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer
from tests.decode_flood import Phases, flood
from tests.vllm.gateway_process import GatewayProcess

pytestmark = pytest.mark.vllm

KEYS = {"victim": "sk-test-victim", "noisy": "sk-test-noisy"}
VICTIM_WORDS, NOISY_WORDS = 17, 420
"""~50 and ~1,300 prompt tokens (about three per word) for the tiny model's tokenizer
(random words: no prefix cache hit between requests)."""
PHASES = Phases(victims=2, noisy=12, alone_s=5.0, settle_s=3.0, flood_s=12.0, sample_s=0.25)


def _config(server: VllmServer, hold: float | None) -> dict[str, Any]:
    # the hold alone: no slot reserve and no prefill bound, so without it the flood takes
    # every slot the quiet tenant leaves
    headroom: dict[str, Any] = {"reserve_fraction": 0.0, "decode_slowdown_max": hold}
    return {
        "tenants": [{"name": n, "api_key_sha256": [key_digest(k)]} for n, k in KEYS.items()],
        "backends": [
            {
                "name": server.served_name,
                "url": server.url,
                "models": [server.served_name],
                "max_num_seqs": MAX_NUM_SEQS,
            }
        ],
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "scrape": {"interval_s": 0.25},
        "policy": {
            "fairness": {"type": "vtc"},
            "headroom": headroom,
            "prefill_backlog": {"enabled": False},
            "ladder": {"steps": []},
            "queue": {"max_wait_s": 120},
        },
    }


def _prompt(rng: random.Random, words: int) -> str:
    return " ".join(f"w{rng.randrange(100000)}" for _ in range(words))


def _body(model: str, prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    """A chat request of exactly ``max_tokens`` output tokens (``ignore_eos``)."""
    messages = [{"role": "user", "content": prompt}]
    return {
        "model": model,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "messages": messages,
        **extra,
    }


async def _victim(
    client: httpx.AsyncClient, model: str, stop: asyncio.Event, turns: list[float]
) -> None:
    rng = random.Random()
    while not stop.is_set():
        body = _body(model, _prompt(rng, VICTIM_WORDS), 32, stream=True)
        started = time.monotonic()
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200, await resp.aread()
            async for _ in resp.aiter_lines():
                pass
        turns.append(time.monotonic() - started)


async def _noisy(client: httpx.AsyncClient, model: str, stop: asyncio.Event) -> None:
    rng = random.Random()
    while not stop.is_set():
        body = _body(model, _prompt(rng, NOISY_WORDS), 128)
        resp = await client.post("/v1/chat/completions", json=body)
        assert resp.status_code in (200, 429), resp.text


def _client(url: str, tenant: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, timeout=180.0, headers={"Authorization": f"Bearer {KEYS[tenant]}"}
    )


async def _flood(gw: GatewayProcess, server: VllmServer) -> tuple[float, float]:
    """(the engine's mean running requests, the victims' median turn in seconds) while the
    victims run beside the flood."""
    model = server.served_name
    async with (
        _client(gw.url, "victim") as victim,
        _client(gw.url, "noisy") as noisy,
        httpx.AsyncClient(base_url=server.url, timeout=10.0) as engine,
    ):
        return await flood(
            PHASES, partial(_victim, victim, model), partial(_noisy, noisy, model), engine
        )


def _measure(server: VllmServer, hold: float | None, tmp: Path) -> tuple[float, float]:
    gw = GatewayProcess.start(_config(server, hold), tmp)
    try:
        return asyncio.run(_flood(gw, server))
    finally:
        gw.stop()


def test_the_decode_hold_keeps_the_flood_out_of_the_quiet_tenants_decode(
    tiny_vllm: VllmServer, tmp_path: Path
) -> None:
    batch_off, turn_off = _measure(tiny_vllm, None, tmp_path)
    batch_on, turn_on = _measure(tiny_vllm, 1.2, tmp_path)
    print(
        f"\nengine batch {batch_off:.2f} -> {batch_on:.2f}; victim turn s "
        f"{turn_off:.4f} -> {turn_on:.4f}"
    )
    assert batch_on < 0.9 * batch_off, (batch_off, batch_on)
    assert turn_on < 0.6 * turn_off, (turn_off, turn_on)
