"""Each shipped preset over real HTTP in front of real emulators, under a bounded burst,
showing its characteristic behaviour in the gateway's own responses and stats.

Time parameters of a preset (CoDel's target and interval, the reservation target) are
divided by the emulator's speed: the emulator runs engine time K times faster, so the
policy sees the same engine relative to its clock as at K = 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from emulator.embedded import EmbeddedEmulator
from tests.integration.conftest import StartEmulator
from tests.integration.harness import (
    Gateway,
    chat_body,
    engine_gauge,
    engine_slots,
    gateway_config,
    preset_policy,
    sampling,
    serve_gateway,
)

pytestmark = pytest.mark.emulator

SPEED = 50.0


async def burst(
    client: httpx.AsyncClient,
    bodies: list[dict[str, Any]],
    headers: list[dict[str, str]] | None = None,
) -> list[httpx.Response]:
    """Every body sent at once; the responses in order."""
    hdrs = headers or [{} for _ in bodies]
    posts = [
        client.post("/v1/chat/completions", json=b, headers=h)
        for b, h in zip(bodies, hdrs, strict=True)
    ]
    return list(await asyncio.gather(*posts))


@contextlib.asynccontextmanager
async def peak_sampler(
    gw: Gateway, emulators: list[EmbeddedEmulator]
) -> AsyncIterator[dict[str, int]]:
    """Samples, until the block ends, the largest number of requests each emulator held
    (running + waiting in its engine) and the gateway's largest in-flight count."""
    peak = {"engine": 0, "gateway": 0}

    def sample() -> None:
        for e in emulators:
            held = e.runner.engine.num_running + e.runner.engine.num_waiting
            peak["engine"] = max(peak["engine"], held)
        by_backend = gw.ctx.scheduler.stats().in_flight_by_backend
        peak["gateway"] = max([peak["gateway"], *by_backend.values()])

    async with sampling(sample, 0.002):
        yield peak


def queued_before(r: httpx.Response) -> bool:
    return "x-sluicegate-queue-position" in r.headers


async def test_fixed_cap_holds_the_cap_and_defers_the_excess(
    start_emulator: StartEmulator,
) -> None:
    policy = preset_policy("fixed-cap")
    assert "parameters" not in policy["limit"], "the preset types in a cap"
    emu = start_emulator(speed=SPEED)
    cap = engine_slots(emu)  # the engine's own number, as the operator's backend config states it
    n = 3 * cap
    async with serve_gateway(gateway_config([emu.url], policy, max_num_seqs=cap)) as gw:
        async with peak_sampler(gw, [emu]) as peak:
            responses = await burst(gw.client(), [chat_body(400) for _ in range(n)])
        assert [r.status_code for r in responses] == [200] * n
        assert peak["gateway"] == cap, "the gateway never filled (or exceeded) its cap"
        assert peak["engine"] <= cap, "the engine held more than the cap at once"
        deferred = sum(queued_before(r) for r in responses)
        assert deferred >= n - cap


async def test_codel_drops_only_after_sojourn_above_target_for_an_interval(
    start_emulator: StartEmulator,
) -> None:
    policy = copy.deepcopy(preset_policy("codel"))
    params = policy["queue"]["discipline"]["parameters"]
    params.update({k: v / SPEED for k, v in params.items()})
    target_s, interval_s = params["target_s"], params["interval_s"]
    emu = start_emulator(speed=SPEED)
    n = 6 * engine_slots(emu)
    async with serve_gateway(gateway_config([emu.url], policy)) as gw:
        client = gw.client()
        started = time.monotonic()
        rejected_at: list[float] = []

        async def one() -> httpx.Response:
            r = await client.post("/v1/chat/completions", json=chat_body(1000))
            if r.status_code == 429:
                rejected_at.append(time.monotonic())
            return r

        responses = await asyncio.gather(*(one() for _ in range(n)))
    dropped = [r for r in responses if r.status_code == 429]
    served = [r for r in responses if r.status_code == 200]
    assert dropped, "a standing queue above target for longer than interval dropped nothing"
    assert served and len(dropped) + len(served) == n
    for r in dropped:
        assert r.json()["error"]["type"] == "overloaded"
        assert r.headers["x-sluicegate-reason"] == "overloaded"
        assert int(r.headers["x-sluicegate-queue-wait-ms"]) >= target_s * 1000
        assert "retry-after" in r.headers
    assert min(rejected_at) - started >= interval_s, "dropped before a whole interval passed"


async def test_fair_share_serves_a_light_tenant_during_a_heavy_burst(
    start_emulator: StartEmulator,
) -> None:
    policy = preset_policy("fair-share")
    emu = start_emulator(speed=SPEED)
    heavy_n = 4 * engine_slots(emu)
    raw = gateway_config(
        [emu.url], policy, tenants=("heavy", "light"), max_num_seqs=engine_slots(emu)
    )
    async with serve_gateway(raw) as gw:
        heavy_bodies = [chat_body(1000) for _ in range(heavy_n)]
        heavy = asyncio.ensure_future(burst(gw.client("heavy"), heavy_bodies))
        await _until_queued(gw, 2 * engine_slots(emu))
        light = await burst(gw.client("light"), [chat_body(50) for _ in range(3)])
        still_queued = gw.ctx.scheduler.stats().queued
        heavy_done = await heavy
    assert [r.status_code for r in light] == [200] * 3
    assert still_queued > 0, "the light tenant was served only after the heavy backlog"
    assert [r.status_code for r in heavy_done] == [200] * heavy_n


