"""When the gateway gives up on an upstream response.

A frozen backend (a stopped process, a wedged engine) keeps its connections open and sends
nothing; without a bound its requests would wait for ``server.read_timeout_s``. Three things
end such a wait early (docs/robustness.md):

* the backend is marked down by the health probes (``cut_when_down``);
* the backend stopped making progress: its /metrics counters have not moved, or its scrapes
  have failed, for ``progress_factor`` x its measured step time (at least
  ``progress_floor_scrapes`` scrapes, each the longer of the scrape interval and its
  deadline) while this attempt was on it
  (``gateway/backends/scrape/progress.py``). This applies before the first byte and after;
  a request that is only slow (a long prefill, a deep engine queue, a cold kernel) is never
  cut while its engine moves;
* a stream's events stopped while its engine moves: silence between events beyond
  ``inter_token_factor`` x the p99 of the backend's measured gaps between upstream reads,
  at least ``min_inter_token_s`` (a per-request problem, measured from its own stream).

``first_token_s`` and ``inter_token_s`` add a fixed silence bound instead of the measured
ones; ``read_timeout_s`` bounds every silence.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from gateway.backends.scrape.progress import EngineProgress
from gateway.config.schema import StallConfig
from policies.types import Clock

SAMPLES = 512
"""Measurements kept per backend (the newest)."""
_RECOMPUTE_EVERY = 32

ProgressLeft = Callable[[float], float]
"""Given how long an attempt has been on its backend (seconds), how long until that backend
counts as stalled; <= 0 once it does."""


class _Quantile:
    """The p99 of the newest ``SAMPLES`` values, recomputed every ``_RECOMPUTE_EVERY`` new
    values (not per request)."""

    __slots__ = ("_fresh", "_p99", "_values")

    def __init__(self) -> None:
        self._values: deque[float] = deque(maxlen=SAMPLES)
        self._p99: float | None = None
        self._fresh = 0

    def add(self, value: float) -> None:
        self._values.append(value)
        self._fresh += 1
        if self._p99 is None or self._fresh >= _RECOMPUTE_EVERY:
            self._fresh = 0
            ordered = sorted(self._values)
            self._p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]

    @property
    def p99(self) -> float | None:
        return self._p99


class StallBounds:
    """Per backend: the inter-token measurements, and the bounds derived from them and
    from the backend's progress. ``progress`` is the scraper's lookup (None: no scraping,
    so only the silence bounds and the health cut apply); ``scrape_period_s`` the longer
    of the scrape interval and a scrape's deadline."""

    def __init__(
        self,
        config: StallConfig,
        read_timeout_s: float,
        *,
        progress: Callable[[str], EngineProgress | None] | None = None,
        scrape_period_s: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.read_timeout_s = read_timeout_s
        self._progress, self._period_s, self._clock = progress, scrape_period_s, clock
        self._gaps: dict[str, _Quantile] = {}
        self._floor_s = config.progress_floor_scrapes * scrape_period_s
        """The progress bound's floor (read on every attempt, so worked out once)."""

    def observe_gap(self, backend: str, seconds: float) -> None:
        self._gaps.setdefault(backend, _Quantile()).add(seconds)

    def first_token_s(self) -> float:
        """The silence bound before the first event: fixed, or the read timeout."""
        fixed = self.config.first_token_s
        return min(fixed, self.read_timeout_s) if fixed is not None else self.read_timeout_s

    def inter_token_s(self, backend: str) -> float:
        cfg = self.config
        if cfg.inter_token_s is not None:
            return min(cfg.inter_token_s, self.read_timeout_s)
        seen = self._gaps.get(backend)
        if seen is None or seen.p99 is None:
            return self.read_timeout_s
        bound = max(cfg.min_inter_token_s, cfg.inter_token_factor * seen.p99)
        return min(bound, self.read_timeout_s)

    def progress_bound_s(self, backend: str) -> float | None:
        """How long ``backend`` may hold work without moving before it is stalled: the
        configured multiple of its measured step time, at least the floor in scrapes (each
        the longer of the scrape interval and a scrape's deadline: a frozen backend shows
        itself only by failed scrapes, each failing at its deadline). None: its progress is
        not watched."""
        found = self._progress(backend) if self._progress is not None else None
        return None if found is None else self._bound_of(found)

    def _bound_of(self, found: EngineProgress) -> float:
        floor, step = self._floor_s, found.step_s
        return floor if step is None else max(floor, self.config.progress_factor * step)

    def progress_left(self, backend: str) -> ProgressLeft | None:
        """What a ``StallWatch`` asks about ``backend`` (None: progress is not watched)."""
        clock, lookup = self._clock, self._progress
        if clock is None or lookup is None or lookup(backend) is None:
            return None
        floor, bound_of = self._floor_s, self._bound_of

        def left(held_s: float) -> float:
            found = lookup(backend)  # looked up again: a changed target starts afresh
            if found is None:
                return floor  # ask again then
            quiet = found.unmoved_s(clock(), held_s)
            if quiet is None:
                return floor
            return bound_of(found) - quiet

        return left

    def measured(self, backend: str) -> dict[str, float | None]:
        """The measurements and bounds now (for the docs' figures and benchmarks)."""
        gaps, found = self._gaps.get(backend), self._progress and self._progress(backend)
        return {
            "inter_token_p99_s": gaps.p99 if gaps else None,
            "inter_token_bound_s": self.inter_token_s(backend),
            "step_s": found.step_s if found else None,
            "progress_bound_s": self.progress_bound_s(backend),
        }


class _Alarm:
    """One loop timer for every watch of a loop: it fires at the nearest of their deadlines
    and checks the watches then due, so a watch arms and disarms by a dict entry, not a
    timer of its own (each attempt arms one, and almost every attempt ends long before it
    is due). The timer is moved only when a deadline nearer than the armed one arrives; a
    fire that finds nothing due (the watch that set it was closed) arms at the nearest
    deadline left, if any."""

    __slots__ = ("_at", "_due", "_handle", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: dict[StallWatch, float] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf

    def arm(self, watch: StallWatch, at: float) -> None:
        self._due[watch] = at
        if at < self._at:
            if self._handle is not None:
                self._handle.cancel()
            self._handle, self._at = self._loop.call_at(at, self._fire), at

    def disarm(self, watch: StallWatch) -> None:
        self._due.pop(watch, None)

    def _fire(self) -> None:
        self._handle, self._at = None, math.inf
        due = self._due
        if not due:
            return
        now = self._loop.time()
        ready = [w for w, at in due.items() if at <= now]
        for watch in ready:
            del due[watch]
        for watch in ready:
            watch._check()  # may arm again
        if due and self._handle is None:
            at = min(due.values())
            self._handle, self._at = self._loop.call_at(at, self._fire), at


_alarm: _Alarm | None = None
"""The alarm of the loop that last made a watch (a watch keeps its own)."""


def _alarm_of(loop: asyncio.AbstractEventLoop) -> _Alarm:
    global _alarm
    alarm = _alarm
    if alarm is None or alarm._loop is not loop:
        alarm = _alarm = _Alarm(loop)
    return alarm


class StallWatch:
    """One upstream attempt's watchdog. ``cut`` is done when the attempt must end:
    ``reason`` says why: ``"gone"`` (the client left, while the handler still listens),
    ``"down"`` (health marked the backend down), ``"stalled"`` (the backend stopped making
    progress while this attempt was on it: ``progress``), ``"silent"`` (no event within
    the bound) or ``"ended"`` (the call's agent run ended: ``ended_by`` holds the result
    of ``ended``, its reason). ``bound_s`` None bounds no silence. One timer at the nearer
    of the two deadlines, not one per event: ``heard`` only notes the time (the loop's
    watches share one timer: ``_Alarm``)."""

    __slots__ = (
        "_alarm",
        "_armed",
        "_bound",
        "_hooks",
        "_loop",
        "_progress",
        "cut",
        "ended_by",
        "last",
        "paused",
        "reason",
        "started",
    )

    def __init__(
        self,
        bound_s: float | None,
        *,
        down: asyncio.Future[Any] | None,
        gone: asyncio.Future[Any] | None,
        ended: asyncio.Future[Any] | None = None,
        progress: ProgressLeft | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.cut: asyncio.Future[None] = self._loop.create_future()
        self.reason: str | None = None
        self.paused = False
        """Set while the relay hands events to the client: a slow reader is no stall."""
        self.started = self.last = self._loop.time()
        self._bound = bound_s
        self._progress = progress
        self._alarm = _alarm_of(self._loop)
        self._armed = False
        self.ended_by: Any = None
        hooks: list[tuple[asyncio.Future[Any], Callable[[asyncio.Future[Any]], None]]] = []
        for future, callback in (
            (down, self._on_down),
            (gone, self._on_gone),
            (ended, self._on_ended),
        ):
            if future is not None:
                future.add_done_callback(callback)
                hooks.append((future, callback))
        self._hooks = hooks
        """The futures watched, each with its callback: removed again by ``close``."""
        self._arm(self.started)

    def heard(self) -> float:
        """An event arrived: returns the silence it ended (seconds)."""
        now = self._loop.time()
        silence, self.last = now - self.last, now
        return silence

    def rebound(self, bound_s: float | None) -> None:
        """A new silence bound from now on (after the first event: the inter-token one)."""
        self._bound = bound_s
        if self._armed:
            self._alarm.disarm(self)
            self._armed = False
        if not self.cut.done():
            self._arm(self._loop.time())

    def _arm(self, now: float) -> None:
        """The timer at the nearer deadline: silence, or the backend's progress."""
        at = math.inf
        if self._bound is not None:
            at = self.last + self._bound
        if self._progress is not None:
            left = self._progress(now - self.started)
            due = now + left if left > 0.0 else now  # max(0, left), min(at, due): no C calls
            if due < at:
                at = due
        if at < math.inf:
            self._alarm.arm(self, at)
            self._armed = True

    def _check(self) -> None:
        """Due (the alarm has dropped it): cut, or arm again."""
        self._armed = False
        if self.cut.done():
            return
        now = self._loop.time()
        if self._progress is not None and self._progress(now - self.started) <= 0:
            self._fire("stalled")
            return
        if self._bound is not None:
            if self.paused:
                self.last = now
            elif now >= self.last + self._bound:
                self._fire("silent")
                return
        self._arm(now)

    def _on_down(self, _future: asyncio.Future[Any]) -> None:
        self._fire("down")

    def _on_gone(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled():  # cancelled = the handler stopped listening
            self._fire("gone")

    def _on_ended(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            self.ended_by = future.result()
            self._fire("ended")

    def _fire(self, reason: str) -> None:
        if not self.cut.done():
            self.reason = reason
            self.cut.set_result(None)

    def close(self) -> None:
        if self._armed:
            self._alarm.disarm(self)
            self._armed = False
        for future, callback in self._hooks:
            future.remove_done_callback(callback)
        self._hooks = []
        if not self.cut.done():
            self.cut.cancel()
