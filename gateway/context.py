"""Everything a request handler needs, in one object passed explicitly (no app.state)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gateway.admission.dispatcher import Admission, SchedulerLike
from gateway.backends.pool import BackendPool
from gateway.config.schema import LoadedConfig
from gateway.forward.stall import StallBounds
from gateway.metrics.exporter import GatewayMetrics
from gateway.metrics.records import RecordSink
from gateway.replicas.contract import SharedState
from gateway.replicas.local import LocalState
from gateway.request.auth import Authenticator
from policies.estimate import FanOut
from policies.policy_set import PolicySet
from policies.types import Clock, Usage, WorkEstimate

if TYPE_CHECKING:  # these import this module's neighbours; only their types are needed here
    from gateway.backends.scrape.scraper import MetricsScraper
    from gateway.config.reload import Reloader


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
        fan_out: FanOut = ...,
        known_prompt_tokens: int = 0,
    ) -> WorkEstimate: ...

    def observe(
        self,
        model: str,
        prompt_chars: int,
        usage: Usage,
        *,
        flow: Hashable | None = None,
        expected_output: int | None = None,
        sequences: int = 1,
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
    reloader: Reloader | None = None
    """Set by ``create_app`` when the config came from a file (SIGHUP and file changes)."""
    scraper: MetricsScraper | None = None
    """The ``MetricsScraper`` when scraping is enabled (its loop runs in the lifespan)."""
    shared: SharedState = field(default_factory=LocalState)
    """Limits shared with other replicas (``state:``); ``LocalState`` for one replica."""
    full_policy: PolicySet | None = None
    """The loaded policy; the scheduler runs its local share while Redis does not answer."""
    stalls: StallBounds | None = None
    """The silence bounds of upstream responses, from each backend's measurements."""

    @property
    def scheduler(self) -> SchedulerLike:
        return self.admission.scheduler
