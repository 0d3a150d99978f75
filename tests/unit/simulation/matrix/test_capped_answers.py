"""An answer a degrade cuts short (the ladder's ``cap_max_tokens``) is continued by the
matrix's clients, simulated and live: the engine serves at most the cap per call, the
client asks for the rest, and the request is done only when its whole answer is in."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx
import pytest

from emulator.profile import load_profile
from simulation.matrix.chat_clients import ChatClient
from simulation.matrix.live_traffic import LiveClock, LiveRequests
from simulation.matrix.loop import MatrixSimulation, Request
from simulation.matrix.traffic import Shape, Tenant, fixed_length
from simulation.ports import EngineRequest

PROFILE = load_profile("cpu-tiny")
LENGTH, CAP = 100, 30
CAPPED: dict[str, Any] = {
    "name": "capped",
    "ladder": {
        "steps": [{"name": "cap", "at": 0.0, "action": "cap_max_tokens", "max_tokens": CAP}]
    },
}
UNCAPPED: dict[str, Any] = {"name": "uncapped", "ladder": {"steps": []}}


def _run(policy: dict[str, Any], shape: Shape) -> tuple[MatrixSimulation, list[tuple[int, int]]]:
    """Four clients of ``shape`` on one backend for 20 s; every call the engine was given
    as (prompt tokens, output tokens)."""
    tenant = Tenant("t", shape, clients=4, think_mean_s=1.0)
    sim = MatrixSimulation.alone(tenant, policy, PROFILE, 1, duration_s=20.0, seed=3)
    calls: list[tuple[int, int]] = []
    engine = sim.engines["b0"]
    add = engine.add

    def recorded(request: EngineRequest, now: float) -> None:
        calls.append((request.prompt_tokens, request.output_tokens))
        add(request, now)

    engine.add = recorded  # type: ignore[method-assign]
    sim.run()
    return sim, calls


@pytest.mark.parametrize("hashed", [False, True], ids=["plain", "hashed"])
def test_a_capped_answer_is_continued_until_the_whole_answer_is_in(hashed: bool) -> None:
    shape = Shape(200, fixed_length(LENGTH), turns=3 if hashed else 1, question_tokens=20)
    sim, calls = _run(CAPPED, replace(shape, hashed=hashed))
    done = [r for r in sim.out.requests if r.finished is not None]
    assert done and all(r.received == r.output_tokens == LENGTH for r in done)
    assert all(output <= CAP for _, output in calls)  # the engine honoured the cap
    per_answer = -(-LENGTH // CAP)  # 30 + 30 + 30 + 10
    assert len(calls) >= per_answer * len(done)
    for r in done:  # one time to first token, the answer's first call's
        assert r.first_token is not None and r.dispatched is not None
        assert r.first_submit <= r.dispatched <= r.first_token < r.finished  # type: ignore[operator]
    if not hashed:  # each call's prompt: the ask and the answer so far
        assert {p for p, _ in calls} == {200 + k * CAP for k in range(per_answer)}
    stats = sim.scheduler.stats()
    assert stats.in_flight == 0 and stats.charged_tokens == stats.released_tokens


def test_without_a_cap_each_answer_is_one_call() -> None:
    sim, calls = _run(UNCAPPED, Shape(200, fixed_length(LENGTH)))
    done = [r for r in sim.out.requests if r.finished is not None]
    assert done and all(output == LENGTH for _, output in calls)
    assert len(calls) == len([r for r in sim.out.requests if r.dispatched is not None])


def test_a_continuation_carries_the_answer_so_far_on_the_turns_prompt() -> None:
    chat = ChatClient(Shape(256, fixed_length(40), hashed=True), PROFILE, "m", "t/0")
    chat.start()
    turn = chat.prompt(10_000)
    rest = chat.continued(60)
    full = len(turn.engine_blocks) - 1  # the turn's last block may be partial
    assert rest.engine_blocks[:full] == turn.engine_blocks[:full]  # the cache serves it
    assert rest.tokens >= turn.tokens + 60


def _capping_gateway(bodies: list[dict[str, Any]], stream: bool) -> httpx.MockTransport:
    """A gateway that serves at most ``CAP`` tokens per call: streamed as vLLM streams
    them (a usage chunk last), or as one JSON body."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        n = min(body["max_tokens"], CAP)
        usage = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
        if not stream:
            return httpx.Response(200, json={"choices": [], "usage": usage})
        chunks = ['data: {"choices":[{"delta":{"role":"assistant","content":""}}]}']
        chunks += ['data: {"choices":[{"delta":{"content":"w "}}]}'] * n
        chunks += [f"data: {json.dumps({'choices': [], 'usage': usage})}", "data: [DONE]"]
        return httpx.Response(200, text="\n\n".join(chunks) + "\n\n")

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_the_live_client_continues_a_capped_answer(stream: bool) -> None:
    bodies: list[dict[str, Any]] = []
    transport = _capping_gateway(bodies, stream)
    tenant = Tenant("t", Shape(50, fixed_length(LENGTH), stream=stream), clients=1)
    async with httpx.AsyncClient(base_url="http://gw", transport=transport) as client:
        live = LiveRequests(client, [tenant], {"t": "k"}, "m", 4096, 10.0, LiveClock(1.0))
        req = Request("t", 0, 50, LENGTH, stream, 0.0)
        await live._serve(tenant, req, [{"role": "user", "content": "hi"}])
    assert req.finished is not None and req.received == LENGTH and live.failures == 0
    assert [b["max_tokens"] for b in bodies] == [100, 70, 40, 10]
    assert [len(b["messages"]) for b in bodies] == [1, 2, 2, 2]
    assert bodies[-1]["messages"][-1] == {"role": "assistant", "content": "word " * 90}
