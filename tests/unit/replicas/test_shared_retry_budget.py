"""The retry budget across replicas, against a real redis-server: retries are counted for
the fleet, first attempts of every replica count toward it, the floor counts once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from gateway.config.schema import StateConfig
from gateway.replicas.contract import Grant, Refusal
from gateway.replicas.redis_store import RedisState
from gateway.replicas.retry_share import retry_rule
from policies.gates.quota_params import TenantLimits
from policies.gates.retry_budget import RetryBudget
from policies.policy_set import PolicySet
from policies.registry import build_policy
from policies.shared_mode import SharedMode, for_mode
from policies.types import Reason, RequestInfo, WorkEstimate
from tests.redis_server import RedisServer
from tests.unit.replicas.conftest import MakeReplica


def budget(**parameters: Any) -> PolicySet:
    return build_policy({"gates": [{"type": "retry_budget", "parameters": parameters}]})


def request(n: int, retry: bool, tenant: str = "acme") -> RequestInfo:
    return RequestInfo(
        request_id=f"r{n}",
        tenant=tenant,
        workload_class="interactive",
        model="m",
        estimate=WorkEstimate(50, 50),
        arrival=0.0,
        is_retry=retry,
    )


Fleet = Callable[[PolicySet, int], list[RedisState]]


@pytest.fixture
def fleet(redis_server: RedisServer, replica: MakeReplica) -> Fleet:
    """``fleet(policy, n)``: n replicas sharing one Redis, each told the full policy."""
    cfg = StateConfig.model_validate(
        {"backend": "redis", "url": redis_server.url, "command_timeout_ms": 2000}
    )

    def make(policy: PolicySet, n: int) -> list[RedisState]:
        return [replica(cfg, f"replica-{i}", policy=lambda: policy) for i in range(n)]

    return make


async def outcomes(states: list[RedisState], retries: int, start: int = 100) -> list[str]:
    """``retries`` retries spread round robin over ``states``: granted or the reason."""
    seen = []
    for i in range(retries):
        answer = await states[i % len(states)].admit(request(start + i, retry=True), None)
        seen.append(answer.reason.value if isinstance(answer, Refusal) else "granted")
    return seen


async def test_the_floor_counts_once_for_the_fleet(fleet: Fleet) -> None:
    # 0.3 retries a second over 10 s: 3 retries for the fleet, not 3 per replica
    states = fleet(budget(ratio=0.5, window_s=10, min_retries_per_s=0.3), 3)
    seen = await outcomes(states, 5)
    assert seen == ["granted"] * 3 + ["retry_budget_exhausted"] * 2


async def test_first_attempts_on_every_replica_count_toward_the_budget(fleet: Fleet) -> None:
    a, b, c = fleet(budget(ratio=0.5, window_s=10), 3)
    for n in range(4):
        assert await a.admit(request(n, retry=False), None) is None  # no round trip
    for n in range(4, 6):
        assert await b.admit(request(n, retry=False), None) is None
    await a.sync_retries()
    await b.sync_retries()
    # 0.5 x (4 + 2) = 3 retries, whichever replica they reach; c saw no first attempt
    assert await outcomes([a, c], 4) == ["granted"] * 3 + ["retry_budget_exhausted"]
    refused = await c.admit(request(50, retry=True), None)
    assert isinstance(refused, Refusal) and refused.retry_after_s is not None
    assert 0 < refused.retry_after_s <= 10


async def test_unpublished_first_attempts_of_other_replicas_do_not_count(fleet: Fleet) -> None:
    a, b = fleet(budget(ratio=0.5, window_s=10), 2)
    for n in range(4):
        await a.admit(request(n, retry=False), None)
    assert await outcomes([b], 1) == ["retry_budget_exhausted"]  # a has not published yet
    await a.sync_retries()
    assert await outcomes([b], 3, start=200) == ["granted"] * 2 + ["retry_budget_exhausted"]


async def test_budgets_are_per_tenant(fleet: Fleet) -> None:
    a, b = fleet(budget(ratio=1.0, window_s=10), 2)
    await a.admit(request(1, retry=False, tenant="one"), None)
    await a.sync_retries()
    assert isinstance(await b.admit(request(2, retry=True, tenant="two"), None), Refusal)
    assert await b.admit(request(3, retry=True, tenant="one"), None) is None
    assert isinstance(await b.admit(request(4, retry=True, tenant="one"), None), Refusal)


async def test_a_retry_refused_by_the_quota_takes_nothing_from_the_budget(fleet: Fleet) -> None:
    a, b = fleet(budget(ratio=0.5, window_s=10, min_retries_per_s=0.1), 2)  # one retry
    one = TenantLimits(max_concurrent=1)
    held = await a.admit(request(1, retry=False), one)
    assert isinstance(held, Grant)
    refused = await b.admit(request(2, retry=True), one)
    assert refused == Refusal(Reason.TENANT_CONCURRENCY, None)
    a.release(held, None, served=False)
    await asyncio.gather(*a._tasks)
    assert isinstance(await b.admit(request(3, retry=True), one), Grant)  # the budget's one
    refused = await b.admit(request(4, retry=True), one)
    assert isinstance(refused, Refusal) and refused.reason is Reason.RETRY_BUDGET_EXHAUSTED


def floor(policy: PolicySet) -> float | None:
    rule = retry_rule(policy)
    return None if rule is None else rule.params.min_retries_per_s


def test_the_core_gate_leaves_when_shared_and_returns_divided_when_redis_fails() -> None:
    policy = budget(ratio=0.2, window_s=10, min_retries_per_s=0.9)
    shared = for_mode(policy, SharedMode.SHARED, 3)
    assert not any(isinstance(g.gate, RetryBudget) for g in shared.gates)
    assert floor(for_mode(policy, SharedMode.FALLBACK, 3)) == pytest.approx(0.3)
    assert floor(for_mode(policy, SharedMode.CLOSED, 3)) == pytest.approx(0.3)
    rule = retry_rule(for_mode(policy, SharedMode.FALLBACK, 3))
    assert rule is not None and rule.params.ratio == 0.2  # each holds ratio x its own firsts
    assert for_mode(policy, SharedMode.LOCAL, 1) is policy


async def test_a_retry_while_redis_hangs_is_left_to_the_local_share(
    redis_server: RedisServer, replica: MakeReplica
) -> None:
    cfg = StateConfig.model_validate(
        {"backend": "redis", "url": redis_server.url, "command_timeout_ms": 100}
    )
    modes: list[str] = []
    state = replica(
        cfg,
        "alone",
        on_mode=lambda m, _n: modes.append(m),
        policy=lambda: budget(ratio=0.5, min_retries_per_s=0.3),
    )
    await state.beat()
    redis_server.pause()
    try:
        answer = await state.admit(request(1, retry=True), None)
    finally:
        redis_server.resume()
    # no error reaches the request: the core's gate, its floor divided by N, decides it
    assert answer is None and modes == ["fallback"]
