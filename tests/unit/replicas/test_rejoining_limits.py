"""While a replica runs the local share of a quota (rejoining, fallback), the shared state
is still asked for the global limit: the store counts the whole fleet against it."""

from __future__ import annotations

from gateway.replicas.quota_limits import quota_limits
from policies.shared_mode import SharedMode, for_mode
from tests.unit.gateway.conftest import CHAT, auth, chat_body, in_process
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, FakeSharedState, make_config


async def test_the_store_is_asked_for_the_global_limit_while_the_core_runs_its_share() -> None:
    quota = {"type": "tenant_quota", "parameters": {"default": {"max_concurrent": 9}}}
    config = make_config(policy={"gates": [quota]})
    async with in_process(config, FakeFleet(FakeBackend("a"))) as h:
        assert h.ctx.full_policy is not None
        h.ctx.scheduler.swap(for_mode(h.ctx.full_policy, SharedMode.REJOINING, 3))
        local = quota_limits(h.ctx.scheduler.policy, "acme")
        assert local is not None and local.max_concurrent == 3
        shared = FakeSharedState(mode=SharedMode.REJOINING)
        h.ctx.shared = shared
        r = await h.client.post(CHAT, headers=auth(), json=chat_body())
        assert r.status_code == 200, r.text
        assert [a.max_concurrent if a else None for a in shared.asked] == [9]
