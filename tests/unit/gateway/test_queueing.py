"""Delayed requests wait on the dispatcher; rejections carry Retry-After; a queued client
that leaves is cancelled at once."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from tests.unit.gateway.conftest import (
    CHAT,
    auth,
    chat_body,
    hold_the_only_slot,
    in_process,
    over_loopback,
    post_refused,
    queued_behind,
    wait_until,
)
from tests.unit.gateway.fakes import make_config


async def test_delayed_request_is_dispatched_when_the_slot_frees(config, fleet) -> None:
    async with over_loopback(config, fleet) as h:
        holder, gate = await hold_the_only_slot(h)
        waiting = await queued_behind(h)
        gate.set()
        await holder.__aexit__(None, None, None)
        r = await asyncio.wait_for(waiting, 3.0)
        assert r.status_code == 200
        assert r.headers["x-sluicegate-queue-position"] == "1"
        assert r.headers["x-sluicegate-decision"] == "admit"
        assert "x-sluicegate-queue-wait-ms" in r.headers
        assert (
            'sluicegate_decisions_total{class="interactive",decision="delay"'
            in h.ctx.metrics.exposition().decode()
        )


async def test_queued_client_that_leaves_is_removed_at_once(config, fleet) -> None:
    async with over_loopback(config, fleet) as h:
        holder, gate = await hold_the_only_slot(h)
        waiting = await queued_behind(h)
        waiting.cancel()
        await wait_until(lambda: h.ctx.scheduler.stats().queued == 0)
        gate.set()
        await holder.__aexit__(None, None, None)
        await wait_until(lambda: h.ctx.scheduler.stats().in_flight == 0)
        assert len(h.backend("a").requests) == 1  # the cancelled one never reached a backend


async def test_queued_past_its_deadline_gets_429_with_retry_after(config, fleet) -> None:
    async with over_loopback(config, fleet) as h:
        holder, gate = await hold_the_only_slot(h)
        r = await h.client.post(
            CHAT, headers={**auth(), "x-request-deadline-ms": "50"}, json=chat_body()
        )
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "deadline_expired"
        _assert_retry_after(r.headers)
        assert r.headers["x-sluicegate-reason"] == "deadline_expired"
        gate.set()
        await holder.__aexit__(None, None, None)


async def test_quota_rejection_is_429_rate_limit_with_retry_after(fleet) -> None:
    gates = [
        {"name": "quota", "type": "tenant_quota", "parameters": {"default": {"max_concurrent": 1}}}
    ]
    config = make_config(policy={"gates": gates})
    async with over_loopback(config, fleet) as h:
        holder, gate = await hold_the_only_slot(h)
        r = await h.client.post(CHAT, headers=auth(), json=chat_body())
        assert r.status_code == 429, r.text
        assert r.json()["error"]["type"] == "rate_limit_exceeded"
        _assert_retry_after(r.headers)
        gate.set()
        await holder.__aexit__(None, None, None)
        assert h.ctx.scheduler.stats().queued == 0


async def test_no_healthy_backend_is_503_with_retry_after(config, fleet) -> None:
    fleet.backends["a"].mode = "refuse"
    async with in_process(config, fleet) as h:
        r = await post_refused(h, chat_body(), 503, "no_healthy_backend")
        _assert_retry_after(r.headers)
        assert h.ctx.scheduler.stats().in_flight == 0


def _assert_retry_after(headers: Any) -> None:
    seconds, millis = int(headers["retry-after"]), int(headers["retry-after-ms"])
    assert seconds >= 1 and millis >= 1
    assert seconds == max(1, math.ceil(millis / 1000))


async def test_two_live_requests_may_share_a_client_request_id(config, fleet) -> None:
    """X-Request-Id is the client's: a duplicate must neither crash nor leak a slot."""
    async with over_loopback(config, fleet) as h:
        same = {**auth(), "x-request-id": "agent-7-turn-3"}
        gate = h.backend("a").gates[1] = asyncio.Event()
        holder = h.client.stream("POST", CHAT, headers=same, json=chat_body(True))
        await holder.__aenter__()
        await wait_until(lambda: h.backend("a").sent == [0])
        second = asyncio.ensure_future(h.client.post(CHAT, headers=same, json=chat_body()))
        await wait_until(lambda: h.ctx.scheduler.stats().queued == 1)
        gate.set()
        await holder.__aexit__(None, None, None)
        r = await asyncio.wait_for(second, 3.0)
        assert r.status_code == 200
        assert r.headers["x-request-id"] == "agent-7-turn-3"
        await wait_until(lambda: h.ctx.scheduler.stats().in_flight == 0)
        assert h.ctx.scheduler.stats().queued == 0
