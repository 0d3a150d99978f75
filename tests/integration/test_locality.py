"""Locality routing over HTTP on two emulated engines: a conversation's turns go where the
gateway sent its prefix, even onto the busier engine, and spill to the other when that one
has no room; the estimate of its cached tokens is what the engine then reports."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartEmulator
from tests.integration.harness import MODEL, engine_gauge, gateway_config, serve_gateway, wait_for

pytestmark = pytest.mark.emulator

POLICY: dict[str, Any] = {
    "limit": {"type": "fixed", "parameters": {"max_in_flight": 2}},
    "prefill_backlog": {"enabled": False},
    "ladder": {"steps": []},
    "cache": {"locality_weight": 1.5},
}
SYSTEM = " ".join(f"rule {i} says the agent keeps its tools sharp" for i in range(120))
QUERIES = "vllm:prefix_cache_queries_total"


def _conversation(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"step {i}: patch the parser and test it"})
        messages.append({"role": "assistant", "content": f"step {i} done, tests pass"})
    return [*messages, {"role": "user", "content": "next"}]


def _body(messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        **extra,
    }


async def _turn(client: httpx.AsyncClient, turns: int) -> int:
    """One short turn of the conversation; the engine's cached tokens of its prompt."""
    r = await client.post("/v1/chat/completions", json=_body(_conversation(turns), 2))
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


@contextlib.asynccontextmanager
async def _held(client: httpx.AsyncClient, messages: list[dict[str, str]]) -> AsyncIterator[None]:
    """A stream held in flight (its body unread) until the block ends: 600 tokens, seconds
    at half the card's speed, yet fewer tokens in flight than a turn's prompt weighs."""
    body = _body(messages, 600, stream=True)
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        yield


async def test_turns_go_where_their_prefix_is_and_spill_when_it_is_full(
    start_emulator: StartEmulator,
) -> None:
    engines = [
        start_emulator(
            profile="cpu-tiny", model_name=MODEL, speed=0.5, enable_prompt_tokens_details=True
        )
        for _ in range(2)
    ]
    urls = [e.url for e in engines]

    async def queries() -> list[float]:
        return [await engine_gauge(u, QUERIES) for u in urls]

    async with serve_gateway(gateway_config(urls, POLICY)) as gw:
        views = lambda: gw.ctx.pool.snapshot().backends  # noqa: E731
        await wait_for(lambda: all(v.kv_cache_tokens for v in views()), what="KV sizes scraped")
        client = gw.client()
        assert await _turn(client, 1) == 0  # both idle: the first by name, emu-0
        home = await queries()
        assert home[0] > 0 and home[1] == 0
        other = [{"role": "user", "content": "an unrelated task " * 50}]
        async with _held(client, other):  # no prefix anywhere: the least loaded, emu-0
            busy = await queries()
            assert busy[0] > home[0] and busy[1] == 0
            assert await _turn(client, 2) > 0  # onto the busier emu-0: its prefix is there
            after = await queries()
            assert after[0] > busy[0] and after[1] == 0
            async with _held(client, _conversation(3)):  # home again: emu-0 is now full
                cached = await _turn(client, 4)
                spilled = await queries()
        assert spilled[1] > 0 and cached == 0  # emu-1 served it, without its prefix
