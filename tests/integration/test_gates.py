"""Gates, the degradation ladder and shadow mode over real HTTP: what the client is told
(status, body type, Retry-After, disclosure headers) and what the emulator really did."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from emulator.embedded import EmbeddedEmulator
from policies.engine import observe
from tests.integration.conftest import StartEmulator
from tests.integration.harness import (
    chat_body,
    decode_seconds,
    direct_load,
    engine_gauge,
    engine_slots,
    gateway_config,
    serve_gateway,
    wait_for,
)

pytestmark = pytest.mark.emulator

EVIDENCE = observe._MIN_SAMPLES

EXACT_RETRY_AFTER = {"min_s": 0.01, "max_s": 60, "jitter": 0.0}


def _quota_policy(*, shadow: bool, tpm: int, burst: int) -> dict[str, Any]:
    limits = {"tokens_per_minute": tpm, "burst_tokens": burst}
    gate = {
        "type": "tenant_quota",
        "name": "quota",
        "shadow": shadow,
        "parameters": {"default": limits},
    }
    return {"gates": [gate], "ladder": {"steps": []}, "retry_after": EXACT_RETRY_AFTER}


async def test_quota_429_retry_after_is_the_bucket_refill(emulator: EmbeddedEmulator) -> None:
    tpm, bucket = 6000, 100
    rate = tpm / 60.0
    policy = _quota_policy(shadow=False, tpm=tpm, burst=bucket)
    body = chat_body(bucket * 6 // 10, content="hi")
    async with serve_gateway(gateway_config([emulator.url], policy)) as gw:
        client = gw.client()
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limit_exceeded"
        assert r.headers["x-sluicegate-reason"] == "tenant_quota_exceeded"
        ms = int(r.headers["retry-after-ms"])
        assert 0 < ms <= math.ceil(bucket / rate * 1000), "longer than a full refill"
        assert int(r.headers["retry-after"]) == math.ceil(ms / 1000)
        await asyncio.sleep(ms / 1000)  # the client obeys exactly; the bucket has refilled
        again = await client.post("/v1/chat/completions", json=body)
        assert again.status_code == 200, again.headers.get("x-sluicegate-reason")


async def test_shadowed_quota_never_blocks_but_discloses(emulator: EmbeddedEmulator) -> None:
    policy = _quota_policy(shadow=True, tpm=600, burst=100)
    body = chat_body(60, content="hi")
    async with serve_gateway(gateway_config([emulator.url], policy)) as gw:
        client = gw.client()
        first = await client.post("/v1/chat/completions", json=body)
        assert first.status_code == 200 and "x-sluicegate-shadowed" not in first.headers
        for _ in range(3):
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200
            assert r.headers["x-sluicegate-shadowed"] == "quota"
            assert r.json()["usage"]["completion_tokens"] == body["max_tokens"]


async def test_retry_budget_exhausted(emulator: EmbeddedEmulator) -> None:
    budget = {"ratio": 0.25, "window_s": 30}  # below retry_after.max_s: no clamp
    policy = {"gates": [{"type": "retry_budget", "parameters": budget}], "ladder": {"steps": []}}
    firsts = 8
    allowed = math.floor(budget["ratio"] * firsts)
    retry = {"x-stainless-retry-count": "2"}
    async with serve_gateway(gateway_config([emulator.url], policy)) as gw:
        client = gw.client()
        t0 = time.monotonic()
        for _ in range(firsts):
            assert (await client.post("/v1/chat/completions", json=chat_body(4))).status_code == 200
        for _ in range(allowed):
            r = await client.post("/v1/chat/completions", json=chat_body(4), headers=retry)
            assert r.status_code == 200
        r = await client.post("/v1/chat/completions", json=chat_body(4), headers=retry)
        elapsed = time.monotonic() - t0
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limit_exceeded"
        assert r.headers["x-sluicegate-reason"] == "retry_budget_exhausted"
        ms = int(r.headers["retry-after-ms"])
        jitter = gw.ctx.scheduler.policy.retry_after.jitter  # type: ignore[attr-defined]
        # until the oldest slice of first attempts leaves the window: computed, not a floor
        window = budget["window_s"]
        assert window - elapsed <= ms / 1000 <= window * (1 + jitter) + 0.001
        assert int(r.headers["retry-after"]) == math.ceil(ms / 1000)
        m = await gw.metrics()
        assert m["sluicegate_retries_total"] == allowed + 1


async def test_infeasible_deadline_is_refused_before_backend_work(
    emulator: EmbeddedEmulator,
) -> None:
    policy = {"gates": [{"type": "deadline_feasibility"}], "ladder": {"steps": []}}
    tokens = 200
    run_s = decode_seconds(emulator, tokens)  # a lower bound on the backend's run time
    async with serve_gateway(gateway_config([emulator.url], policy)) as gw:
        client = gw.client()
        for _ in range(EVIDENCE):  # the run time of this cost class, learned
            assert (
                await client.post("/v1/chat/completions", json=chat_body(tokens))
            ).status_code == 200
        before = await engine_gauge(emulator.url, "vllm:request_success_total")
        tight = {"x-request-deadline-ms": f"{run_s * 1000 / 2:.3f}"}
        r = await client.post("/v1/chat/completions", json=chat_body(tokens), headers=tight)
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "deadline_infeasible"
        assert r.headers["x-sluicegate-reason"] == "deadline_infeasible"
        assert "retry-after" in r.headers
        assert not emulator.runner.engine.has_work
        assert await engine_gauge(emulator.url, "vllm:request_success_total") == before
        roomy = {"x-request-deadline-ms": f"{run_s * 1000 * 50:.3f}"}
        ok = await client.post("/v1/chat/completions", json=chat_body(tokens), headers=roomy)
        assert ok.status_code == 200


async def test_ladder_caps_max_tokens_under_backend_saturation(
    start_emulator: StartEmulator,
) -> None:
    emu = start_emulator(speed=10.0)
    cap = 16
    step = {
        "name": "cap-output",
        "at": 0.5,
        "hysteresis": 0.1,
        "action": "cap_max_tokens",
        "max_tokens": cap,
    }
    policy = {"ladder": {"steps": [step]}}
    async with serve_gateway(gateway_config([emu.url], policy)) as gw:
        client = gw.client()
        calm = await client.post("/v1/chat/completions", json=chat_body(4 * cap))
        assert calm.status_code == 200 and "x-sluicegate-degraded" not in calm.headers
        assert calm.json()["usage"]["completion_tokens"] == 4 * cap
        async with direct_load(emu.url, 3 * engine_slots(emu), max_tokens=400):
            scale = gw.ctx.scheduler.policy.ladder.waiting_scale  # type: ignore[attr-defined]

            def saturated() -> bool:  # the gateway's own view of the backend's signals
                view = gw.ctx.pool.snapshot().backends[0]
                return bool((view.waiting or 0.0) / scale >= step["at"])  # type: ignore[operator]

            await wait_for(saturated, what="the backend reported as saturated")
            r = await client.post("/v1/chat/completions", json=chat_body(4 * cap))
        assert r.status_code == 200
        assert r.headers["x-sluicegate-decision"] == "degrade"
        assert r.headers["x-sluicegate-degraded"] == "cap-output"
        assert 0 < r.json()["usage"]["completion_tokens"] <= cap
