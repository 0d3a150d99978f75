"""A discovered set of backends into the running gateway: the backend pool (what snapshots,
probes and completions see) and the metrics scraper (what it scrapes). The Kubernetes
client is imported only when discovery is configured."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.backends.pool import BackendPool
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeTarget
from gateway.config.schema import BackendConfig, KubernetesDiscoveryConfig

if TYPE_CHECKING:
    from gateway.backends.discovery.kubernetes_watch import InferencePoolWatcher

log = logging.getLogger("sluicegate.discovery")


def scrape_targets(backends: Sequence[BackendConfig]) -> list[ScrapeTarget]:
    """Each backend's ``/metrics`` (beside its API root)."""
    return [ScrapeTarget(b.name, b.url.rstrip("/") + "/metrics", b.max_num_seqs) for b in backends]


def apply_backends(
    pool: BackendPool,
    scraper: MetricsScraper | None,
    found: Sequence[BackendConfig],
    models: frozenset[str],
) -> None:
    pool.set_backends(found, models=models)
    if scraper is not None:
        scraper.set_targets(scrape_targets(found))


def kubernetes_discovery(
    settings: KubernetesDiscoveryConfig, pool: BackendPool, scraper: MetricsScraper | None
) -> InferencePoolWatcher:
    """The watcher that keeps ``pool`` and ``scraper`` on the InferencePool's ready pods.
    Its models are known from now on, so a request for one is answered 503 (no healthy
    backend) until the first pods are found, not 404."""
    from gateway.backends.discovery.kubernetes_watch import InferencePoolWatcher

    models = frozenset(settings.models)
    pool.set_backends([], models=models)
    return InferencePoolWatcher(
        settings, lambda found: apply_backends(pool, scraper, found, models)
    )


async def first_sync(watcher: InferencePoolWatcher, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the first list of pods; False (and a warning) if none."""
    try:
        async with asyncio.timeout(timeout_s):
            await watcher.synced.wait()
    except TimeoutError:
        log.warning("discovery: no list of pods after %.1f s; serving meanwhile", timeout_s)
        return False
    return True
