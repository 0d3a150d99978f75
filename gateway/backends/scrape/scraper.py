"""``MetricsScraper``: one task per backend polls its /metrics off the request path.

A garbage, huge or slow body can only make that backend's signals old (and so stale):
bodies are capped in bytes, every scrape has an overall deadline, and the request path
only ever reads the last derived result, which is a dictionary lookup.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

from gateway.backends.scrape.engines import ENGINES, EngineMetrics
from gateway.backends.scrape.parse import parse_narrow, wanted_names
from gateway.backends.scrape.progress import EngineProgress
from gateway.backends.scrape.sample import MetricsSample, extract
from gateway.backends.scrape.signals import DerivedSignals, Observation, SignalWindow
from gateway.backends.scrape.view import view_fields
from policies.types import Clock

log = logging.getLogger("sluicegate.scrape")

NO_COMPRESSION = {"accept-encoding": "identity"}
"""Backends sit on a near network: gzip would cost CPU on both sides to save bandwidth."""


class ScrapeError(Exception):
    """A /metrics response we refuse to use (status, size, or no known family)."""


class ScrapeShare(Protocol):
    """Several gateway replicas, one scraper per backend (``gateway/replicas/scrape_share.py``):
    the replica that leads a backend scrapes it and publishes what it read; the others take
    the published scrapes through ``MetricsScraper.ingest``."""

    def scrapes(self, name: str) -> bool:
        """This replica scrapes ``name`` itself (it leads it, or sharing is down)."""

    def scraped(self, name: str, sample: MetricsSample, at: float) -> None:
        """A scrape of this replica's succeeded (clock seconds ``at``)."""

    async def run(self) -> None:
        """Takes and renews the leads, reads the others' scrapes, until cancelled."""


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    name: str
    metrics_url: str
    max_num_seqs: int | None = None
    """From the backend's config; vLLM exports it in no metric."""
    engine: str = "vllm-0.32"


@dataclass(frozen=True, slots=True)
class ScrapeSettings:
    """Seconds and bytes. ``max_age_s`` None means 3 x ``interval_s``.

    Intervals of 0.25-1 s are the intended range: each scrape costs the backend ~11 ms of
    its API server's CPU (docs/signals.md), so faster buys little and costs them.
    """

    interval_s: float = 0.5
    window_s: float = 30.0
    timeout_s: float = 1.0
    max_body_bytes: int = 2 * 1024 * 1024
    max_age_s: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.interval_s <= 60.0 or self.timeout_s <= 0 or self.window_s <= 0:
            raise ValueError("interval_s, timeout_s and window_s must be positive")

    @property
    def period_s(self) -> float:
        """The longest one scrape takes to say something: its interval, or its deadline."""
        return max(self.interval_s, self.timeout_s)

    @property
    def stale_after_s(self) -> float:
        return self.max_age_s if self.max_age_s is not None else 3.0 * self.interval_s


@dataclass(slots=True)
class ScrapeState:
    """What the scraper knows about one backend; read by admin JSON and exposition."""

    target: ScrapeTarget
    engine: EngineMetrics
    window: SignalWindow
    progress: EngineProgress
    """When the engine was last seen moving, and its step time (``progress.py``)."""
    derived: DerivedSignals | None = None
    last_success_at: float | None = None
    last_attempt_at: float | None = None
    last_duration_s: float | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    failures_total: int = 0


