"""Async jobs in the gateway, in process with fake backends and a clock the test moves:
a job holding a ticket is cancelled by DELETE and by shutdown with its ticket released; a
result over the byte bound ends its job as an error; a stream is run whole; a job never
overtakes a call already waiting."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.config.schema import GatewayConfig, load_config
from gateway.request.auth import key_digest
from tests.unit.gateway.conftest import Harness, auth, in_process, over_loopback, wait_until
from tests.unit.gateway.fakes import (
    API_KEY,
    OTHER_KEY,
    FakeBackend,
    FakeFleet,
    FakeSharedState,
    make_config,
)
from tests.unit.policies.helpers import ManualClock

CHAT = "/v1/chat/completions"
ASYNC = {**auth(), "prefer": "respond-async"}


def _config(**handoff: Any) -> GatewayConfig:
    quota = {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": 60}}}
    return make_config(
        policy={"gates": [quota], "ladder": {"steps": []}},
        async_jobs={"enabled": True, "retry_interval_s": 0.005, "max_pending_s": 86400, **handoff},
    )


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 40,
        **extra,
    }


async def _hand_off(h: Harness, clock: ManualClock, body: dict[str, Any]) -> str:
    """Spend the tenant's bucket, hand the next call off, then refill the bucket."""
    assert (await h.client.post(CHAT, headers=auth(), json=_body())).status_code == 200
    r = await h.client.post(CHAT, headers=ASYNC, json=body)
    assert r.status_code == 202, r.text
    clock.now += 3600.0
    return r.headers["location"]


def _outcomes(h: Harness, outcome: str) -> float:
    text = h.ctx.metrics.exposition().decode()
    prefix = f'sluicegate_outcomes_total{{class="interactive",outcome="{outcome}"'
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


@pytest.mark.parametrize("end", ["delete", "shutdown"])
async def test_a_running_job_is_cancelled_and_its_ticket_released(end: str) -> None:
    backend = FakeBackend("a")
    clock = ManualClock(100.0)
    async with in_process(_config(), FakeFleet(backend), clock=clock) as h:
        backend.mode = "ok"
        assert (await h.client.post(CHAT, headers=auth(), json=_body())).status_code == 200
        backend.mode = "hold"  # the job's answer never comes
        r = await h.client.post(CHAT, headers=ASYNC, json=_body())
        assert r.status_code == 202
        clock.now += 3600.0
        await wait_until(lambda: len(backend.requests) == 2)
        assert h.ctx.scheduler.stats().in_flight == 1
        if end == "delete":
            assert (await h.client.delete(r.headers["location"], headers=auth())).status_code == 204
            assert (await h.client.get(r.headers["location"], headers=auth())).status_code == 404
    assert h.ctx.scheduler.stats().in_flight == 0
    assert h.ctx.scheduler.stats().queued == 0
    assert _outcomes(h, "cancelled") == 1 and _outcomes(h, "completed") == 1
    jobs = h.app.state.async_jobs
    assert jobs is not None and jobs.store.pending() == 0


async def test_a_result_over_the_byte_bound_ends_the_job_as_an_error() -> None:
    clock = ManualClock(100.0)
    config = _config(max_result_bytes=64, max_total_result_bytes=64)
    async with in_process(config, FakeFleet(FakeBackend("a")), clock=clock) as h:
        location = await _hand_off(h, clock, _body())
        await wait_until(lambda: _outcomes(h, "failed") == 1)
        r = await h.client.get(location, headers=auth())
        assert r.status_code == 507
        assert r.json()["error"]["code"] == "async_result_too_large"
        assert h.ctx.scheduler.stats().in_flight == 0


async def test_a_stream_is_run_whole_and_answered_as_one_body() -> None:
    clock = ManualClock(100.0)
    backend = FakeBackend("a")
    async with in_process(_config(), FakeFleet(backend), clock=clock) as h:
        body = _body(stream=True, stream_options={"include_usage": True})
        location = await _hand_off(h, clock, body)
        await wait_until(lambda: _outcomes(h, "completed") == 2)
        sent = backend.requests[-1]
        assert "stream" not in sent and "stream_options" not in sent
        assert (await h.client.get(location)).status_code == 401
        r = await h.client.get(location, headers=auth())
        assert r.status_code == 200 and r.headers["x-sluicegate-async-status"] == "done"
        assert json.loads(r.content)["usage"]["completion_tokens"] == backend.tokens


