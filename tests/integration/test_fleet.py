"""Fleet mode end to end: three replicas sharing a real Redis behind HAProxy, in front of
emulators. Each limit is also run with ``state: local`` (per-replica counting), which must
break it: that shows the test can see the defect it guards against."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from emulator.embedded import EmbeddedEmulator
from tests.integration.conftest import StartEmulator
from tests.integration.fleet import Fleet, fleet
from tests.integration.harness import MODEL, api_key, chat_body, gateway_config
from tests.redis_server import RedisServer

pytestmark = pytest.mark.emulator

TENANT = "acme"


def _config(
    emulators: list[EmbeddedEmulator], limits: dict[str, int], state: dict[str, Any]
) -> dict[str, Any]:
    gate = {"type": "tenant_quota", "name": "quota", "parameters": {"default": limits}}
    policy = {"gates": [gate], "ladder": {"steps": []},
              "retry_after": {"min_s": 0.01, "max_s": 60, "jitter": 0.0}}  # fmt: skip
    return gateway_config([e.url for e in emulators], policy, tenants=(TENANT,), state=state)


def _state(backend: str, redis_server: RedisServer, **kw: Any) -> dict[str, Any]:
    if backend == "local":
        return {"backend": "local"}
    return {"backend": "redis", "url": redis_server.url, "command_timeout_ms": 250, **kw}


def _client(f: Fleet) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f.url, headers={"authorization": f"Bearer {api_key(TENANT)}"}, timeout=60.0,
        limits=httpx.Limits(max_connections=None),
    )  # fmt: skip


def _held(emulators: list[EmbeddedEmulator]) -> int:
    """Requests the engines hold right now (running or waiting), read from the engines."""
    return sum(e.runner.engine.num_running + e.runner.engine.num_waiting for e in emulators)


async def _sample_max(read: Callable[[], int], stop: asyncio.Event) -> int:
    seen = 0
    while not stop.is_set():
        seen = max(seen, read())
        await asyncio.sleep(0.005)
    return seen


@pytest.mark.parametrize("backend", ["redis", "local"])
async def test_max_concurrent_holds_across_replicas(
    backend: str, redis_server: RedisServer, start_emulator: StartEmulator
) -> None:
    """100 concurrent streams of one tenant with max_concurrent 10, through the balancer."""
    emulators = [start_emulator(profile="rx9070xt", model_name=MODEL, speed=20.0)
                 for _ in range(3)]  # fmt: skip
    cfg = _config(emulators, {"max_concurrent": 10}, _state(backend, redis_server))
    statuses: list[int] = []
    with fleet(cfg) as f:
        async with _client(f) as client:

            async def stream_until_enough() -> None:
                while statuses.count(200) < 60:
                    body = chat_body(60, stream=True)
                    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                        async for _ in r.aiter_bytes():
                            pass
                    statuses.append(r.status_code)
                    if r.status_code == 429:
                        await asyncio.sleep(0.02)  # the load generator's pacing

            stop = asyncio.Event()
            sampler = asyncio.ensure_future(_sample_max(lambda: _held(emulators), stop))
            await asyncio.gather(*(stream_until_enough() for _ in range(100)))
            stop.set()
            max_held = await sampler
    assert set(statuses) <= {200, 429}
    if backend == "redis":
        assert 8 <= max_held <= 10, max_held
    else:
        assert max_held > 10, max_held  # per-replica counting lets each replica take 10


@pytest.mark.parametrize("backend", ["redis", "local"])
async def test_tokens_per_minute_hold_across_replicas(
    backend: str, redis_server: RedisServer, start_emulator: StartEmulator
) -> None:
    """Admitted tokens over a window: the bucket's burst plus its refill, within 5 %."""
    emulators = [start_emulator(profile="rx9070xt", model_name=MODEL, speed=20.0)
                 for _ in range(2)]  # fmt: skip
    tpm, burst = 6_000, 500  # well under what the load below offers, even on a busy machine
    cfg = _config(emulators, {"tokens_per_minute": tpm, "burst_tokens": burst},
                  _state(backend, redis_server))  # fmt: skip
    served: list[int] = []
    admitted_at: list[float] = []  # when each served request was sent (admission follows)
    window_s = 10.0
    with fleet(cfg) as f:
        async with _client(f) as client:
            start = time.monotonic()

            async def ask_until_window_ends() -> None:
                while time.monotonic() - start < window_s:
                    sent = time.monotonic()
                    r = await client.post("/v1/chat/completions", json=chat_body(10))
                    if r.status_code == 200:
                        served.append(r.json()["usage"]["total_tokens"])
                        admitted_at.append(sent)
                    else:
                        assert r.status_code == 429, r.text
                        await asyncio.sleep(0.02)  # the load generator's pacing

            await asyncio.gather(*(ask_until_window_ends() for _ in range(12)))
    allowed = burst + tpm / 60.0 * (max(admitted_at) - start)
    ratio = sum(served) / allowed
    print(f"fleet quota [{backend}]: served {sum(served)} tokens, allowed {allowed:.0f}, "
          f"ratio {ratio:.3f}")  # fmt: skip
    if backend == "redis":
        assert abs(ratio - 1.0) <= 0.05, ratio
    else:
        assert ratio > 2.0, ratio  # per-replica counting: about 3x
