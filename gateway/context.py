"""Everything a request handler needs, in one object passed explicitly (no app.state)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.admission.dispatcher import Admission, SchedulerLike
from gateway.backends.pool import BackendPool
from gateway.config.schema import LoadedConfig
from gateway.forward.stall import StallBounds
from gateway.metrics.exporter import GatewayMetrics
from gateway.metrics.records import RecordSink
from gateway.replicas.contract import SharedState
from gateway.request.auth import Authenticator
from policies.estimate import TokenEstimator
from policies.policy_set import PolicySet
from policies.types import Clock

if TYPE_CHECKING:
    from gateway.tracing.provider import Tracing


class Reloading(Protocol):
    """The config file read again on SIGHUP or a change (``config.reload.Reloader``)."""

    def reload(self) -> bool: ...

    async def watch(self, interval_s: float) -> None: ...

    def install_sighup(self, loop: asyncio.AbstractEventLoop) -> bool: ...


class Scraping(Protocol):
    """The backends' ``/metrics`` read now (``backends.scrape.scraper.MetricsScraper``)."""

    async def scrape_once(self, name: str) -> bool: ...


@dataclass(frozen=True)
class Runtime:
    """The part of the config a reload swaps, as one reference."""

    loaded: LoadedConfig
    auth: Authenticator

    @property
    def version(self) -> str:
        return self.loaded.version


@dataclass
class GatewayContext:
    runtime: Runtime
    pool: BackendPool
    admission: Admission
    estimator: TokenEstimator
    """Token cost before any backend work; learns from actual usage."""
    metrics: GatewayMetrics
    records: RecordSink
    clock: Clock
    shared: SharedState
    """Limits shared with other replicas (``state:``); ``LocalState`` for one replica."""
    reloader: Reloading | None = None
    """Set by ``build_gateway`` when the config came from a file (SIGHUP and file changes)."""
    scraper: Scraping | None = None
    """The scraper when scraping is enabled (its loop runs beside the requests)."""
    full_policy: PolicySet | None = None
    """The loaded policy: its quotas are the global limits the shared state enforces; the
    scheduler runs their local share while a replica may be out (``for_mode``)."""
    stalls: StallBounds | None = None
    """The silence bounds of upstream responses, from each backend's measurements."""
    tracing: Tracing | None = None
    """The tracer when the ``tracing:`` section is on; None costs a request one check."""

    @property
    def scheduler(self) -> SchedulerLike:
        return self.admission.scheduler
