"""Connect errors fail over to another healthy backend; an engine's own 503 is a busy
signal, not a failure; /v1/models, /readyz follow health."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.backends.pool import BackendPool
from gateway.config.schema import HealthConfig
from gateway.forward.upstream import upstream_body
from policies.backends import Health
from tests.unit.gateway.conftest import auth, in_process, outcomes, post_refused
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config

CHAT = "/v1/chat/completions"
TWO_BACKENDS = [
    {"name": "a", "url": "http://a.test", "models": ["tiny"], "max_num_seqs": 1},
    {"name": "b", "url": "http://b.test", "models": ["tiny", "small"], "max_num_seqs": 1},
]


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_connect_error_fails_over_to_another_backend(fleet: FakeFleet) -> None:
    fleet.backends["a"].mode = "refuse"
    async with in_process(make_config(backends=TWO_BACKENDS), fleet) as h:
        responses = [await h.client.post(CHAT, headers=auth(), json=_body()) for _ in range(4)]
        assert [r.status_code for r in responses] == [200] * 4
        assert len(fleet.backends["b"].requests) == 4
        stats = h.ctx.scheduler.stats()
        assert stats.in_flight == 0 and stats.charged_tokens == stats.released_tokens


def test_connect_errors_take_a_backend_down_only_after_a_streak() -> None:
    pool = BackendPool(
        make_config().backends,
        clock=lambda: 0.0,
        health=HealthConfig(failures_to_down=2),
        connect_timeout_s=1.0,
        read_timeout_s=1.0,
    )
    pool.note_connect_error("a")
    pool.note_success("a")
    pool.note_connect_error("a")
    assert pool.health("a") is Health.HEALTHY
    pool.note_connect_error("a")
    assert pool.health("a") is Health.DOWN


async def test_every_backend_refusing_ends_in_one_503(fleet: FakeFleet) -> None:
    for backend in fleet.backends.values():
        backend.mode = "refuse"
    async with in_process(make_config(backends=TWO_BACKENDS), fleet) as h:
        r = await h.client.post(CHAT, headers=auth(), json=_body())
        assert r.status_code == 503
        assert r.headers["x-sluicegate-reason"] == "no_healthy_backend"
        assert int(r.headers["retry-after"]) >= 1
        assert h.ctx.scheduler.stats().in_flight == 0
        counted = outcomes(h.ctx.metrics)
        assert "rejected" in counted and "completed" not in counted


async def test_engine_busy_everywhere_is_429_without_marking_down(config, fleet) -> None:
    fleet.backends["a"].mode = "busy"
    async with in_process(config, fleet) as h:
        r = await post_refused(h, _body(), 429, "overloaded")
        assert int(r.headers["retry-after"]) >= 1
        assert len(fleet.backends["a"].requests) == 1  # not hammered again at once
        assert h.ctx.pool.health("a").value == "healthy"
        assert h.ctx.scheduler.stats().in_flight == 0


@pytest.mark.parametrize(("mode", "status"), [("busy", 429), ("refuse", 503)])
async def test_the_gateways_own_refusals_spread_their_retry_after(
    fleet: FakeFleet, mode: str, status: int
) -> None:
    """Every backend busy, or none reachable: the policy's jitter applies there too."""
    fleet.backends["a"].mode = mode
    config = make_config(health={"failures_to_down": 1000})  # stays up: the gateway refuses
    async with in_process(config, fleet) as h:
        millis = []
        for _ in range(40):
            r = await h.client.post(CHAT, headers=auth(), json=_body())
            assert r.status_code == status
            millis.append(int(r.headers["retry-after-ms"]))
        assert len(set(millis)) == 40 and max(millis) <= 60_000


@pytest.mark.parametrize(("busy", "free"), [("a", "b"), ("b", "a")])
async def test_busy_backend_is_avoided_for_the_next_attempt(busy: str, free: str) -> None:
    # Run with each backend busy in turn, so whichever the scheduler tries first, one of
    # the two runs goes through "busy, then another backend".
    fleet = FakeFleet(FakeBackend("a"), FakeBackend("b"))
    fleet.backends[busy].mode = "busy"
    async with in_process(make_config(backends=TWO_BACKENDS), fleet) as h:
        r = await h.client.post(CHAT, headers=auth(), json=_body())
        assert r.status_code == 200
        assert len(fleet.backends[free].requests) == 1
        assert len(fleet.backends[busy].requests) <= 1
        assert h.ctx.pool.health(busy).value == "healthy"
        assert h.ctx.scheduler.stats().in_flight == 0


async def test_models_and_readiness_follow_health(fleet: FakeFleet) -> None:
    async with in_process(make_config(backends=TWO_BACKENDS), fleet) as h:
        r = await h.client.get("/v1/models")
        assert sorted(m["id"] for m in r.json()["data"]) == ["small", "tiny"]
        assert (await h.client.get("/readyz")).status_code == 200
        fleet.backends["b"].healthy = False
        for _ in range(h.ctx.runtime.loaded.config.health.failures_to_down):
            await h.ctx.pool.probe_all()
        r = await h.client.get("/v1/models")
        assert [m["id"] for m in r.json()["data"]] == ["tiny"]
        fleet.backends["a"].healthy = False
        for _ in range(h.ctx.runtime.loaded.config.health.failures_to_down):
            await h.ctx.pool.probe_all()
        assert (await h.client.get("/readyz")).status_code == 503
        assert (await h.client.get("/healthz")).status_code == 200
        fleet.backends["a"].healthy = True
        await h.ctx.pool.probe_all()
        assert (await h.client.get("/readyz")).status_code == 200


def test_degraded_model_and_max_tokens_are_what_is_sent() -> None:
    body = upstream_body(_body(max_tokens=500), model="small", max_tokens=64, stream=True)
    sent = json.loads(body)
    assert sent["model"] == "small" and sent["max_tokens"] == 64
    assert sent["stream_options"] == {"include_usage": True}
