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
from policies.backends import BackendsSnapshot, BackendView, Health
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
    closed: bool = False
    """Its clients are closed (it was retired and nothing was left on it)."""


_CLIENT_LIMITS = httpx.Limits(max_connections=1024, max_keepalive_connections=256)


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
        self._transport = transport
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._states = {b.name: self._new_state(b) for b in backends}
        self._retired: dict[str, _BackendState] = {}
        self._closing: set[asyncio.Task[None]] = set()
        """Backends taken out by ``set_backends`` while requests may still be on them."""
        self.in_flight: Callable[[], Mapping[str, int]] = dict
        """Requests in flight per backend (the scheduler's count): a retired backend is
        forgotten once none is left on it."""
        self.on_change: list[Callable[[], None]] = []
        """Called when any backend's health changes, or the set of backends (the dispatcher
        re-polls)."""
        self._declared: frozenset[str] = frozenset()
        self._models = self._served_models()
        self._views: tuple[BackendView, ...] | None = None
        self._views_until = float("-inf")

    def _new_state(self, b: BackendConfig) -> _BackendState:
        connect_s, read_s = self._timeouts
        client = httpx.AsyncClient(
            base_url=b.url.rstrip("/"),
            timeout=httpx.Timeout(read_s, connect=connect_s),
            limits=_CLIENT_LIMITS,
            transport=self._transport,
        )
        upstream = _lean_pool(b, self._transport, connect_s, read_s)
        return _BackendState(b, client, upstream, max_model_len=b.max_model_len)

    def _served_models(self) -> frozenset[str]:
        return self._declared.union(*(s.config.models for s in self._states.values()))

    def _state(self, backend: str) -> _BackendState:
        """A backend in the pool, or one retired while requests may still be on it."""
        s = self._states.get(backend)
        return s if s is not None else self._retired[backend]

    @property
    def names(self) -> list[str]:
        return list(self._states)

    def configs(self) -> list[BackendConfig]:
        """The backends now (listed, or discovered: ``set_backends`` changes them), e.g. to
        map backend names to their ``ip:port`` endpoints."""
        return [s.config for s in self._states.values()]

    def config(self, backend: str) -> BackendConfig:
        """One backend's config, also of one that left with requests still on it."""
        return self._state(backend).config

    def client(self, backend: str) -> httpx.AsyncClient:
        return self._state(backend).client

    def upstream(self, backend: str) -> UpstreamPool | None:
        return self._state(backend).upstream

    def health(self, backend: str) -> Health:
        return self._state(backend).health

    def set_backends(
        self, backends: Sequence[BackendConfig], *, models: frozenset[str] = frozenset()
    ) -> None:
        """Make ``backends`` the pool (discovery); ``models`` stay known even while no
        backend serves them (a request for one is then refused as having no healthy
        backend, not as naming an unknown model). A backend that stays keeps its client,
        health and learned limits; a new one starts healthy, as at startup; one that left is
        out of every snapshot from now on, so nothing new is dispatched to it, while the
        requests already on it run to their end through its connections (each connection
        closes when its response ends)."""
        wanted = {b.name: b for b in backends}
        self._declared = models
        if wanted == {n: s.config for n, s in self._states.items()}:
            self._models = self._served_models()
            return
        for name in [n for n, s in self._states.items() if wanted.get(n) != s.config]:
            self._retire(self._states.pop(name))
        for name, b in wanted.items():
            if name not in self._states:
                self._states[name] = self._new_state(b)
        self._forget_idle_retired()
        self._models = self._served_models()
        log.warning("backends now: %s", ", ".join(sorted(self._states)) or "none")
        self.invalidate()
        for callback in self.on_change:
            callback()

    def labelled(self) -> frozenset[str]:
        """The backends whose per-backend metric series are exported: those in the pool,
        and those that left while requests are still on them. A backend that left and has
        nothing on it any more has no series (pods come and go; their series must not
        pile up)."""
        busy = self.in_flight()
        return frozenset(self._states).union(n for n in self._retired if busy.get(n))

    def _retire(self, s: _BackendState) -> None:
        """Out of the pool: idle connections close now, busy ones when their response ends."""
        old = self._retired.pop(s.config.name, None)
        if old is not None:
            self._close_soon(old)
        self._retired[s.config.name] = s
        if s.upstream is not None:
            self._close_soon(s, client=False)

    def _forget_idle_retired(self) -> None:
        busy = self.in_flight()
        for name in [n for n in self._retired if not busy.get(n)]:
            self._close_soon(self._retired.pop(name))

    def _close_soon(self, s: _BackendState, *, client: bool = True) -> None:
        """Close a retired backend's connections without waiting: its idle keep-alive ones
        at once, one still serving a response when that response ends (the lean pool takes
        no connection back once closed). The httpx client serves probes and https
        completions: closed only once nothing is left on the backend (``client``)."""
        coros = [s.upstream.aclose()] if s.upstream is not None else []
        if client:
            coros.append(s.client.aclose())
            s.closed = True
        for coro in coros:
            task = asyncio.get_running_loop().create_task(coro)
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

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

    def snapshot(self) -> BackendsSnapshot:
        """The fleet now. The views are cached (rebuilding them was a measurable share of
        each request): rebuilt after ``invalidate`` (a scrape landed), a health or model
        limit change, when a signal goes stale, and at least every ``SNAPSHOT_MAX_AGE_S``."""
        now = self._clock()
        views = self._views
        if views is None or now >= self._views_until:
            views = self._views = tuple(self._view(s, now) for s in self._states.values())
            self._views_until = self._next_change(now)
        return BackendsSnapshot(now, views)

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
        extra: Mapping[str, object] = {}
        if self._signals is not None:
            extra = self._signals.signals(s.config.name, now)
            if not extra.keys() <= _VIEW_FIELDS:  # only then a copy without the others
                extra = {k: v for k, v in extra.items() if k in _VIEW_FIELDS}
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
        s = self._state(backend)
        if s.went_down is None or (s.went_down.done() and s.health is not Health.DOWN):
            s.went_down = asyncio.get_running_loop().create_future()
            if s.health is Health.DOWN:
                s.went_down.set_result(None)
        return s.went_down

    def note_connect_error(self, backend: str) -> None:
        """A request could not connect: counts like a failed probe (down after
        ``failures_to_down`` in a row), so one refused connection in a burst does not
        take a whole backend out."""
        s = self._state(backend)
        s.failures += 1
        if s.failures >= self._health.failures_to_down:
            self._set_health(s, Health.DOWN)

    def note_success(self, backend: str) -> None:
        """A response arrived: the connect-error streak is over."""
        self._state(backend).failures = 0

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
        except RuntimeError:
            if s.closed:  # retired and closed while this probe ran: nothing to learn
                return
            raise
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
        states = [*self._states.values(), *self._retired.values()]
        await asyncio.gather(*(s.client.aclose() for s in states))
        await asyncio.gather(*(s.upstream.aclose() for s in states if s.upstream))
        await asyncio.gather(*self._closing)


def _min_known(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
