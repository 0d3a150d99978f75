"""Agent runs through the gateway in front of the emulator: two tenants' agents run to
completion through the OpenAI SDK, a run's fan-out is capped (sampled in the engine), a
``DELETE`` of a run frees the engine's slots at once, and every call ends exactly once
(the harness checks the outcomes against the calls sent)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartEmulator
from tests.integration.harness import (
    MODEL,
    Gateway,
    chat_body,
    decode_seconds,
    engine_slots,
    gateway_config,
    sampling,
    serve_gateway,
    wait_for,
)

pytestmark = pytest.mark.emulator

RUNS: dict[str, Any] = {"runs": {"enabled": True}, "ladder": {"steps": []}}
SCRAPE = {"interval_s": 0.1, "max_age_s": 5.0}


def _run(run_id: str, **hints: int) -> dict[str, str]:
    names = {
        "calls": "X-Agent-Run-Calls",
        "tokens": "X-Agent-Run-Tokens",
        "branches": "X-Agent-Run-Branches",
    }
    return {"X-Agent-Run-Id": run_id, **{names[k]: str(v) for k, v in hints.items()}}


@contextlib.asynccontextmanager
async def _engine_peak(engine: Any) -> AsyncIterator[list[int]]:
    """The most requests the engine ran at once while the block ran, sampled from the
    engine itself at every event-loop turn (the emulator runs in this process)."""
    peak = [0]

    def sample() -> None:
        peak[0] = max(peak[0], engine.num_running)

    async with sampling(sample):
        yield peak


async def _agent(gw: Gateway, tenant: str, run_id: str, turns: int, fan_out: int) -> None:
    """One agent run through the OpenAI SDK: ``turns`` sequential calls, the middle one
    fanned out to ``fan_out`` parallel branches that join, then the run is completed."""
    client = gw.openai(tenant)
    headers = _run(run_id, calls=turns + fan_out - 1, branches=fan_out)

    async def call() -> None:
        out = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "plan"}],
            max_tokens=24,
            extra_headers=headers,
            extra_body={"ignore_eos": True},
        )
        assert out.usage is not None and out.usage.completion_tokens == 24

    for turn in range(turns):
        if turn == turns // 2:
            await asyncio.gather(*(call() for _ in range(fan_out)))
        else:
            await call()
    async with gw.client(tenant) as http:
        done = await http.post(f"/v1/runs/{run_id}/complete")
        assert done.status_code == 200


async def test_two_tenants_agents_finish_their_runs(start_emulator: StartEmulator) -> None:
    emu = start_emulator(speed=20.0)
    raw = gateway_config([emu.url], RUNS, tenants=("alice", "bob"), scrape=SCRAPE)
    async with serve_gateway(raw) as gw:
        agents = [
            _agent(gw, tenant, f"{tenant}-{i}", turns=3, fan_out=3)
            for tenant in ("alice", "bob")
            for i in range(4)
        ]
        await asyncio.gather(*agents)
        await wait_for(lambda: gw.ctx.scheduler.runs.stats().open_runs == 0, what="runs ended")
        m = await gw.metrics()
        for tenant in ("alice", "bob"):
            assert m[f"sluicegate_runs_started_total{{tenant={tenant}}}"] == 4
            assert m[f"sluicegate_runs_ended_total{{end=completed,tenant={tenant}}}"] == 4
            assert m[f"sluicegate_run_latency_seconds_count{{tenant={tenant}}}"] == 4
        assert m.get("sluicegate_run_wasted_tokens_total", 0.0) == 0.0
        assert m["sluicegate_run_reserved_tokens"] == 0.0


async def test_a_run_fan_out_is_capped_at_its_branch_limit(start_emulator: StartEmulator) -> None:
    emu = start_emulator(speed=20.0)
    seqs = engine_slots(emu)
    branches = 2
    assert seqs > 3 * branches  # the engine could run every branch at once
    raw = gateway_config([emu.url], RUNS, max_num_seqs=seqs, scrape=SCRAPE)
    async with serve_gateway(raw) as gw:
        client = gw.client(headers=_run("wide", branches=branches))
        async with _engine_peak(emu.runner.engine) as peak:
            answers = await asyncio.gather(
                *(
                    client.post("/v1/chat/completions", json=chat_body(64))
                    for _ in range(3 * branches)
                )
            )
        assert [r.status_code for r in answers] == [200] * (3 * branches)
        assert peak[0] == branches
        queued = [r for r in answers if "x-sluicegate-queue-position" in r.headers]
        assert len(queued) >= branches  # they waited in the run's own queue


async def test_delete_frees_the_engine_slots_and_refuses_the_waiting_call(
    start_emulator: StartEmulator,
) -> None:
    emu = start_emulator(speed=20.0)
    seqs = engine_slots(emu)
    raw = gateway_config(
        [emu.url], RUNS, tenants=("alice", "bob"), max_num_seqs=seqs, scrape=SCRAPE
    )
    async with serve_gateway(raw) as gw:
        client = gw.client(headers=_run("doomed", branches=3))

        async def stream() -> bytes:
            body = chat_body(4000, stream=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                return b"".join([chunk async for chunk in r.aiter_raw()])

        streams = [asyncio.ensure_future(stream()) for _ in range(3)]
        waiting = asyncio.ensure_future(client.post("/v1/chat/completions", json=chat_body(8)))
        await wait_for(lambda: emu.runner.engine.num_running == 3, what="3 running in the engine")
        await wait_for(lambda: gw.ctx.scheduler.runs.stats().held_calls == 1, what="one held")
        async with gw.client("bob") as other:
            assert (await other.delete("/v1/runs/doomed")).status_code == 404
        cancelled = await client.delete("/v1/runs/doomed")
        assert cancelled.status_code == 200 and cancelled.json()["reason"] == "run_cancelled"
        refused = await waiting
        assert refused.status_code == 409 and refused.headers["x-should-retry"] == "false"
        for body in await asyncio.gather(*streams):
            assert b'"type": "run_ended"' in body
        await wait_for(lambda: emu.runner.engine.num_running == 0, what="the engine freed")
        m = await gw.metrics()
        assert m["sluicegate_runs_ended_total{end=cancelled,tenant=alice}"] == 1
        assert m["sluicegate_run_wasted_tokens_total{tenant=alice}"] > 0


async def test_a_passing_run_deadline_cuts_its_streams_and_frees_the_engine(
    start_emulator: StartEmulator,
) -> None:
    emu = start_emulator(speed=5.0)
    deadline_s = 1.0
    tokens = 4000
    assert decode_seconds(emu, tokens) > 10 * deadline_s  # the streams cannot finish in time
    raw = gateway_config([emu.url], RUNS, max_num_seqs=engine_slots(emu), scrape=SCRAPE)
    async with serve_gateway(raw) as gw:
        headers = {**_run("late"), "X-Agent-Run-Deadline-Ms": str(int(deadline_s * 1000))}
        client = gw.client(headers=headers)

        async def stream() -> bytes:
            body = chat_body(tokens, stream=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                return b"".join([chunk async for chunk in r.aiter_raw()])

        bodies = await asyncio.gather(stream(), stream())
        assert all(b'"type": "run_ended"' in body for body in bodies)
        await wait_for(lambda: emu.runner.engine.num_running == 0, what="the engine freed")
        late = await client.post("/v1/chat/completions", json=chat_body(8))
        assert late.status_code == 409
        assert late.json()["error"]["code"] == "run_deadline_expired"
        m = await gw.metrics()
        assert m["sluicegate_runs_ended_total{end=abandoned,tenant=alice}"] == 1


async def test_without_runs_the_headers_change_nothing(start_emulator: StartEmulator) -> None:
    emu = start_emulator(speed=20.0)
    off = {"ladder": {"steps": []}, "runs": {"enabled": False}}
    raw = gateway_config([emu.url], off, scrape=SCRAPE)
    async with serve_gateway(raw) as gw:
        client = gw.client(headers=_run("plain", branches=1))
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=chat_body(8)) for _ in range(3))
        )
        assert [r.status_code for r in answers] == [200, 200, 200]
        async with gw.client() as http:
            missing: httpx.Response = await http.get("/v1/runs/plain")
        assert missing.status_code == 404