async def _until_queued(gw: Gateway, depth: int) -> None:
    from tests.integration.harness import wait_for

    await wait_for(lambda: gw.ctx.scheduler.stats().queued >= depth, what=f"{depth} queued")


async def _success_count(emu: EmbeddedEmulator) -> float:
    return await engine_gauge(emu.url, "vllm:request_success_total")


async def test_agent_swarm_queues_the_step_and_keeps_sessions(
    start_emulator: StartEmulator,
) -> None:
    policy = preset_policy("agent-swarm")
    emus = [start_emulator(speed=SPEED, seed=i) for i in range(2)]
    n = 2 * sum(engine_slots(e) for e in emus)
    async with serve_gateway(gateway_config([e.url for e in emus], policy)) as gw:
        client = gw.client()
        step = await burst(
            client,
            [chat_body(200) for _ in range(n)],
            [{"x-session-id": f"agent-{i}"} for i in range(n)],
        )
        assert [r.status_code for r in step] == [200] * n, "the swarm step bounced agents"
        assert any(queued_before(r) for r in step), "the overload never queued"
        for session in ("agent-a", "agent-b"):
            before = [await _success_count(e) for e in emus]
            for _ in range(3):
                r = await client.post(
                    "/v1/chat/completions", json=chat_body(8), headers={"x-session-id": session}
                )
                assert r.status_code == 200
            gained = sorted(
                [await _success_count(e) - b for e, b in zip(emus, before, strict=True)]
            )
            assert gained == [0, 3], f"session {session} was spread over backends: {gained}"


async def test_seed000_best_reserves_a_place_and_keeps_it(start_emulator: StartEmulator) -> None:
    # Appointments are predictions in emulated seconds: at SPEED one event-loop hiccup of a
    # loaded 2-core machine is a whole second of the engine's time, so this test runs the
    # engine five times slower than the others (its times scaled alike).
    speed = SPEED / 5
    policy = copy.deepcopy(preset_policy("seed000-best"))
    params = policy["gates"][0]["parameters"]
    params.update({k: v / speed for k, v in params.items()})
    emu = start_emulator(speed=speed)
    n = 4 * engine_slots(emu)
    async with serve_gateway(gateway_config([emu.url], policy)) as gw:
        client = gw.client()
        warm = await burst(client, [chat_body(200) for _ in range(engine_slots(emu))])
        assert all(r.status_code == 200 for r in warm)
        assert gw.ctx.scheduler.stats().drain_tokens_per_s, "no drain rate measured"
        results = await asyncio.gather(*(_obedient_agent(client, f"a{i}") for i in range(n)))
    told_to_wait = [tries for tries in results if tries > 1]
    assert told_to_wait, "the queue was never predicted past its target"
    kept = [tries for tries in told_to_wait if tries == 2]
    # Most come back at their appointment and are let in (a lost place would be re-told
    # to wait on return while later arrivals take it); all are served.
    assert 2 * len(kept) >= len(told_to_wait), f"appointments not kept: {sorted(results)}"


async def _obedient_agent(client: httpx.AsyncClient, session: str) -> int:
    """Sends one turn, sleeping exactly the Retry-After it is given; returns the tries."""
    for tries in range(1, 11):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(200), headers={"x-session-id": session}
        )
        if r.status_code == 200:
            return tries
        assert r.status_code == 429 and r.headers["x-sluicegate-reason"] == "overloaded"
        await asyncio.sleep(int(r.headers["retry-after-ms"]) / 1000)
    raise AssertionError(f"{session} was never served")


def _run_call(run_id: str, calls: int) -> dict[str, str]:
    return {"x-agent-run-id": run_id, "x-agent-run-calls": str(calls)}


async def test_agent_runs_lets_a_started_run_go_ahead_of_new_runs(
    start_emulator: StartEmulator,
) -> None:
    # Engine time five times slower than the other tests: the started run's next call must
    # find the new runs' first calls still queued, which at full speed lasts a few ms.
    policy = preset_policy("agent-runs")
    assert policy["runs"]["enabled"] and "promise_horizon_s" not in policy["runs"]
    emu = start_emulator(speed=SPEED / 5)
    n = 3 * engine_slots(emu)
    async with serve_gateway(gateway_config([emu.url], policy)) as gw:
        client = gw.client()
        plan = await client.post(
            "/v1/chat/completions", json=chat_body(50), headers=_run_call("started", 2)
        )
        assert plan.status_code == 200
        bodies = [chat_body(400) for _ in range(n)]
        firsts_sent = [_run_call(f"new-{i}", 1) for i in range(n)]
        new_runs = asyncio.ensure_future(burst(client, bodies, firsts_sent))
        await _until_queued(gw, engine_slots(emu))
        turn = await client.post(
            "/v1/chat/completions", json=chat_body(50), headers=_run_call("started", 2)
        )
        still_queued = gw.ctx.scheduler.stats().queued
        firsts = await new_runs
    assert turn.status_code == 200
    assert still_queued > 0, "the started run's call waited behind every new run's first call"
    assert [r.status_code for r in firsts] == [200] * n  # queued, then served: no promise
