"""The backend pool following a discovered set of backends: a backend that stays keeps its
state, a new one is dispatched to, and one that leaves takes nothing new while the requests
already on it end normally (nothing lost)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.backends.pool import BackendPool
from gateway.config.schema import BackendConfig, HealthConfig
from policies.backends import Health
from tests.unit.gateway.conftest import auth, outcomes, over_loopback
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config

CHAT = "/v1/chat/completions"


def _backend(name: str, **extra: Any) -> BackendConfig:
    return BackendConfig(name=name, url=f"http://{name}.test", models=["tiny"], **extra)


def _pool(*names: str) -> BackendPool:
    return BackendPool(
        [_backend(n) for n in names],
        clock=lambda: 0.0,
        health=HealthConfig(failures_to_down=1),
        connect_timeout_s=1.0,
        read_timeout_s=1.0,
    )


async def test_a_backend_that_stays_keeps_its_state_and_a_new_one_joins() -> None:
    pool = _pool("a", "b")
    pool.note_connect_error("b")  # down after one failure
    changes: list[int] = []
    pool.on_change.append(lambda: changes.append(1))
    pool.set_backends([_backend("b"), _backend("c")])
    assert sorted(v.name for v in pool.snapshot().backends) == ["b", "c"]
    assert pool.health("b") is Health.DOWN  # the same backend, not a fresh one
    assert pool.health("c") is Health.HEALTHY
    assert changes == [1]  # the dispatcher is woken to use the new capacity
    pool.set_backends([_backend("b"), _backend("c")])
    assert changes == [1]  # nothing changed, nothing announced
    await pool.aclose()


async def test_a_backend_that_left_stays_reachable_until_nothing_is_on_it() -> None:
    pool = _pool("a", "b")
    busy = {"a": 1}
    pool.in_flight = lambda: busy
    upstream = pool.upstream("a")
    pool.set_backends([_backend("b")])
    assert [v.name for v in pool.snapshot().backends] == ["b"]
    assert pool.upstream("a") is upstream  # the request on it still finds its connections
    assert [c.name for c in pool.configs()] == ["b"]
    assert pool.config("a").url == "http://a.test"  # its endpoint, for a late response
    pool.note_success("a")
    busy.clear()
    pool.set_backends([_backend("b"), _backend("c")])
    assert "a" not in pool.names
    try:
        pool.upstream("a")
    except KeyError:
        pass
    else:
        raise AssertionError("a backend with nothing on it is forgotten")
    await pool.aclose()


async def test_a_changed_url_is_a_new_backend() -> None:
    pool = _pool("a")
    old = pool.client("a")
    pool.set_backends([BackendConfig(name="a", url="http://a2.test", models=["tiny"])])
    assert pool.client("a") is not old
    assert str(pool.client("a").base_url) == "http://a2.test"
    await pool.aclose()


async def test_declared_models_stay_known_with_no_backend() -> None:
    pool = _pool("a")
    pool.set_backends([], models=frozenset({"tiny", "big"}))
    assert pool.known_models() == {"tiny", "big"}
    assert pool.snapshot().backends == ()
    await pool.aclose()


async def test_a_stream_on_a_backend_that_leaves_ends_whole_and_new_work_goes_elsewhere() -> None:
    fleet = FakeFleet(FakeBackend("a"), FakeBackend("b"))
    held = asyncio.Event()
    fleet.backends["a"].gates[1] = held  # the stream waits after its first token
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 3,
    }
    async with over_loopback(make_config(), fleet) as h:
        async with h.client.stream("POST", CHAT, headers=auth(), json=body) as resp:
            chunks = resp.aiter_text()
            first = await anext(chunks)
            assert "t0" in first
            h.ctx.pool.set_backends([_backend("b", max_num_seqs=1)])  # a leaves
            again = await h.client.post(CHAT, headers=auth(), json={**body, "stream": False})
            assert again.status_code == 200
            assert len(fleet.backends["b"].requests) == 1
            held.set()
            rest = "".join([c async for c in chunks])
        assert rest.rstrip().endswith("data: [DONE]")
        assert [
            json.loads(line[6:])["choices"][0]["delta"]["content"]
            for line in (first + rest).splitlines()
            if line.startswith("data: {")
        ] == ["t0", "t1", "t2"]
        stats = h.ctx.scheduler.stats()
        assert stats.in_flight == 0 and stats.charged_tokens == stats.released_tokens
        counted = outcomes(h.ctx.metrics)
        assert "completed" in counted and "failed" not in counted
