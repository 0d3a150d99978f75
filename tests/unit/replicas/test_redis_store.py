"""The Redis state against a real redis-server: leases, buckets, failure and rejoin."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from gateway.config.schema import StateConfig
from gateway.replicas.contract import Grant, Refusal
from gateway.replicas.redis_store import RedisState
from policies.gates.quota_params import TenantLimits
from policies.types import Reason, RequestInfo, Usage, WorkEstimate
from tests.redis_server import RedisServer
from tests.unit.replicas.conftest import MakeReplica

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


async def beat_until_answered(state: RedisState) -> None:
    """Heartbeats until one succeeds (after a restart, each pooled connection fails once)."""
    await state.beat()
    while state.mode not in ("shared", "rejoining"):
        await state.beat()


@pytest.fixture
async def pair(redis_server: RedisServer, replica: MakeReplica) -> tuple[RedisState, RedisState]:
    """Two replicas sharing one Redis."""
    cfg = config(redis_server)
    states = [replica(cfg, f"replica-{i}") for i in (1, 2)]
    for state in states:
        await state.beat()
    return states[0], states[1]


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


async def _every_slot_held(
    server: RedisServer, replica: MakeReplica, holder: str, other: str
) -> tuple[RedisState, RedisState]:
    """Two replicas whose leases live 1 s unless renewed; the first holds all of CAP's slots."""
    cfg = config(server, lease_ttl_s=1.0, sync_interval_ms=100)
    first, second = replica(cfg, holder), replica(cfg, other)
    for i in range(3):
        assert isinstance(await first.admit(request(i), CAP), Grant)
    return first, second


async def test_a_dead_replicas_leases_expire_within_the_ttl(
    redis_server: RedisServer, replica: MakeReplica
) -> None:
    _dead, alive = await _every_slot_held(redis_server, replica, "dead", "alive")
    assert isinstance(await alive.admit(request(7), CAP), Refusal)
    # the dead replica never renews nor releases: its leases run out on Redis's clock
    while isinstance(await alive.admit(request(8), CAP), Refusal):
        await asyncio.sleep(0.05)


async def test_a_live_replica_keeps_its_leases_past_the_ttl(
    redis_server: RedisServer, replica: MakeReplica, redis_client: aioredis.Redis
) -> None:
    holder, other = await _every_slot_held(redis_server, replica, "holder", "other")
    t0 = (await redis_client.time())[0]
    while (await redis_client.time())[0] < t0 + 3:  # three TTLs on Redis's clock
        await holder.beat()
        await asyncio.sleep(0.1)
    assert isinstance(await other.admit(request(9), CAP), Refusal)


async def test_redis_down_gives_the_local_share_then_rejoins(
    redis_server: RedisServer, replica: MakeReplica
) -> None:
    modes: list[tuple[str, int]] = []
    cfg = config(redis_server, command_timeout_ms=100)
    state = replica(cfg, "r", on_mode=lambda m, n: modes.append((m, n)))
    peer = replica(cfg, "peer")
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
        if modes[-1][0] != "fallback":
            break
    # back, but the peer has not been heard since: the local share holds meanwhile
    assert modes[-1] == ("rejoining", 2)
    # the lease taken while Redis was away was written back by the heartbeat
    assert (await state.fleet())["tenant_leases"] == {"acme": 1}
    await beat_until_answered(peer)
    await state.beat()
    assert modes[-1] == ("shared", 2)


async def test_closed_refuses_quota_gated_work_while_redis_is_down(
    redis_server: RedisServer,
    replica: MakeReplica,
) -> None:
    cfg = config(redis_server, command_timeout_ms=100, on_failure="closed")
    state = replica(cfg, "r")
    redis_server.pause()
    first = await state.admit(request(1), CAP)
    assert isinstance(first, Refusal) and first.reason is Reason.TENANT_QUOTA
    assert await state.admit(request(2), None) is None  # no quota: nothing to refuse
    assert state.mode == "closed"


async def test_a_redis_that_lost_its_data_is_rebuilt_from_the_replicas(
    redis_server: RedisServer,
    replica: MakeReplica,
) -> None:
    cfg = config(redis_server)
    a = replica(cfg, "a")
    b = replica(cfg, "b")
    await a.beat()
    for i in range(3):
        assert isinstance(await a.admit(request(i), CAP), Grant)
    redis_server.restart()
    await beat_until_answered(b)  # b starts the new epoch first: a's leases are not back
    await beat_until_answered(a)
    assert isinstance(await b.admit(request(9), CAP), Refusal)