class MetricsScraper:
    def __init__(
        self,
        client: httpx.AsyncClient,
        targets: Sequence[ScrapeTarget],
        *,
        clock: Clock,
        settings: ScrapeSettings | None = None,
        on_scrape: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings or ScrapeSettings()
        self._client, self._clock, self._on_scrape = client, clock, on_scrape
        self._states = {t.name: self._new_state(t) for t in targets}
        self._wanted = {name: wanted_names(s.engine) for name, s in self._states.items()}
        self._stop = asyncio.Event()
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._running = False
        self.share: ScrapeShare | None = None
        """Set in fleet mode: backends another replica leads are not scraped here."""

    def _new_state(self, target: ScrapeTarget) -> ScrapeState:
        engine = ENGINES.get(target.engine)
        if engine is None:
            raise ValueError(f"unknown engine {target.engine!r}; known: {sorted(ENGINES)}")
        window_s = self.settings.window_s
        return ScrapeState(target, engine, SignalWindow(window_s), EngineProgress(window_s))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._states)

    def state(self, name: str) -> ScrapeState | None:
        return self._states.get(name)

    def signals(self, name: str, now: float) -> dict[str, object]:
        """``BackendView`` field name → value for ``name`` at ``now`` (clock seconds).

        ``{}`` for a backend this scraper does not watch; otherwise always has ``stale``.
        """
        state = self._states.get(name)
        if state is None:
            return {}
        return view_fields(state.derived, now, self.settings.stale_after_s)

    def progress(self, name: str) -> EngineProgress | None:
        """``name``'s progress as its scrapes showed it (None: not watched here)."""
        state = self._states.get(name)
        return state.progress if state is not None else None

    def changes_at(self, name: str) -> float | None:
        """The first clock time at which ``signals(name, ...)`` turns stale on its own
        (None: no signal yet, so already stale until a scrape lands)."""
        state = self._states.get(name)
        if state is None or state.derived is None:
            return None
        return math.nextafter(state.derived.at + self.settings.stale_after_s, math.inf)

    def set_targets(self, targets: Sequence[ScrapeTarget]) -> None:
        """Scrape ``targets`` from now on (discovery): a new one is scraped at once (while
        ``run`` runs), one that left is no longer scraped and its signals are forgotten; one
        whose URL or engine changed starts afresh."""
        wanted = {t.name: t for t in targets}
        for name, state in list(self._states.items()):
            if wanted.get(name) != state.target:
                loop = self._loops.pop(name, None)
                if loop is not None:
                    loop.cancel()
                del self._states[name], self._wanted[name]
        for name, target in wanted.items():
            if name not in self._states:
                self._states[name] = self._new_state(target)
                self._wanted[name] = wanted_names(self._states[name].engine)
                if self._running:
                    self._start(name, 0.0)

    def _start(self, name: str, delay_s: float) -> None:
        self._loops[name] = asyncio.get_running_loop().create_task(self._loop(name, delay_s))

    async def run(self, *, scraped: bool = False) -> None:
        """Scrape every backend until ``stop()``; backends are staggered over one interval.
        ``scraped``: every backend was just scraped, so none is scraped again at once."""
        delays = first_delays(len(self._states), self.settings.interval_s, scraped=scraped)
        for name, delay in zip(self._states, delays, strict=True):
            self._start(name, delay)
        self._running = True
        try:
            await self._stop.wait()
            # each ends after its scrape; one cancelled by set_targets meanwhile is no error
            await asyncio.gather(*self._loops.values(), return_exceptions=True)
        finally:
            self._running = False
            loops = list(self._loops.values())
            self._loops.clear()
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    def stop(self) -> None:
        self._stop.set()

    async def _loop(self, name: str, initial_delay_s: float) -> None:
        if await self._stopped_within(initial_delay_s):
            return
        while True:
            started = self._clock()
            if self.share is None or self.share.scrapes(name):
                await self.scrape_once(name)
            elapsed = self._clock() - started
            if await self._stopped_within(max(0.0, self.settings.interval_s - elapsed)):
                return

    async def _stopped_within(self, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):  # not wait_for: see Admission._wait_for_work
                await self._stop.wait()
        except TimeoutError:
            return False
        return True

    async def scrape_once(self, name: str) -> bool:
        """One scrape of ``name``; True if it produced signals. Never raises."""
        state = self._states[name]
        started = state.last_attempt_at = self._clock()
        try:
            text = await self._fetch(state.target.metrics_url)
            # in a worker thread: a big body must not hold the event loop (the GIL is
            # handed back every few ms, so requests keep flowing)
            sample = await asyncio.to_thread(self._parse, state, text)
        except (ScrapeError, httpx.HTTPError, TimeoutError, UnicodeError) as exc:
            self._record_failure(state, f"{type(exc).__name__}: {exc}"[:200])
        except Exception as exc:  # a bug on one backend's body must not stop the others
            log.exception("scrape crashed", extra={"backend": name})
            self._record_failure(state, f"internal {type(exc).__name__}")
        else:
            done = self._clock()
            self._succeeded(state, Observation(done, sample))
            if self.share is not None:
                self.share.scraped(name, sample, done)
        state.last_duration_s = self._clock() - started
        if self._on_scrape is not None:
            self._on_scrape(name)
        return state.consecutive_failures == 0

    def ingest(self, name: str, sample: MetricsSample, at: float) -> bool:
        """A scrape another replica made of ``name`` at ``at`` (clock seconds): taken as if
        made here, so its age, not when it arrived, decides staleness. False: unknown
        backend, or not newer than what this replica has."""
        state = self._states.get(name)
        newest = state.window.newest if state is not None else None
        if state is None or (newest is not None and at <= newest.at):
            return False
        self._succeeded(state, Observation(at, sample))
        if self._on_scrape is not None:
            self._on_scrape(name)
        return True

    def _succeeded(self, state: ScrapeState, observation: Observation) -> None:
        state.window.add(observation)
        state.progress.add(observation.at, observation.sample)
        state.derived = state.window.derive(state.target.max_num_seqs)
        state.last_success_at, state.last_error = observation.at, None
        state.consecutive_failures = 0

    def _parse(self, state: ScrapeState, text: str) -> MetricsSample:
        wanted = self._wanted.get(state.target.name) or wanted_names(state.engine)
        raw = parse_narrow(text, wanted)
        if raw.truncated:
            raise ScrapeError(f"more than {raw.count} samples of known families")
        sample = extract(raw, state.engine)
        if sample.families_found == 0:
            raise ScrapeError(f"no {state.engine.engine} family in the body")
        return sample

    def _record_failure(self, state: ScrapeState, error: str) -> None:
        state.progress.failed()
        state.last_error = error
        state.consecutive_failures += 1
        state.failures_total += 1
        if state.consecutive_failures in (1, 10, 100):
            log.warning(
                "scrape failed",
                extra={
                    "backend": state.target.name,
                    "error": error,
                    "n": state.consecutive_failures,
                },
            )

    async def _fetch(self, url: str) -> str:
        limit, timeout = self.settings.max_body_bytes, self.settings.timeout_s
        async with (
            asyncio.timeout(timeout),
            self._client.stream("GET", url, timeout=timeout, headers=NO_COMPRESSION) as resp,
        ):
            if resp.status_code != 200:
                raise ScrapeError(f"HTTP {resp.status_code}")
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise ScrapeError(f"body of {declared} bytes exceeds {limit}")
            body = bytearray()
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise ScrapeError(f"body exceeds {limit} bytes")
        return body.decode("utf-8")


def first_delays(count: int, interval_s: float, *, scraped: bool) -> list[float]:
    """When each backend's scrape loop first scrapes: staggered evenly over one interval,
    from now (backend 0 at once) or, when all were ``scraped`` just now, one step later (the
    last one interval from now)."""
    step = interval_s / max(1, count)
    return [step * (i + scraped) for i in range(count)]
