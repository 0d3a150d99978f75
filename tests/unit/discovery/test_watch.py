"""The InferencePool watcher against a fake API server at the HTTP layer (real list and
watch JSON, resourceVersions, 410 Gone): pods join and leave, watches that expire are
relisted, and an API server that fails never empties the backends."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from lightkube import AsyncClient, KubeConfig
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.backends.discovery.exposition import DiscoveryCollector
from gateway.backends.discovery.kubernetes_watch import InferencePoolWatcher
from gateway.config.schema import BackendConfig, KubernetesDiscoveryConfig
from tests.unit.discovery.fake_apiserver import FakeApiServer, pod_object, pool_object
from tests.unit.gateway.conftest import wait_until

NS = "inference"
LABELS = {"app": "vllm"}
WAIT_S = 10.0


@dataclass
class Rig:
    api: FakeApiServer
    watcher: InferencePoolWatcher
    published: list[list[str]] = field(default_factory=list)

    @property
    def names(self) -> list[str] | None:
        return self.published[-1] if self.published else None

    def pod(
        self, name: str, ip: str, *, ready: bool = True, labels: dict[str, str] = LABELS
    ) -> None:
        self.api.put_pod(pod_object(name, ip, labels=labels, namespace=NS, ready=ready))

    async def until(self, what: Callable[[], bool]) -> None:
        await wait_until(what, timeout=WAIT_S)

    def pod_lists(self) -> int:
        return sum(1 for r in self.api.requests if "/pods?" in r and "watch=" not in r)


@contextlib.asynccontextmanager
async def rig(*, pool: bool = True, **settings: float) -> AsyncIterator[Rig]:
    api = FakeApiServer(namespace=NS)
    await api.start()
    if pool:
        api.put_pool(pool_object("pool", NS, labels=LABELS, ports=[8000]))
    cfg = KubernetesDiscoveryConfig(
        inference_pool="pool",
        models=["llama"],
        min_backoff_s=0.01,
        max_backoff_s=0.05,
        **settings,  # type: ignore[arg-type]
    )
    published: list[list[str]] = []

    def on_backends(found: list[BackendConfig]) -> None:
        published.append([f"{b.name}@{b.url}" for b in found])

    watcher = InferencePoolWatcher(
        cfg,
        on_backends,
        rng=random.Random(7),
        client=lambda: AsyncClient(config=KubeConfig.from_dict(api.kubeconfig())),
    )
    task = asyncio.ensure_future(watcher.run())
    try:
        yield Rig(api, watcher, published)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.stop()


async def test_ready_pods_join_and_unready_or_deleted_ones_leave() -> None:
    async with rig() as r:
        r.pod("vllm-0", "10.1.0.7")
        r.pod("vllm-1", "10.1.0.8", ready=False)
        await r.until(lambda: r.names == ["vllm-0@http://10.1.0.7:8000"])
        assert r.watcher.synced.is_set()
        r.pod("vllm-1", "10.1.0.8")  # its readiness probe passes
        await r.until(lambda: r.names is not None and len(r.names) == 2)
        r.pod("vllm-0", "10.1.0.7", ready=False)
        await r.until(lambda: r.names == ["vllm-1@http://10.1.0.8:8000"])
        r.api.delete_pod("vllm-1")
        await r.until(lambda: r.names == [])
        r.pod("other", "10.1.0.9", labels={"app": "something-else"})
        r.pod("vllm-2", "10.1.0.10")
        await r.until(lambda: r.names == ["vllm-2@http://10.1.0.10:8000"])
        assert r.pod_lists() == 1  # all of it from one list and its watch


@pytest.mark.parametrize("gone_as_http", [False, True])
async def test_an_expired_watch_relists_and_sees_what_happened_meanwhile(
    gone_as_http: bool,
) -> None:
    async with rig() as r:
        r.api.gone_as_http = gone_as_http
        r.pod("vllm-0", "10.1.0.7")
        r.pod("vllm-1", "10.1.0.8")
        await r.until(lambda: r.names is not None and len(r.names) == 2)
        r.api.expire_history()  # the watches end; their versions are compacted away
        r.api.delete_pod("vllm-0")  # no watch is open to hear it: only a list can tell
        r.pod("vllm-2", "10.1.0.9")
        await r.until(
            lambda: r.names == ["vllm-1@http://10.1.0.8:8000", "vllm-2@http://10.1.0.9:8000"]
        )
        assert r.pod_lists() == 2
        assert r.watcher.errors == 0  # relisted at once, not counted as an API failure


async def test_an_api_server_that_fails_keeps_the_last_known_backends() -> None:
    async with rig() as r:
        r.pod("vllm-0", "10.1.0.7")
        r.pod("vllm-1", "10.1.0.8")
        await r.until(lambda: r.names is not None and len(r.names) == 2)
        before = list(r.published)
        r.api.failing = 503
        r.api.end_watches()
        await r.until(lambda: r.watcher.failures >= 3)  # retried, backing off
        assert r.published == before  # nothing published while it failed: none dropped
        assert _samples(r.watcher) == {
            "sluicegate_discovery_backends": 2.0,
            "sluicegate_discovery_failing": 1.0,
            "sluicegate_discovery_errors_total": float(r.watcher.errors),
            "sluicegate_discovery_lists_total": 1.0,
        }
        await r.api.stop()  # now unreachable altogether
        failures = r.watcher.failures
        await r.until(lambda: r.watcher.failures >= failures + 2)
        assert r.published == before


async def test_it_recovers_when_the_api_server_answers_again() -> None:
    async with rig() as r:
        r.pod("vllm-0", "10.1.0.7")
        await r.until(lambda: r.names == ["vllm-0@http://10.1.0.7:8000"])
        r.api.failing = 500
        r.api.end_watches()
        await r.until(lambda: r.watcher.failures >= 2)
        r.pod("vllm-1", "10.1.0.8")
        r.api.failing = None
        await r.until(lambda: r.names is not None and len(r.names) == 2)
        assert r.watcher.failures == 0


async def test_a_missing_pool_is_waited_for_and_its_pods_then_found() -> None:
    async with rig(pool=False) as r:
        r.pod("vllm-0", "10.1.0.7")
        await r.until(lambda: r.watcher.failures >= 2)
        assert r.published == [] and not r.watcher.synced.is_set()
        r.api.put_pool(pool_object("pool", NS, labels=LABELS, ports=[8000]))
        await r.until(lambda: r.names == ["vllm-0@http://10.1.0.7:8000"])


async def test_a_changed_selector_or_port_is_followed() -> None:
    async with rig() as r:
        r.pod("vllm-0", "10.1.0.7")
        r.pod("new-0", "10.1.0.8", labels={"app": "vllm-next"})
        await r.until(lambda: r.names == ["vllm-0@http://10.1.0.7:8000"])
        r.api.put_pool(pool_object("pool", NS, labels={"app": "vllm-next"}, ports=[9000]))
        await r.until(lambda: r.names == ["new-0@http://10.1.0.8:9000"])


async def test_a_deleted_pool_keeps_the_backends_known() -> None:
    async with rig() as r:
        r.pod("vllm-0", "10.1.0.7")
        await r.until(lambda: r.names == ["vllm-0@http://10.1.0.7:8000"])
        r.api.delete_pool("pool")
        await r.until(lambda: r.watcher.failures >= 2)
        assert r.names == ["vllm-0@http://10.1.0.7:8000"]


def _samples(watcher: InferencePoolWatcher) -> dict[str, float]:
    """What /metrics shows of the watcher, through the collector the gateway registers."""
    registry = CollectorRegistry()
    registry.register(DiscoveryCollector(watcher))
    text = generate_latest(registry).decode()
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.name.endswith("_created")
    }