async def test_the_first_replica_back_keeps_its_local_share_until_every_replica_is_back(
    redis_server: RedisServer,
    replica: MakeReplica,
) -> None:
    """Those still in fallback hold leases Redis does not count: the first one back admits
    through Redis and within its local share until it has heard every replica since."""
    cfg = config(redis_server, command_timeout_ms=100)
    modes: list[tuple[str, int]] = []
    a = replica(cfg, "a", on_mode=lambda m, n: modes.append((m, n)))
    others = [replica(cfg, name) for name in ("b", "c")]
    states = [a, *others]
    for state in states:
        await state.beat()
    redis_server.pause()
    for i, state in enumerate(states):
        assert isinstance(await state.admit(request(i), CAP), Grant)
    assert [s.mode for s in states] == ["fallback"] * 3
    redis_server.resume()
    await beat_until_answered(a)
    assert modes[-1] == ("rejoining", 3)
    await beat_until_answered(others[0])
    await a.beat()
    assert modes[-1] == ("rejoining", 3)  # c has not been heard since a came back
    await beat_until_answered(others[1])
    for _ in range(100):  # heard in a later millisecond than a's rejoin
        await a.beat()
        if modes[-1][0] == "shared":
            break
    assert modes[-1] == ("shared", 3)
    assert (await a.fleet())["tenant_leases"] == {"acme": 3}  # every one written back


async def test_a_replica_not_back_within_the_ttl_is_counted_dead(
    redis_server: RedisServer,
    replica: MakeReplica,
    redis_client: aioredis.Redis,
) -> None:
    cfg = config(redis_server, command_timeout_ms=1000, lease_ttl_s=1.0, sync_interval_ms=100)
    a = replica(cfg, "a")
    gone = replica(cfg, "gone")
    await gone.beat()
    await a.beat()
    redis_server.pause()
    await a.beat()
    assert a.mode == "fallback"
    redis_server.resume()
    await beat_until_answered(a)
    assert (a.mode, a.replicas) == ("rejoining", 2)  # gone's heartbeat has expired
    t0 = (await redis_client.time())[0]
    while (await redis_client.time())[0] < t0 + 2:  # past one TTL on Redis's clock
        await a.beat()
        await asyncio.sleep(0.1)
    assert (a.mode, a.replicas) == ("shared", 1)


async def test_an_admission_that_finds_redis_lost_its_data_rejoins(
    redis_server: RedisServer,
    replica: MakeReplica,
    redis_client: aioredis.Redis,
) -> None:
    """A Redis that lost its data answers: its leases are gone, so the answer is not trusted
    and the replica enforces its local share until every replica has written its leases."""
    cfg = config(redis_server)
    a = replica(cfg, "a")
    b = replica(cfg, "b")
    for state in (a, b, a):
        await state.beat()
    assert isinstance(await a.admit(request(1), CAP), Grant)
    await redis_client.flushall()
    assert isinstance(await b.admit(request(2), CAP), Grant)
    assert (b.mode, b.failures) == ("fallback", 1)
    assert isinstance(await a.admit(request(3), CAP), Grant)
    assert a.mode == "fallback"
    await b.beat()
    await a.beat()
    assert (a.mode, b.mode) == ("rejoining", "rejoining")
    assert (await a.fleet())["tenant_leases"] == {"acme": 3}
    for _ in range(100):  # shared once each has heard the other since it came back
        if (a.mode, b.mode) == ("shared", "shared"):
            break
        await b.beat()
        await a.beat()
    assert (a.mode, b.mode) == ("shared", "shared")
    assert (await a.fleet())["tenant_leases"] == {"acme": 3}
    assert isinstance(await b.admit(request(4), CAP), Refusal)


async def test_replicas_share_their_in_flight_per_backend(
    redis_server: RedisServer, replica: MakeReplica
) -> None:
    cfg = config(redis_server, lease_ttl_s=1.0, sync_interval_ms=100)
    seen: dict[str, dict[str, int]] = {}

    def member(name: str, counts: dict[str, int]) -> RedisState:
        return replica(
            cfg,
            name,
            in_flight=lambda: counts,
            on_peers=lambda peers: seen.__setitem__(name, peers),
        )

    a, b, c = member("a", {"x": 3, "y": 1}), member("b", {"x": 2}), member("c", {})
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
