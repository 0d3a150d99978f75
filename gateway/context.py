"""Everything a request handler needs, in one object passed explicitly (no app.state)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.admission.dispatcher import Admission
from gateway.backends.pool import BackendPool
from gateway.config.schema import LoadedConfig
from gateway.front.auth import Authenticator
from gateway.metrics.exporter import GatewayMetrics
from gateway.metrics.records import RecordSink
from gateway.state.contract import SharedState
from gateway.state.local import LocalState
from policies.types import Clock, Usage, WorkEstimate


class Estimator(Protocol):
    """Token cost before any backend work; learns from actual usage (``TokenEstimator``)."""

    def estimate(
        self,
        model: str,
        prompt_chars: int,
        *,
        max_tokens: int | None = None,
        max_model_len: int | None = None,
        flow: Hashable | None = None,
    ) -> WorkEstimate: ...

    def observe(
        self,
        model: str,
        prompt_chars: int,
        usage: Usage,
        *,
        flow: Hashable | None = None,
        expected_output: int | None = None,
    ) -> None: ...


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
    estimator: Estimator
    metrics: GatewayMetrics
    records: RecordSink
    clock: Clock
    reloader: Any = None
    shared: SharedState = field(default_factory=LocalState)
    """Limits shared with other replicas (``state:``); ``LocalState`` for one replica."""
    full_policy: Any = None
    """The loaded policy; the scheduler runs its local share while Redis does not answer."""
    scraper: Any = None
    """The ``MetricsScraper`` when scraping is enabled (its loop runs in the lifespan)."""

    @property
    def scheduler(self) -> Any:
        return self.admission.scheduler
