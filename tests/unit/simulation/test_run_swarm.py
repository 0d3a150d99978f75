"""What the live run swarm sends: the X-Agent-Run-* headers of a run's calls."""

from __future__ import annotations

import json

import httpx

from emulator.profile import LengthComponent, LengthMixture
from simulation.agent_runs import RunPlan, RunWorkload
from simulation.run_swarm import parser, run_headers, swarm_runs

MIX = LengthMixture(components=(LengthComponent(weight=1.0, min_tokens=5, max_tokens=5),))
PLAN = RunPlan(3, 0.0, ((20,), (10, 30), (40,)), (1.0, 1.0))


def test_every_hint_in_its_header_and_the_deadline_in_wall_milliseconds() -> None:
    w = RunWorkload(MIX, prompt_tokens=8, hints=("calls", "tokens", "branches", "deadline"))
    assert run_headers(w, PLAN, left_s=80.0, speed=8.0) == {
        "x-agent-run-id": "run-3",
        "x-agent-run-calls": "4",
        "x-agent-run-tokens": str(4 * 8 + 100),
        "x-agent-run-branches": "2",
        "x-agent-run-deadline-ms": "10000",  # 80 emulated s at 8x: 10 wall s
    }


def test_only_the_hints_the_workload_sends() -> None:
    w = RunWorkload(MIX, hints=())
    assert run_headers(w, PLAN, left_s=80.0, speed=1.0) == {"x-agent-run-id": "run-3"}


class FakeGateway:
    """run-0's first attempt is refused (429), then every call streams its max_tokens;
    every call of run-1 is answered 409 (the gateway ended the run)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.ends: list[tuple[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1/runs/"):
            self.ends.append((request.method, request.url.path))
            return httpx.Response(200, json={})
        run = request.headers["x-agent-run-id"]
        self.calls.append(run)
        if run == "run-1":
            return httpx.Response(409, json={"error": {"type": "run_ended"}})
        if self.calls.count(run) == 1:
            return httpx.Response(429, headers={"retry-after-ms": "10"}, json={"error": {}})
        tokens = json.loads(request.content)["max_tokens"]
        chunk = json.dumps({"choices": [{"delta": {"content": "tok"}}]})
        sse = f"data: {chunk}\n\n" * tokens + "data: [DONE]\n\n"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})


async def test_a_run_joins_its_branches_and_a_run_ended_by_the_gateway_stops() -> None:
    fake = FakeGateway()
    args = parser().parse_args(["--model", "m", "--speed", "100"])
    w = RunWorkload(MIX, prompt_tokens=8, deadline_s=100.0)
    plans = [RunPlan(0, 0.0, ((3,), (4, 5)), (1.0,)), RunPlan(1, 0.0, ((3,),), ())]
    swarm = await swarm_runs(args, w, plans, transport=httpx.MockTransport(fake))
    done, over = sorted(swarm.records, key=lambda r: r.index)
    assert done.completed and done.started and done.refusals == 1
    assert done.spent_tokens == 3 * 8 + 3 + 4 + 5  # prompts + every streamed token
    assert not over.completed and not over.started and over.spent_tokens == 0
    assert fake.calls.count("run-0") == 4  # the refused attempt, its retry, two branches
    assert sorted(fake.ends) == [("DELETE", "/v1/runs/run-1"), ("POST", "/v1/runs/run-0/complete")]
    assert swarm.failures == 0


class CappingGateway:
    """Streams at most ``cap`` tokens of any call (a degrade's ``max_tokens`` cap)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.bodies: list[dict[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1/runs/"):
            return httpx.Response(200, json={})
        body = json.loads(request.content)
        self.bodies.append(body)
        chunk = json.dumps({"choices": [{"delta": {"content": "tok"}}]})
        sse = f"data: {chunk}\n\n" * min(body["max_tokens"], self.cap) + "data: [DONE]\n\n"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})


async def test_an_answer_cut_short_is_continued_for_the_rest() -> None:
    fake = CappingGateway(cap=2)
    args = parser().parse_args(["--model", "m", "--speed", "100"])
    w = RunWorkload(MIX, prompt_tokens=8, deadline_s=100.0)
    swarm = await swarm_runs(
        args, w, [RunPlan(0, 0.0, ((5,),), ())], transport=httpx.MockTransport(fake)
    )
    (record,) = swarm.records
    assert record.completed
    assert [b["max_tokens"] for b in fake.bodies] == [5, 3, 1]  # 2 + 2 + 1 tokens
    roles = [[m["role"] for m in b["messages"]] for b in fake.bodies]  # type: ignore[union-attr]
    assert roles == [["user"], ["user", "assistant"], ["user", "assistant"]]
    assert len(swarm.call_ttft) == 1  # one time to first token per call
