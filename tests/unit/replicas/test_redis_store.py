"""The Redis state against a real redis-server: leases, buckets, failure and rejoin."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.config.schema import StateConfig
from gateway.replicas.contract import Grant, Refusal
from gateway.replicas.redis_store import RedisState, connect
from policies.gates.quota_params import TenantLimits
from policies.types import Reason, RequestInfo, Usage, WorkEstimate
from tests.redis_server import RedisServer

CAP = TenantLimits(max_concurrent=3)
TPM = TenantLimits(tokens_per_minute=600)  # 10 tokens a second


def request(n: int, tokens: int = 100) -> RequestInfo:
    return RequestInfo(
        request_id=f"r{n}",
        tenant="acme",
        workload_class="interactive",
        model="m",
        estimate=WorkEstimate(tokens // 2, tokens - tokens // 2),
        arrival=0.0,
    )


def config(server: RedisServer, **kw: object) -> StateConfig:
    """A generous timeout: a busy machine must not look like a failing Redis, except in the
    tests that stop Redis (they set their own)."""
    return StateConfig.model_validate(
        {"backend": "redis", "url": server.url, "command_timeout_ms": 2000, **kw}
    )


async def beat_until_shared(state: RedisState) -> None:
    """Heartbeats until one succeeds (after a restart, each pooled connection fails once)."""
    await state.beat()
    while state.mode != "shared":
        await state.beat()


@pytest.fixture
async def pair(redis_server: RedisServer) -> AsyncIterator[tuple[RedisState, RedisState]]:
    """Two replicas sharing one Redis."""
    cfg = config(redis_server)
    states = [RedisState(cfg, connect(cfg), replica_id=f"replica-{i}") for i in (1, 2)]
    for state in states:
        await state.beat()
    yield states[0], states[1]
    for state in states:
        await state.aclose()


async def test_max_concurrent_holds_across_replicas_and_release_frees_a_slot(
    pair: tuple[RedisState, RedisState],
) -> None:
    a, b = pair
    grants = [await s.admit(request(i), CAP) for i, s in enumerate((a, b, a))]
    assert all(isinstance(g, Grant) for g in grants)
    refused = await b.admit(request(9), CAP)
    assert refused == Refusal(Reason.TENANT_CONCURRENCY, None)
    first = grants[0]
    assert isinstance(first, Grant)
    a.release(first, None, served=False)
    a.release(first, None, served=False)  # idempotent
    await asyncio.gather(*a._tasks)
    assert isinstance(await b.admit(request(10), CAP), Grant)
    assert isinstance(await b.admit(request(11), CAP), Refusal)


async def test_tokens_are_reserved_by_estimate_and_settled_by_usage(
    pair: tuple[RedisState, RedisState],
) -> None:
    a, b = pair
    big = await a.admit(request(1, tokens=550), TPM)
    assert isinstance(big, Grant)
    short = await b.admit(request(2, tokens=200), TPM)
    assert isinstance(short, Refusal) and short.reason is Reason.TENANT_QUOTA
    assert short.retry_after_s is not None and short.retry_after_s > 0
    a.release(big, Usage(50, 50), served=True)  # used 100 of the 550 reserved
    await asyncio.gather(*a._tasks)
    assert isinstance(await b.admit(request(3, tokens=200), TPM), Grant)


async def test_heartbeats_count_the_replicas(pair: tuple[RedisState, RedisState]) -> None:
    a, _b = pair
    await a.beat()
    assert a.replicas == 2
    view = await a.fleet()
    assert sorted(m["id"] for m in view["members"]) == ["replica-1", "replica-2"]


async def test_a_dead_replicas_leases_expire_within_the_ttl(redis_server: RedisServer) -> None:
    cfg = config(redis_server, lease_ttl_s=1.0, sync_interval_ms=100)
    dead = RedisState(cfg, connect(cfg), replica_id="dead")
    alive = RedisState(cfg, connect(cfg), replica_id="alive")
    try:
        for i in range(3):
            assert isinstance(await dead.admit(request(i), CAP), Grant)
        assert isinstance(await alive.admit(request(7), CAP), Refusal)
        # the dead replica never renews nor releases: its leases run out on Redis's clock
        while isinstance(await alive.admit(request(8), CAP), Refusal):
            await asyncio.sleep(0.05)
    finally:
        await alive.aclose()
        await dead._client.aclose()


async def test_a_live_replica_keeps_its_leases_past_the_ttl(redis_server: RedisServer) -> None:
    cfg = config(redis_server, lease_ttl_s=1.0, sync_interval_ms=100)
    holder = RedisState(cfg, connect(cfg), replica_id="holder")
    other = RedisState(cfg, connect(cfg), replica_id="other")
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        for i in range(3):
            assert isinstance(await holder.admit(request(i), CAP), Grant)
        t0 = (await client.time())[0]
        while (await client.time())[0] < t0 + 3:  # three TTLs on Redis's clock
            await holder.beat()
            await asyncio.sleep(0.1)
        assert isinstance(await other.admit(request(9), CAP), Refusal)
    finally:
        await client.aclose()
        await holder.aclose()
        await other.aclose()


async def test_redis_down_gives_the_local_share_then_rejoins(redis_server: RedisServer) -> None:
    modes: list[tuple[str, int]] = []
    cfg = config(redis_server, command_timeout_ms=100)
    state = RedisState(cfg, connect(cfg), replica_id="r", on_mode=lambda m, n: modes.append((m, n)))
    peer = RedisState(cfg, connect(cfg), replica_id="peer")
    try:
        await peer.beat()
        await state.beat()
        redis_server.pause()
        grant = await state.admit(request(1), CAP)
        assert isinstance(grant, Grant)  # not refused: the core enforces the local share
        assert modes == [("fallback", 2)]
        redis_server.resume()
        # the first beats after SIGCONT may still time out on a loaded machine (100 ms)
        for _ in range(50):
            await state.beat()
            if modes[-1][0] == "shared":
                break
        assert modes[-1] == ("shared", 2)
        # the lease taken while Redis was away was written back by the heartbeat
        assert (await state.fleet())["tenant_leases"] == {"acme": 1}
    finally:
        redis_server.resume()
        await state.aclose()
        await peer.aclose()


async def test_closed_refuses_quota_gated_work_while_redis_is_down(
    redis_server: RedisServer,
) -> None:
    cfg = config(redis_server, command_timeout_ms=100, on_failure="closed")
    state = RedisState(cfg, connect(cfg), replica_id="r")
    try:
        redis_server.pause()
        first = await state.admit(request(1), CAP)
        assert isinstance(first, Refusal) and first.reason is Reason.TENANT_QUOTA
        assert await state.admit(request(2), None) is None  # no quota: nothing to refuse
        assert state.mode == "closed"
    finally:
        redis_server.resume()
        await state.aclose()


async def test_a_redis_that_lost_its_data_is_rebuilt_from_the_replicas(
    redis_server: RedisServer,
) -> None:
    cfg = config(redis_server)
    a = RedisState(cfg, connect(cfg), replica_id="a")
    b = RedisState(cfg, connect(cfg), replica_id="b")
    try:
        await a.beat()
        for i in range(3):
            assert isinstance(await a.admit(request(i), CAP), Grant)
        redis_server.restart()
        await beat_until_shared(b)  # b starts the new epoch first: a's leases are not back
        await beat_until_shared(a)
        assert isinstance(await b.admit(request(9), CAP), Refusal)
    finally:
        await a.aclose()
        await b.aclose()


async def test_replicas_share_their_in_flight_per_backend(redis_server: RedisServer) -> None:
    cfg = config(redis_server, lease_ttl_s=1.0, sync_interval_ms=100)
    seen: dict[str, dict[str, int]] = {}

    def replica(name: str, counts: dict[str, int]) -> RedisState:
        return RedisState(
            cfg,
            connect(cfg),
            replica_id=name,
            in_flight=lambda: counts,
            on_peers=lambda peers: seen.__setitem__(name, peers),
        )

    a, b, c = replica("a", {"x": 3, "y": 1}), replica("b", {"x": 2}), replica("c", {})
    try:
        for state in (a, b, c):
            await state.beat()
            await state.sync_peers()
        await a.sync_peers()
        assert seen["a"] == {"x": 2}
        assert seen["c"] == {"x": 5, "y": 1}
        # b stops heartbeating (dies): once its registration expires, its count is dropped
        while seen["c"] != {"x": 3, "y": 1}:
            await a.beat()
            await c.beat()
            await c.sync_peers()
            await asyncio.sleep(0.1)
    finally:
        for state in (a, c):
            await state.aclose()
        await b._client.aclose()
