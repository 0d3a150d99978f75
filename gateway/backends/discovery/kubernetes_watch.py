"""Follow an ``InferencePool`` and its ready pods with lightkube, and hand every new set of
backends to ``on_backends``.

One cycle: list the pool (by name) and its pods (by its label selector, in its namespace),
publish, then watch both from the versions listed. Every pod event publishes again (when the set of
backends changed). A cycle ends, and the next lists afresh at once, when a watch expired
(410 Gone, as an HTTP status or an ``ERROR`` event), the pool's selector or ports changed,
or ``resync_s`` passed. Any other failure (the API server unreachable, 5xx, 403, the pool
missing or unusable) waits a jittered, doubling backoff and tries again, and publishes
nothing meanwhile: the backends last known stay, never zero because the API failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod

from gateway.backends.discovery.inference_pool import PoolSpec, backends, pool_spec
from gateway.config.schema import BackendConfig, KubernetesDiscoveryConfig

log = logging.getLogger("sluicegate.discovery")

InferencePool = create_namespaced_resource(
    "inference.networking.k8s.io", "v1", "InferencePool", "inferencepools"
)
OnBackends = Callable[[list[BackendConfig]], None]
GONE = 410


class _Relist(Exception):
    """The watch cannot go on from where it is: list afresh now (no backoff)."""


class InferencePoolWatcher:
    """``run()`` follows the pool until cancelled; ``synced`` is set by the first list."""

    def __init__(
        self,
        settings: KubernetesDiscoveryConfig,
        on_backends: OnBackends,
        *,
        client: Callable[[], AsyncClient] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = self._settings = settings
        self._on_backends = on_backends
        self._make_client = client or (lambda: _client(settings))
        self._rng = rng or random.Random()
        self._pods: dict[str, dict[str, Any]] = {}
        self._published: list[BackendConfig] | None = None
        self.synced = asyncio.Event()
        self.failures = 0
        """API failures in a row (0 once a list succeeds)."""
        self.errors = 0
        """API failures in all (an expired watch is not one: it is relisted at once)."""
        self.lists = 0
        self._relists = 0
        """Relists in a row with no watch event between: the second and later back off."""

    async def run(self) -> None:
        client = self._make_client()
        try:
            while True:
                try:
                    await self._cycle(client)
                except _Relist as why:
                    log.info("discovery: listing afresh (%s)", why)
                    self._relists += 1
                    if self._relists > 1:  # relisting did not help: do not spin
                        await self._back_off(why, self._relists - 1)
                except Exception as exc:  # every API or decode failure: back off, keep all
                    self.failures += 1
                    self.errors += 1
                    await self._back_off(exc)
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _back_off(self, exc: Exception, attempt: int | None = None) -> None:
        s = self._settings
        n = self.failures if attempt is None else attempt
        delay = min(s.max_backoff_s, s.min_backoff_s * 2 ** (n - 1))
        delay *= self._rng.uniform(0.5, 1.0)
        kept = self.found
        log.warning(
            "discovery: %s; keeping the %d backend(s) known, next try in %.1f s",
            _describe(exc),
            kept,
            delay,
        )
        await asyncio.sleep(delay)

    async def _cycle(self, client: AsyncClient) -> None:
        s = self._settings
        namespace = s.namespace or client.namespace
        pools = client.list(
            InferencePool, namespace=namespace, fields={"metadata.name": s.inference_pool}
        )
        found = [pool async for pool in pools]
        if not found:
            raise LookupError(f"no InferencePool {s.inference_pool} in namespace {namespace}")
        spec = pool_spec(_as_dict(found[0]))
        listing = client.list(Pod, namespace=namespace, labels=_selector(spec))
        pods = {p.metadata.name: p.to_dict() async for p in listing if p.metadata}
        self._pods = {name: pod for name, pod in pods.items() if name}
        self.lists += 1
        self.failures = 0
        self._publish(spec)
        self.synced.set()
        try:
            async with asyncio.timeout(s.resync_s):
                await _first_to_end(
                    self._watch_pods(client, namespace, spec, listing.resourceVersion),
                    self._watch_pool(client, namespace, spec, pools.resourceVersion),
                )
        except TimeoutError:
            raise _Relist(f"resync after {s.resync_s:g} s") from None
        raise _Relist("a watch ended")

    async def _watch_pods(
        self, client: AsyncClient, namespace: str, spec: PoolSpec, version: str
    ) -> None:
        watch = self._watch(client, Pod, namespace, version, labels=_selector(spec))
        async for kind, pod in watch:
            name = pod.metadata.name if pod.metadata else None
            if name is None or kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                self._pods.pop(name, None)
            else:
                self._pods[name] = pod.to_dict()
            self._publish(spec)

    async def _watch_pool(
        self, client: AsyncClient, namespace: str, spec: PoolSpec, version: str
    ) -> None:
        name = self._settings.inference_pool
        watch = self._watch(
            client, InferencePool, namespace, version, fields={"metadata.name": name}
        )
        async for kind, pool in watch:
            if kind == "DELETED":
                raise LookupError(f"InferencePool {name} was deleted")
            if kind in ("ADDED", "MODIFIED") and pool_spec(_as_dict(pool)) != spec:
                raise _Relist("the pool's selector or ports changed")

    async def _watch(
        self, client: AsyncClient, resource: Any, namespace: str, version: str, **only: Any
    ) -> AsyncIterator[tuple[str, Any]]:
        """``resource``'s events from ``version`` on (``only``: the watch's label or field
        selector); each one shows the API server answering again, so relists start over."""
        events = client.watch(
            resource,
            namespace=namespace,
            resource_version=version,
            server_timeout=_server_timeout(self._settings),
            **only,
        )
        async for event in _relisting_on_gone(events):
            self._relists = 0
            yield event

    @property
    def found(self) -> int:
        """Backends published last (0 before the first list)."""
        return len(self._published or [])

    def _publish(self, spec: PoolSpec) -> None:
        found = backends(spec, self._pods.values(), self._settings)
        if found != self._published:
            self._published = found
            self._on_backends(found)


async def _relisting_on_gone(events: AsyncIterable[tuple[str, Any]]) -> Any:
    """The events, with an expired watch turned into ``_Relist``: a 410 ``Status`` in an
    ``ERROR`` event (HTTP 200), or HTTP 410 itself."""
    try:
        async for event in events:
            yield event
    except httpx2.HTTPStatusError as exc:
        if _status_code(exc) == GONE:
            raise _Relist("the watch expired (410 Gone)") from None
        raise


def _status_code(exc: httpx2.HTTPStatusError) -> int | None:
    if isinstance(exc, ApiError):
        code: int | None = exc.status.code
        return code
    return exc.response.status_code


async def _first_to_end(*jobs: Coroutine[Any, Any, None]) -> None:
    """Run ``jobs`` until the first ends; cancel the others; raise what it raised."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        task.result()


def _selector(spec: PoolSpec) -> dict[str, Any]:
    return dict(spec.labels)


def _as_dict(obj: Any) -> dict[str, Any]:
    """A generic resource (a dict whose ``metadata`` may be a model) as plain JSON data."""
    data: dict[str, Any] = obj.to_dict()
    return data


def _server_timeout(settings: KubernetesDiscoveryConfig) -> int:
    """Ask the API server to end each watch request before the resync does."""
    return max(1, int(settings.resync_s))


def _client(settings: KubernetesDiscoveryConfig) -> AsyncClient:
    """In-cluster (the service account), else ``$KUBECONFIG``, else ``~/.kube/config``;
    or the file the config names."""
    config = KubeConfig.from_file(settings.kubeconfig) if settings.kubeconfig else None
    return AsyncClient(config=config, namespace=settings.namespace)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        return f"API error {exc.status.code} {exc.status.reason or ''}: {exc.status.message}"
    return f"{type(exc).__name__}: {exc}"
