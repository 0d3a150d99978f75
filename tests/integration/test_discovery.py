"""A gateway whose backends come from Kubernetes discovery: the fake API server announces
emulators as the ready pods of an InferencePool (each on its own loopback address, all on
the pool's one target port, as pods are); the gateway routes to the ready ones, and stops
routing to one marked unready while it keeps running, whose stream in flight still ends
whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from emulator.embedded import EmbeddedEmulator, EmulatorSpec, start_emulator
from tests.integration.harness import (
    MODEL,
    Gateway,
    chat_body,
    engine_gauge,
    gateway_config,
    serve_gateway,
    wait_for,
)
from tests.unit.discovery.fake_apiserver import FakeApiServer, pod_object, pool_object

pytestmark = pytest.mark.emulator

NS = "inference"
LABELS = {"app": "emulated"}
SERVED = "vllm:request_success_total"
ADDRESSES = ("127.0.0.2", "127.0.0.3")


STREAM_TOKENS = 300
"""At the first pod's real-time speed (about 39 tokens/s a slot) a stream of this many
tokens lasts several seconds: longer than the second pod takes to join and the first to
leave."""


@pytest.fixture
def pods() -> Iterator[list[EmbeddedEmulator]]:
    """Two emulators on one port, at two loopback addresses; the first at real-time speed."""
    first = start_emulator(EmulatorSpec("rx9070xt", MODEL, speed=1.0), host=ADDRESSES[0])
    port = int(first.url.rsplit(":", 1)[1])
    started = [first]
    try:
        spec = EmulatorSpec("rx9070xt", MODEL, speed=20.0)
        started.append(start_emulator(spec, host=ADDRESSES[1], port=port))
        yield started
    finally:
        for emulator in started:
            emulator.stop()


def _announce(api: FakeApiServer, index: int, *, ready: bool) -> None:
    api.put_pod(
        pod_object(f"emu-{index}", ADDRESSES[index], labels=LABELS, namespace=NS, ready=ready)
    )


async def _served(pods: list[EmbeddedEmulator]) -> list[float]:
    return [await engine_gauge(p.url, SERVED) for p in pods]


async def _send(gw: Gateway, count: int) -> None:
    """One after another: where each goes is the question, not how many fit at once."""
    async with gw.client() as client:
        replies = [
            await client.post("/v1/chat/completions", json=chat_body(4)) for _ in range(count)
        ]
    assert [r.status_code for r in replies] == [200] * count


async def test_requests_follow_the_ready_pods(pods: list[EmbeddedEmulator], tmp_path: Path) -> None:
    api = FakeApiServer(namespace=NS)
    await api.start()
    try:
        port = int(pods[0].url.rsplit(":", 1)[1])
        api.put_pool(pool_object("emulated", NS, labels=LABELS, ports=[port]))
        _announce(api, 0, ready=True)
        _announce(api, 1, ready=False)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
        raw = gateway_config(
            [],
            {},
            discovery={
                "kubernetes": {
                    "inference_pool": "emulated",
                    "kubeconfig": str(kubeconfig),
                    "models": [MODEL],
                }
            },
        )
        del raw["backends"]
        async with serve_gateway(raw) as gw:
            assert gw.ctx.pool.names == ["emu-0"]  # the first list came before serving
            await _send(gw, 4)
            assert await _served(pods) == [4, 0]
            async with (
                gw.client() as client,
                client.stream(
                    "POST", "/v1/chat/completions", json=chat_body(STREAM_TOKENS, stream=True)
                ) as stream,
            ):
                lines = stream.aiter_lines()
                assert (await anext(lines)).startswith("data: ")  # emu-0 is streaming

                _announce(api, 1, ready=True)
                await wait_for(lambda: gw.ctx.pool.names == ["emu-0", "emu-1"], what="joined")
                await wait_for(lambda: _both_fresh(gw), what="emu-1 probed and scraped")

                _announce(api, 0, ready=False)  # its readiness probe fails; it keeps running
                await wait_for(lambda: gw.ctx.pool.names == ["emu-1"], what="emu-0 leaves")
                in_flight = gw.ctx.scheduler.stats().in_flight_by_backend
                assert in_flight.get("emu-0") == 1  # the stream outlived its pod's membership
                await _send(gw, 4)
                assert await _served(pods) == [4, 4]  # all to the pod that joined later

                events = [line async for line in lines if line.startswith("data: ")]
            assert events[-1] == "data: [DONE]"
            assert await _served(pods) == [5, 4]  # and it ended on emu-0, whole
    finally:
        await api.stop()


def _both_fresh(gw: Gateway) -> bool:
    views = gw.ctx.pool.snapshot().backends
    return len(views) == 2 and all(not v.stale and v.waiting is not None for v in views)
