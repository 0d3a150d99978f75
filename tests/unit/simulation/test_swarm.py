"""The live load generator against an in-process fake server (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from emulator.profile import load_profile
from simulation.metrics import TurnRecord, summarise
from simulation.swarm import (
    SwarmRun,
    attempt,
    is_token,
    parser,
    retry_after_s,
    streamed_chat,
    swarm_once,
)
from simulation.workload import AgentWorkload, BackoffPolicy


class FakeServer:
    """Rejects every second request with 429 + retry-after-ms; streams the rest."""

    def __init__(self) -> None:
        self.calls = 0
        self.bodies: list[dict[str, object]] = []
        self.sessions: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        body = json.loads(request.content)
        self.bodies.append(body)
        self.sessions.add(request.headers["x-session-id"])
        if self.calls % 2 == 0:
            return httpx.Response(429, headers={"retry-after-ms": "2"}, json={"error": {}})
        chunks = [{"choices": [{"delta": {"content": "tok"}}]} for _ in range(3)]
        sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})


async def test_swarm_counts_deferrals_and_completes_every_turn() -> None:
    fake = FakeServer()
    # 200 emulated seconds at speed 100: about 2 s of wall time, ~40 thinks per agent
    args = parser().parse_args(
        ["--model", "m", "--speed", "100", "--duration", "200", "--warmup", "0", "--drain", "600"]
    )
    profile = load_profile("rx9070xt")
    workload = AgentWorkload(profile.output_lengths, backoff=BackoffPolicy(base_s=0.5))
    run = await swarm_once(args, workload, 3, transport=httpx.MockTransport(fake))
    assert run.records and run.open_turns == 0 and run.failures == 0
    for r in run.records:
        assert r.finished is not None and r.decode_start is not None
        assert len(r.attempts) == len(r.deferrals) + 1
    # every second call was a 429, and each one is a deferral of exactly one turn
    assert sum(len(r.deferrals) for r in run.records) == fake.calls // 2
    s = summarise(run.records, 0.0, float("inf"))
    assert s.submissions == fake.calls and s.turns_completed == len(run.records)
    assert fake.sessions == {"agent-0", "agent-1", "agent-2"}
    assert all(b["ignore_eos"] is True and b["stream"] is True for b in fake.bodies)


def test_retry_after_prefers_milliseconds() -> None:
    assert retry_after_s(httpx.Headers({"retry-after": "3", "retry-after-ms": "2500"})) == 2.5
    assert retry_after_s(httpx.Headers({"retry-after": "3"})) == 3.0
    assert retry_after_s(httpx.Headers({})) == 0.0


class QueuedStream(httpx.AsyncByteStream):
    """vLLM-like stream whose request waits for a slot: the role chunk comes first, the
    first token only after the wait (an emulator that relays the wait as TTFT)."""

    def __init__(self, run_clock: list[float]) -> None:
        self.run_clock = run_clock  # filled with the swarm clock when the token is sent

    async def __aiter__(self) -> AsyncIterator[bytes]:
        role = {"choices": [{"delta": {"role": "assistant", "content": ""}}]}
        yield f"data: {json.dumps(role, separators=(',', ':'))}\n\n".encode()
        await asyncio.sleep(0.02)  # the engine's queue: the slot is not free yet
        self.run_clock.append(time.monotonic())
        token = {"choices": [{"delta": {"content": "role"}}]}  # a token whose text is "role"
        yield f"data: {json.dumps(token, separators=(',', ':'))}\n\n".encode()
        yield b"data: [DONE]\n\n"


async def test_decoding_starts_at_the_first_token_not_at_the_role_chunk() -> None:
    token_sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=QueuedStream(token_sent))

    args = parser().parse_args(["--model", "m", "--speed", "1"])
    workload = AgentWorkload(load_profile("rx9070xt").output_lengths)
    async with httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(handler)) as c:
        run = SwarmRun(c, "m", workload, args.speed, stop_at=1.0)
        record = TurnRecord(0, 5, first_submit=run.now())
        sent = run.now()
        assert await attempt(run, record, "p", sent) is None
    assert record.decode_start is not None and token_sent
    assert record.decode_start >= token_sent[0] - run.start


def test_first_token_chunk_is_told_from_role_and_usage_chunks() -> None:
    assert not is_token('data: {"choices":[{"delta":{"role":"assistant","content":""}}]}')
    assert is_token('data: {"choices":[{"delta":{"content":"x"}}]}')
    assert not is_token('data: {"choices":[],"usage":{"prompt_tokens":3}}')
    assert not is_token("data: [DONE]")


async def _streamed(handler: Any, speed: float = 2.0) -> tuple[tuple[int, float], list[str]]:
    """``streamed_chat`` against ``handler``: its answer and the lines ``served`` read."""
    lines: list[str] = []

    async def served(r: httpx.Response) -> None:
        async for line in r.aiter_lines():
            lines.append(line)

    transport = httpx.MockTransport(handler)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw.test") as client:
        answer = await streamed_chat(client, {"model": "m"}, {"x-h": "1"}, speed, served)
    return answer, lines


async def test_streamed_chat_hands_a_200_to_served_and_a_refusal_back() -> None:
    def ok(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions" and request.headers["x-h"] == "1"
        assert json.loads(request.content) == {"model": "m"}
        return httpx.Response(200, text="data: a\n\ndata: [DONE]\n\n")

    assert await _streamed(ok) == ((200, 0.0), ["data: a", "", "data: [DONE]", ""])
    refused = httpx.Response(429, headers={"retry-after-ms": "500"}, json={"error": {}})
    assert await _streamed(lambda _r: refused) == ((429, 1.0), [])  # 0.5 wall s at 2x


async def test_streamed_chat_answers_0_when_the_transport_fails() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert await _streamed(down) == ((0, 0.0), [])
