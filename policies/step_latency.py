"""How slow the engine's steps run now, against how fast they run with a light batch.

vLLM observes ``vllm:inter_token_latency_seconds`` once per output token of every running
request: each observation is one engine step as a decoding sequence felt it. Its mean over
the last ``RECENT_S`` seconds is how long a step takes with the batch the engine holds now
(prefill chunks included); the lowest such mean over the last ``FLOOR_WINDOW_S`` seconds is
the step with the lightest batch seen lately. Their ratio is how much every sequence's
decode is slowed by the others in the batch: on an engine whose step cost is flat in the
batch (a GPU's decode, memory-bound) it stays near 1 until long prompts are prefilled,
whose chunks lengthen the steps they share; on one whose step grows with the batch's
context (a CPU's) it grows with every long sequence admitted.

Measured, never typed in: both values come from the engine's own histogram, and a window
with fewer than ``MIN_TOKENS`` observations says nothing (an idle engine has no step time).
The scraper keeps one per backend (``gateway/backends/scrape/signals.py``), and so does the
simulator's engine (``simulation/engine_adapter.py``), from the same totals: what
``BackendView.itl_s`` and ``itl_floor_s`` say is worked out in one place.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

RECENT_S = 1.0
"""The span of the current mean: a few steps of every running sequence, short enough to
follow the batch as long requests join and leave it."""
FLOOR_WINDOW_S = 900.0
"""How long a light-batch step time is remembered. Under contention longer than this the
floor is re-learnt from the contended steps (docs/policies.md, headroom)."""
MIN_TOKENS = 16


class Totals(Protocol):
    """The running totals of an inter-token latency histogram: seconds and observations
    (the scraper's ``Histogram``; the simulator's engines keep their own)."""

    @property
    def sum(self) -> float: ...

    @property
    def count(self) -> float: ...


class StepLatency:
    """The recent mean inter-token latency of one backend, and its floor."""

    __slots__ = ("_floor", "_points", "floor_s", "itl_s")

    def __init__(self) -> None:
        self.itl_s: float | None = None
        self.floor_s: float | None = None
        self._points: deque[tuple[float, float, float]] = deque()  # (at, sum, count)
        self._floor: deque[tuple[float, float]] = deque()  # (at, mean), means ascending

    def add(self, at: float, itl: Totals | None) -> None:
        """A scrape at ``at`` whose inter-token latency histogram is ``itl`` (None: absent)."""
        if itl is None:
            self._points.clear()
            self.itl_s = None
        else:
            self._points.append((at, itl.sum, itl.count))
            self.itl_s = self._recent(at)
            if self.itl_s is not None:
                self._remember(at, self.itl_s)
        self._expire(at)
        self.floor_s = self._floor[0][1] if self._floor else None

    def _recent(self, now: float) -> float | None:
        points = self._points
        while len(points) >= 2 and points[1][0] <= now - RECENT_S:
            points.popleft()  # keep one point at or before the span's start
        if len(points) < 2:
            return None
        _, old_sum, old_count = points[0]
        _, new_sum, new_count = points[-1]
        count, total = new_count - old_count, new_sum - old_sum
        if count < 0 or total < 0:
            while len(points) > 1:
                points.popleft()  # the server restarted: its histogram began again
            return None
        return total / count if count >= MIN_TOKENS else None

    def _remember(self, at: float, mean: float) -> None:
        floor = self._floor
        while floor and floor[-1][1] >= mean:
            floor.pop()  # a later, lower mean outlives it: it can never be the floor again
        floor.append((at, mean))

    def _expire(self, now: float) -> None:
        floor = self._floor
        while floor and floor[0][0] < now - FLOOR_WINDOW_S:
            floor.popleft()