async def test_without_the_handoff_enabled_the_header_changes_nothing() -> None:
    clock = ManualClock(100.0)
    config = _config(enabled=False)
    async with in_process(config, FakeFleet(FakeBackend("a")), clock=clock) as h:
        assert (await h.client.post(CHAT, headers=auth(), json=_body())).status_code == 200
        r = await h.client.post(CHAT, headers=ASYNC, json=_body())
        assert r.status_code == 429 and "preference-applied" not in r.headers


async def test_a_job_never_overtakes_a_call_already_waiting() -> None:
    """Even from a tenant in a higher priority band (the job's band is still above the
    waiting call's), a job waits until nobody is queued."""
    clock = ManualClock(100.0)
    backend = FakeBackend("a")
    tenants = [
        {"name": "acme", "api_key_sha256": [key_digest(API_KEY)], "priority": 5},
        {"name": "beta", "api_key_sha256": [key_digest(OTHER_KEY)]},
    ]
    quota = {"type": "tenant_quota", "parameters": {"tenants": {"acme": {"tokens_per_minute": 60}}}}
    fairness = {"type": "priority", "parameters": {"starvation_after_s": 1000}}
    policy = {
        "fairness": fairness,
        "gates": [quota],
        "queue": {"max_wait_s": 600},
        "ladder": {"steps": []},
    }
    config = make_config(
        tenants=tenants,
        policy=policy,
        async_jobs={"enabled": True, "retry_interval_s": 0.005, "max_pending_s": 86400},
    )
    beta = auth(OTHER_KEY)
    async with over_loopback(config, FakeFleet(backend), clock=clock) as h:
        assert (await h.client.post(CHAT, headers=auth(), json=_body())).status_code == 200
        gate = backend.gates[1] = asyncio.Event()
        holder = h.client.stream("POST", CHAT, headers=beta, json=_body(stream=True))
        await holder.__aenter__()
        await wait_until(lambda: backend.sent == [0])
        waiting = asyncio.ensure_future(
            h.client.post(CHAT, headers=beta, json=_body(messages=_say("waiting")))
        )
        await wait_until(lambda: h.ctx.scheduler.stats().queued == 1)
        r = await h.client.post(CHAT, headers=ASYNC, json=_body(messages=_say("job")))
        assert r.status_code == 202
        clock.now += 120.0  # acme's bucket is full again; the waiting call is still queued
        await asyncio.sleep(0.05)  # a runner that ignored the queue would submit by now
        gate.set()
        await holder.__aexit__(None, None, None)
        assert (await waiting).status_code == 200
        await wait_until(lambda: _outcomes(h, "completed") == 4)
    said = [req["messages"][0]["content"] for req in backend.requests]
    assert said[2:] == ["waiting", "job"]


def _say(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


class _BusyOnce(FakeBackend):
    async def handle(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle(request)
        if request.url.path.startswith("/v1/"):
            self.mode = "ok"
        return response


async def test_in_fleet_mode_a_job_holds_one_shared_grant_and_gives_it_back() -> None:
    """Refused by the shared limits, handed off, refused again, granted, refused by a busy
    engine, sent again: one grant taken, one given back."""
    backend = _BusyOnce("a", mode="busy")
    config = make_config(
        policy={"ladder": {"steps": []}}, async_jobs={"enabled": True, "retry_interval_s": 0.005}
    )
    async with in_process(config, FakeFleet(backend)) as h:
        shared = FakeSharedState(refusals=2)
        h.ctx.shared = shared
        r = await h.client.post(CHAT, headers=ASYNC, json=_body())
        assert r.status_code == 202 and r.headers["x-sluicegate-reason"] == "tenant_quota_exceeded"
        await wait_until(lambda: _outcomes(h, "completed") == 1)
        assert len(backend.requests) == 2
        assert shared.granted == shared.released == 1


async def test_a_reload_turns_the_handoff_on(tmp_path: Path) -> None:
    raw: dict[str, Any] = {
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest(API_KEY)]}],
        "backends": [{"name": "a", "url": "http://a.test", "models": ["tiny"]}],
        "scrape": {"enabled": False},
        "policy": {
            "gates": [
                {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": 60}}}
            ]
        },
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw))
    async with in_process(load_config(path), FakeFleet(FakeBackend("a")), config_path=path) as h:
        assert (await h.client.post(CHAT, headers=auth(), json=_body())).status_code == 200
        assert (await h.client.post(CHAT, headers=ASYNC, json=_body())).status_code == 429
        path.write_text(yaml.safe_dump({**raw, "async_jobs": {"enabled": True}}))
        assert h.ctx.reloader is not None and h.ctx.reloader.reload() is True
        r = await h.client.post(CHAT, headers=ASYNC, json=_body())
        assert r.status_code == 202, r.text
        assert (await h.client.delete(r.headers["location"], headers=auth())).status_code == 204
