from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config.schema import GatewayConfig
from gateway.context import GatewayContext
from gateway.metrics.exporter import GatewayMetrics
from tests.unit.gateway.fakes import API_KEY, FakeBackend, FakeFleet, make_config


@dataclass
class Harness:
    app: FastAPI
    ctx: GatewayContext
    fleet: FakeFleet
    client: httpx.AsyncClient
    base_url: str

    def backend(self, name: str = "a") -> FakeBackend:
        return self.fleet.backends[name]


Factory = Callable[..., contextlib.AbstractAsyncContextManager[Harness]]


CHAT = "/v1/chat/completions"


def auth(key: str = API_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def chat_body(stream: bool = False, **extra: Any) -> dict[str, Any]:
    """A one-message chat request for the fake fleet's ``tiny`` model."""
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "tiny", "messages": messages, "stream": stream, **extra}


async def post_refused(
    h: Harness, body: dict[str, Any], status: int, reason: str
) -> httpx.Response:
    """``body`` posted as a chat request, refused by the gateway with ``status``: an
    ``overloaded`` error for ``reason``."""
    r = await h.client.post(CHAT, headers=auth(), json=body)
    assert r.status_code == status
    assert r.json()["error"]["type"] == "overloaded"
    assert r.headers["x-sluicegate-reason"] == reason
    return r


Series = dict[str, dict[tuple[tuple[str, str], ...], float]]


def series(metrics: GatewayMetrics) -> Series:
    """Sample name -> label set (sorted pairs) -> value, as Prometheus would read
    ``metrics``' exposition."""
    out: Series = defaultdict(dict)
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            out[s.name][tuple(sorted(s.labels.items()))] = s.value
    return out


def outcomes(metrics: GatewayMetrics) -> dict[str, float]:
    """The terminal outcomes counted so far, summed over tenants and classes; an outcome
    that never happened (its series exported at 0) is left out."""
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == "sluicegate_outcomes_total" and s.value:
                out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0.0) + s.value
    return out


async def wait_until(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    """Poll a condition with a bounded timeout (for state the test cannot await directly)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


async def hold_the_only_slot(h: Harness) -> tuple[Any, asyncio.Event]:
    """A stream that holds backend a's single slot until the returned gate is set; the
    caller closes the stream (``__aexit__``) after setting it."""
    gate = h.backend("a").gates[1] = asyncio.Event()
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ctx = h.client.stream("POST", "/v1/chat/completions", headers=auth(), json=body)
    await ctx.__aenter__()
    await wait_until(lambda: h.backend("a").sent == [0])
    return ctx, gate


async def queued_behind(h: Harness) -> asyncio.Future[httpx.Response]:
    """A non-stream chat request sent while ``hold_the_only_slot`` holds the slot, returned
    once the scheduler has queued it."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    waiting = asyncio.ensure_future(
        h.client.post("/v1/chat/completions", headers=auth(), json=body)
    )
    await wait_until(lambda: h.ctx.scheduler.stats().queued == 1)
    return waiting


@contextlib.asynccontextmanager
async def in_process(config: GatewayConfig, fleet: FakeFleet, **kw: Any) -> AsyncIterator[Harness]:
    app = create_app(config, transport=fleet.transport, background=False, **kw)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield Harness(app, app.state.ctx, fleet, client, "http://gw")


@contextlib.asynccontextmanager
async def over_loopback(
    config: GatewayConfig, fleet: FakeFleet, **kw: Any
) -> AsyncIterator[Harness]:
    """The gateway on a real uvicorn server on 127.0.0.1, in this event loop."""
    app = create_app(config, transport=fleet.transport, background=False, **kw)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    await wait_until(lambda: server.started, timeout=5.0)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5.0) as client:
            yield Harness(app, app.state.ctx, fleet, client, base)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 5.0)
        sock.close()


@pytest.fixture
def fleet() -> FakeFleet:
    return FakeFleet(FakeBackend("a"), FakeBackend("b"))


@pytest.fixture
def config() -> GatewayConfig:
    return make_config()
