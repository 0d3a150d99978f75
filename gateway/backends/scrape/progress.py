"""Whether a backend's engine is making progress: its counters, scrape by scrape.

A busy engine advances its progress counters every step it completes (prompt and
generation tokens, the count of steps, preemptions, finished requests) and moves its KV
cache usage with every prefill chunk; a frozen one moves none of them, and a stopped
process stops answering /metrics at all. Timing one request cannot tell a frozen engine
from a busy one; these can (docs/robustness.md).

``EngineProgress`` keeps, per backend, when its scrapes last showed any of them move
(``advanced_at``), whether its scrapes answer, whether its newest one reported runnable
work, and its step time: the seconds between two scrapes that saw it move, divided by the
steps it completed between them, counted only when the first of the two saw it holding
work (an idle spell is not a slow step). ``step_s`` is the longest such time over the last
``window_s`` seconds: the slowest step lately (a long prefill's chunks included) is the one
the bound must allow for. Pure: times are passed in.

An engine that answers /metrics and reports no runnable work has not ended a step since a
new request reached it (vLLM publishes its gauges at the end of each step): its first step
with that request is running (a cold kernel path, measured at 96 s on a fresh vLLM-CPU
under load), or the request is not yet scheduled. Its counters cannot tell that step from a
hang, so no verdict is given (``unmoved_s`` is None) until it reports work or stops
answering.
"""

from __future__ import annotations

from collections import deque

from gateway.backends.scrape.sample import MetricsSample

PROGRESS_COUNTERS = (
    "prompt_tokens",
    "generation_tokens",
    "steps",
    "preemptions",
    "request_success",
)
"""``MetricsSample.counters`` keys (engine-agnostic; the metric names are in ``engines.py``)
whose every move is work done."""


def fingerprint(sample: MetricsSample) -> tuple[float | None, ...]:
    """What must stay equal between two scrapes of an engine making no progress."""
    counters = sample.counters
    return (*(counters.get(name) for name in PROGRESS_COUNTERS), sample.kv_cache_usage)


def _runnable_work(sample: MetricsSample) -> bool:
    """Running, or waiting for capacity (not deferred, e.g. for a grammar to compile)."""
    waiting = sample.waiting_by_reason.get("capacity", sample.waiting)
    return (sample.running or 0.0) + (waiting or 0.0) > 0.0


class EngineProgress:
    """When one backend's engine last moved, and how long its steps take lately."""

    __slots__ = ("_last", "_steps", "_window_s", "advanced_at", "answering", "runnable", "step_s")

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self.advanced_at: float | None = None
        """Clock seconds of the newest scrape that saw the engine move (or the first one
        ever read: a backend is taken to be progressing when first seen)."""
        self.answering = False
        """The newest scrape succeeded."""
        self.runnable = False
        """The newest successful scrape reported requests running or waiting for capacity."""
        self.step_s: float | None = None
        """The longest measured step over the window; None until one was measured."""
        self._last: tuple[float, tuple[float | None, ...], float | None, bool] | None = None
        """(at, fingerprint, step count, runnable work) of the newest scrape that moved."""
        self._steps: deque[tuple[float, float]] = deque()  # (at, seconds per step)

    def add(self, at: float, sample: MetricsSample) -> None:
        """A successful scrape at ``at`` (clock seconds)."""
        seen = fingerprint(sample)
        if all(value is None for value in seen):
            return  # this engine exports nothing that could show progress
        self.answering, self.runnable = True, _runnable_work(sample)
        steps = sample.counters.get("steps")
        last = self._last
        if last is not None and seen == last[1]:
            return
        if last is not None and last[3]:
            self._measure(at, at - last[0], steps, last[2])
        self.advanced_at = at
        self._last = (at, seen, steps, self.runnable)
        self._expire(at)

    def failed(self) -> None:
        """A scrape failed (no answer, an error status, a body we refuse): no progress shown."""
        self.answering = False

    def _measure(self, at: float, span_s: float, steps: float | None, before: float | None) -> None:
        if steps is None or before is None or steps <= before or span_s <= 0:
            return  # no step count, or the server restarted and its counters began again
        self._steps.append((at, span_s / (steps - before)))

    def _expire(self, now: float) -> None:
        samples = self._steps
        while len(samples) > 1 and samples[0][0] < now - self._window_s:
            samples.popleft()  # the newest measurement is kept however old it is
        self.step_s = max(s for _, s in samples) if samples else None

    def unmoved_s(self, now: float, held_s: float) -> float | None:
        """Seconds the engine has not moved while a request was on it for ``held_s``
        seconds: the shorter of the two. None when it cannot be said to hold work: never
        scraped, or answering and reporting no runnable work (see the module's doc)."""
        if self.advanced_at is None or (self.answering and not self.runnable):
            return None
        return min(held_s, now - self.advanced_at)
