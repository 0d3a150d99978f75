"""The backend pool: one pooled upstream client per backend, /health probes, fleet snapshots.

Health is ours (probes and connect errors); load signals come from the metrics scraper
(``SignalSource``) as a mapping of ``BackendView`` field names and are merged in as-is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Protocol

import httpx

from gateway.config.schema import BackendConfig, HealthConfig
from gateway.forward.connection_pool import UpstreamPool
from gateway.forward.memory_connection import memory_connector
from policies.fleet import BackendView, FleetSnapshot, Health
from policies.types import Clock

log = logging.getLogger("sluicegate.backends")
_VIEW_FIELDS = frozenset(f.name for f in fields(BackendView)) - {"name", "models", "health"}


SNAPSHOT_MAX_AGE_S = 0.05
"""How long ``snapshot()`` may reuse its backend views when nothing announced a change
(bounds how old ``signal_age_s`` can read; staleness flips and scrapes are exact)."""


class SignalSource(Protocol):
    """Live load signals per backend, keyed by ``BackendView`` field names.

    A source may also offer ``changes_at(backend) -> float | None``: the clock time at which
    ``signals`` will next answer differently on its own (a signal going stale), so cached
    views are rebuilt exactly then; a new scrape must be announced with
    ``BackendPool.invalidate``."""

    def signals(self, backend: str, now: float) -> Mapping[str, object]: ...


@dataclass
class _BackendState:
    config: BackendConfig
    client: httpx.AsyncClient
    upstream: UpstreamPool | None
    """The lean keep-alive pool completions go through (``gateway/forward/connection_pool.py``,
    chosen by measurement: docs/performance.md); None for https backends,
    whose completions go through ``client``."""
    health: Health = Health.HEALTHY
    failures: int = 0
    max_model_len: int | None = None
    went_down: asyncio.Future[None] | None = None
    """Done when the backend is marked down (a new one after it is healthy again)."""


def _lean_pool(
    b: BackendConfig, transport: httpx.AsyncBaseTransport | None, connect_s: float, read_s: float
) -> UpstreamPool | None:
    """The pool completions go through for an ``http://`` backend; an injected transport
    serves its connections in memory, so tests drive the very client production runs."""
    if not b.url.startswith("http://"):
        return None
    connect = None if transport is None else memory_connector(transport, b.url)
    return UpstreamPool(b.url, connect_timeout_s=connect_s, read_timeout_s=read_s, connect=connect)


class BackendPool:
    """Owns the upstream clients. ``snapshot()`` is cheap enough to call per request."""

    def __init__(
        self,
        backends: Sequence[BackendConfig],
        *,
        clock: Clock,
        health: HealthConfig,
        connect_timeout_s: float,
        read_timeout_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
        signals: SignalSource | None = None,
    ) -> None:
        self._clock = clock
        self._health = health
        self._signals = signals
        self._peer_in_flight: dict[str, int] = {}
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
        self._states = {
            b.name: _BackendState(
                b,
                httpx.AsyncClient(
                    base_url=b.url.rstrip("/"), timeout=timeout, limits=limits, transport=transport
                ),
                _lean_pool(b, transport, connect_timeout_s, read_timeout_s),
                max_model_len=b.max_model_len,
            )
            for b in backends
        }
        self.on_change: list[Callable[[], None]] = []
        """Called when any backend's health changes (the dispatcher re-polls)."""
        self._models = frozenset(m for s in self._states.values() for m in s.config.models)
        self._views: tuple[BackendView, ...] | None = None
        self._views_until = float("-inf")

    @property
    def names(self) -> list[str]:
        return list(self._states)

    def backend_configs(self) -> list[BackendConfig]:
        """The backends the pool serves now (their URLs name the Endpoint Picker's
        ``ip:port`` endpoints)."""
        return [s.config for s in self._states.values()]

    def client(self, backend: str) -> httpx.AsyncClient:
        return self._states[backend].client

    def upstream(self, backend: str) -> UpstreamPool | None:
        return self._states[backend].upstream

    def health(self, backend: str) -> Health:
        return self._states[backend].health

    def known_models(self) -> frozenset[str]:
        return self._models

    def healthy_models(self) -> dict[str, int | None]:
        """Model name → smallest known context limit, over backends that are not down."""
        out: dict[str, int | None] = {}
        for s in self._states.values():
            if s.health is Health.DOWN:
                continue
            for model in s.config.models:
                out[model] = _min_known(out.get(model), s.max_model_len)
        return out

    def model_limit(self, model: str) -> int | None:
        """The smallest known ``max_model_len`` among backends serving ``model``."""
        limit: int | None = None
        for s in self._states.values():
            if model in s.config.models:
                limit = _min_known(limit, s.max_model_len)
        return limit

    def snapshot(self) -> FleetSnapshot:
        """The fleet now. The views are cached (rebuilding them was a measurable share of
        each request): rebuilt after ``invalidate`` (a scrape landed), a health or model
        limit change, when a signal goes stale, and at least every ``SNAPSHOT_MAX_AGE_S``."""
        now = self._clock()
        views = self._views
        if views is None or now >= self._views_until:
            views = self._views = tuple(self._view(s, now) for s in self._states.values())
            self._views_until = self._next_change(now)
        return FleetSnapshot(now, views)

    def invalidate(self) -> None:
        """The signals changed (a scrape landed): the next snapshot rebuilds its views."""
        self._views = None

    def set_peer_in_flight(self, counts: Mapping[str, int]) -> None:
        """Other gateway replicas' requests in flight per backend (fleet mode)."""
        if counts != self._peer_in_flight:
            self._peer_in_flight = dict(counts)
            self._views = None

    def _next_change(self, now: float) -> float:
        until = now + SNAPSHOT_MAX_AGE_S
        changes_at = getattr(self._signals, "changes_at", None)
        if changes_at is not None:
            for name in self._states:
                at = changes_at(name)
                if at is not None and now < at < until:
                    until = at
        return until

    def _view(self, s: _BackendState, now: float) -> BackendView:
        extra: dict[str, object] = {}
        if self._signals is not None:
            extra = {
                k: v
                for k, v in self._signals.signals(s.config.name, now).items()
                if k in _VIEW_FIELDS
            }
        return BackendView(
            name=s.config.name,
            models=frozenset(s.config.models),
            health=s.health,
            max_num_seqs=s.config.max_num_seqs,
            max_model_len=s.max_model_len,
            peer_in_flight=self._peer_in_flight.get(s.config.name, 0),
            **extra,  # type: ignore[arg-type]
        )

    def down_signal(self, backend: str) -> asyncio.Future[None]:
        """A future done once ``backend`` is marked down (already done if it is)."""
        s = self._states[backend]
        if s.went_down is None or (s.went_down.done() and s.health is not Health.DOWN):
            s.went_down = asyncio.get_running_loop().create_future()
            if s.health is Health.DOWN:
                s.went_down.set_result(None)
        return s.went_down

    def note_connect_error(self, backend: str) -> None:
        """A request could not connect: counts like a failed probe (down after
        ``failures_to_down`` in a row), so one refused connection in a burst does not
        take a whole backend out."""
        s = self._states[backend]
        s.failures += 1
        if s.failures >= self._health.failures_to_down:
            self._set_health(s, Health.DOWN)

    def note_success(self, backend: str) -> None:
        """A response arrived: the connect-error streak is over."""
        self._states[backend].failures = 0

    async def probe_all(self) -> None:
        await asyncio.gather(*(self._probe(s) for s in self._states.values()))

    async def run_probes(self) -> None:
        while True:
            await self.probe_all()
            await asyncio.sleep(self._health.interval_s)

    async def _probe(self, s: _BackendState) -> None:
        try:
            resp = await s.client.get("/health", timeout=self._health.timeout_s)
            ok = resp.status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            s.failures = 0
            if s.max_model_len is None:
                s.max_model_len = await self._learn_model_len(s)
                self.invalidate()
            self._set_health(s, Health.HEALTHY)
            return
        s.failures += 1
        if s.failures >= self._health.failures_to_down:
            self._set_health(s, Health.DOWN)

    async def _learn_model_len(self, s: _BackendState) -> int | None:
        """vLLM lists ``max_model_len`` per model on /v1/models; take the smallest."""
        try:
            resp = await s.client.get("/v1/models", timeout=self._health.timeout_s)
            data = resp.json().get("data", []) if resp.status_code == 200 else []
            lens = [int(m["max_model_len"]) for m in data if m.get("max_model_len")]
        except (httpx.HTTPError, ValueError, TypeError, KeyError, AttributeError):
            return None
        return min(lens) if lens else None

    def _set_health(self, s: _BackendState, health: Health) -> None:
        if s.health is not health:
            log.warning("backend %s is now %s", s.config.name, health.value)
            s.health = health
            if health is Health.DOWN and s.went_down is not None:
                went_down, s.went_down = s.went_down, None
                if not went_down.done():
                    went_down.set_result(None)
            self.invalidate()
            for callback in self.on_change:
                callback()

    async def aclose(self) -> None:
        await asyncio.gather(*(s.client.aclose() for s in self._states.values()))
        await asyncio.gather(*(s.upstream.aclose() for s in self._states.values() if s.upstream))


def _min_known(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
