"""The mixed traffic of the soak: closed-loop workers, each request of a kind drawn by weight.

Kinds: plain and streamed chat, legacy completions, a stream the client leaves after its
first event, a request the client leaves before the answer (a raw socket: the whole request
is written, then the connection is closed after a random pause, so the gateway surely got
it), a short deadline (429 when it cannot be met), a tenant over its quota (429), a
wrong API key (401, refused before scheduling) and agent runs (a few calls under one
``X-Agent-Run-Id``, the last two in parallel; then completed, cancelled or left to end
idle). Every request sent is counted, by kind and by what the client saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

MODEL = "emulated"
TENANTS = ("alice", "bob", "greedy")
"""``greedy`` has a small tokens-per-minute quota in the soak's config: it gets 429s."""


def api_key(tenant: str) -> str:
    return f"sk-soak-{tenant}"


@dataclass
class Tally:
    """What the clients sent and saw. ``scheduled``: requests with a valid key to a
    completion path (each must end in one gateway outcome); ``refused``: wrong keys."""

    scheduled: int = 0
    refused: int = 0
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    def saw(self, kind: str, what: int | str) -> None:
        self.seen[(kind, str(what))] += 1


def _client(port: int, tenant: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        timeout=120.0,
        headers={"authorization": f"Bearer {api_key(tenant)}"},
        limits=httpx.Limits(max_connections=None),
    )


@dataclass
class Traffic:
    port: int
    rng: random.Random
    tally: Tally
    clients: dict[str, httpx.AsyncClient]

    @classmethod
    def open(cls, port: int, seed: int) -> Traffic:
        clients = {t: _client(port, t) for t in (*TENANTS, "intruder")}
        return cls(port, random.Random(seed), Tally(), clients)

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()

    async def worker(self, until: float, think_s: float) -> None:
        kinds = list(KINDS)
        weights = [KINDS[k][0] for k in kinds]
        while time.monotonic() < until:
            kind = self.rng.choices(kinds, weights)[0]
            try:
                await KINDS[kind][1](self, kind)
            except (httpx.HTTPError, OSError) as exc:
                self.tally.errors[f"{kind}: {type(exc).__name__}"] += 1
            await asyncio.sleep(self.rng.expovariate(1 / think_s) if think_s > 0 else 0)

    def _tenant(self) -> str:
        return self.rng.choice(("alice", "bob"))

    def _body(self, *, stream: bool = False) -> dict[str, object]:
        return {
            "model": MODEL,
            "messages": [{"role": "user", "content": "soak"}],
            "max_tokens": self.rng.randint(4, 48),
            "ignore_eos": True,
            "stream": stream,
        }


async def _plain(t: Traffic, kind: str) -> None:
    t.tally.scheduled += 1
    r = await t.clients[t._tenant()].post("/v1/chat/completions", json=t._body())
    t.tally.saw(kind, r.status_code)


async def _legacy(t: Traffic, kind: str) -> None:
    body = {"model": MODEL, "prompt": "soak", "max_tokens": t.rng.randint(4, 32)}
    t.tally.scheduled += 1
    r = await t.clients[t._tenant()].post("/v1/completions", json=body)
    t.tally.saw(kind, r.status_code)


async def _stream(t: Traffic, kind: str, *, leave_early: bool = False) -> None:
    t.tally.scheduled += 1
    client = t.clients[t._tenant()]
    async with client.stream("POST", "/v1/chat/completions", json=t._body(stream=True)) as r:
        async for line in r.aiter_lines():
            if leave_early and line.startswith("data: "):
                t.tally.saw(kind, "left")
                return
        t.tally.saw(kind, r.status_code)


async def _stream_left(t: Traffic, kind: str) -> None:
    await _stream(t, kind, leave_early=True)


async def _deadline(t: Traffic, kind: str) -> None:
    ms = t.rng.randint(30, 400)
    t.tally.scheduled += 1
    r = await t.clients[t._tenant()].post(
        "/v1/chat/completions", json=t._body(), headers={"x-request-deadline-ms": str(ms)}
    )
    t.tally.saw(kind, r.status_code)


async def _greedy(t: Traffic, kind: str) -> None:
    t.tally.scheduled += 1
    r = await t.clients["greedy"].post("/v1/chat/completions", json=t._body())
    t.tally.saw(kind, r.status_code)


async def _wrong_key(t: Traffic, kind: str) -> None:
    t.tally.refused += 1
    r = await t.clients["intruder"].post("/v1/chat/completions", json=t._body())
    t.tally.saw(kind, r.status_code)


async def _left_before_answer(t: Traffic, kind: str) -> None:
    """The whole request on a raw socket, then the connection closed after a pause."""
    body = json.dumps(t._body()).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {api_key(t._tenant())}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", t.port)
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        t.tally.scheduled += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader.read(1), t.rng.uniform(0.0, 0.3))
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    t.tally.saw(kind, "left")


async def _agent_run(t: Traffic, kind: str) -> None:
    """A run of 2-4 calls (the last two in parallel when there are more than two), then
    ``complete``, ``DELETE`` (cancel) or nothing (the run ends idle)."""
    run = f"soak-{t.rng.getrandbits(48):012x}"
    client = t.clients[t._tenant()]
    calls = t.rng.randint(2, 4)
    first = {
        "x-agent-run-id": run,
        "x-agent-run-calls": str(calls),
        "x-agent-run-deadline-ms": "60000",
    }

    async def call(headers: dict[str, str]) -> int:
        t.tally.scheduled += 1
        r = await client.post("/v1/chat/completions", json=t._body(), headers=headers)
        return r.status_code

    status = await call(first)
    for _ in range(calls - 3 if calls > 2 else calls - 1):
        status = await call({"x-agent-run-id": run})
    if calls > 2:
        both = await asyncio.gather(call({"x-agent-run-id": run}), call({"x-agent-run-id": run}))
        status = max(both)
    end = t.rng.choices(("complete", "cancel", "idle"), (6, 2, 2))[0]
    if end == "complete":
        await client.post(f"/v1/runs/{run}/complete")
    elif end == "cancel":
        await client.delete(f"/v1/runs/{run}")
    t.tally.saw(kind, f"{status}-{end}")


Kind = Callable[[Traffic, str], Awaitable[None]]
KINDS: dict[str, tuple[float, Kind]] = {
    "chat": (30, _plain),
    "stream": (25, _stream),
    "stream-left": (10, _stream_left),
    "left-before-answer": (10, _left_before_answer),
    "deadline": (8, _deadline),
    "over-quota": (10, _greedy),
    "completions": (5, _legacy),
    "wrong-key": (2, _wrong_key),
    "agent-run": (6, _agent_run),
}
"""Kind → (weight, request)."""
