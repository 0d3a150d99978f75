"""How long a backend may stay silent before the gateway gives up on an upstream response.

A frozen backend (a stopped process, a wedged engine) keeps its connections open and sends
nothing; without a bound its requests would wait for ``server.read_timeout_s``. Two things
end such a wait early (docs/robustness.md):

* the backend is marked down by the health probes (``cut_when_down``);
* the upstream has been silent far longer than this backend was measured to be: before the
  first event, ``first_token_factor`` x the p99 of its measured time to first token (the
  gateway's own, dispatch to first event, and the backend's /metrics TTFT p90, whichever is
  larger), at least ``min_first_token_s``; between events, ``inter_token_factor`` x the p99
  of its measured gaps between upstream reads, at least ``min_inter_token_s``. Until a
  backend has been measured, only ``read_timeout_s`` bounds the silence.

Non-streamed responses send nothing until they are whole, so only the health cut applies.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from gateway.config.schema import StallConfig

SAMPLES = 512
"""Measurements kept per backend and kind (the newest)."""
_RECOMPUTE_EVERY = 32


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
    """Per backend: the measurements, and the silence bounds derived from them."""

    def __init__(self, config: StallConfig, read_timeout_s: float) -> None:
        self.config = config
        self.read_timeout_s = read_timeout_s
        self._first: dict[str, _Quantile] = {}
        self._gaps: dict[str, _Quantile] = {}

    def observe_first(self, backend: str, seconds: float) -> None:
        self._first.setdefault(backend, _Quantile()).add(seconds)

    def observe_gap(self, backend: str, seconds: float) -> None:
        self._gaps.setdefault(backend, _Quantile()).add(seconds)

    def first_token_s(self, backend: str, engine_ttft_p90_s: float | None = None) -> float:
        cfg = self.config
        if cfg.first_token_s is not None:
            return min(cfg.first_token_s, self.read_timeout_s)
        seen = self._first.get(backend)
        measured = [v for v in (seen.p99 if seen else None, engine_ttft_p90_s) if v is not None]
        if not measured:
            return self.read_timeout_s
        bound = max(cfg.min_first_token_s, cfg.first_token_factor * max(measured))
        return min(bound, self.read_timeout_s)

    def inter_token_s(self, backend: str) -> float:
        cfg = self.config
        if cfg.inter_token_s is not None:
            return min(cfg.inter_token_s, self.read_timeout_s)
        seen = self._gaps.get(backend)
        if seen is None or seen.p99 is None:
            return self.read_timeout_s
        bound = max(cfg.min_inter_token_s, cfg.inter_token_factor * seen.p99)
        return min(bound, self.read_timeout_s)

    def measured(self, backend: str) -> dict[str, float | None]:
        """The p99s and the bounds now (for /admin/backends and the docs' figures)."""
        first, gaps = self._first.get(backend), self._gaps.get(backend)
        return {
            "first_token_p99_s": first.p99 if first else None,
            "inter_token_p99_s": gaps.p99 if gaps else None,
            "first_token_bound_s": self.first_token_s(backend),
            "inter_token_bound_s": self.inter_token_s(backend),
        }


class StallWatch:
    """One upstream attempt's watchdog. ``cut`` is done when the attempt must end:
    ``reason`` says why: ``"gone"`` (the client left, while the handler still listens),
    ``"down"`` (health marked the backend down), ``"silent"`` (no event within the
    bound) or ``"ended"`` (the call's agent run ended: ``ended_by`` holds the result of
    ``ended``, its reason). ``bound_s`` None watches health only. One timer per bound
    period, not per event: ``heard`` only notes the time."""

    __slots__ = (
        "_bound", "_down", "_ended", "_gone", "_loop", "_timer", "cut", "ended_by", "last",
        "paused", "reason", "started",
    )  # fmt: skip

    def __init__(
        self, bound_s: float | None, *, down: asyncio.Future[Any] | None,
        gone: asyncio.Future[Any] | None, ended: asyncio.Future[Any] | None = None,
    ) -> None:  # fmt: skip
        self._loop = asyncio.get_running_loop()
        self.cut: asyncio.Future[None] = self._loop.create_future()
        self.reason: str | None = None
        self.paused = False
        """Set while the relay hands events to the client: a slow reader is no stall."""
        self.started = self.last = self._loop.time()
        self._bound = bound_s
        self._timer: asyncio.TimerHandle | None = None
        self._down, self._gone, self._ended = down, gone, ended
        self.ended_by: Any = None
        watched = ((down, self._on_down), (gone, self._on_gone), (ended, self._on_ended))
        for future, callback in watched:
            if future is not None:
                future.add_done_callback(callback)
        self._arm()

    def heard(self) -> float:
        """An event arrived: returns the silence it ended (seconds)."""
        now = self._loop.time()
        silence, self.last = now - self.last, now
        return silence

    def rebound(self, bound_s: float | None) -> None:
        """A new bound from now on (after the first event: the inter-token one)."""
        self._bound = bound_s
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.cut.done():
            self._arm()

    def _arm(self) -> None:
        if self._bound is not None:
            self._timer = self._loop.call_at(self.last + self._bound, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._bound is None or self.cut.done():
            return
        now = self._loop.time()
        if self.paused:
            self.last = now
        elif now >= self.last + self._bound:
            self._fire("silent")
            return
        self._arm()

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
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _unhook(self._down, self._on_down)
        _unhook(self._gone, self._on_gone)
        _unhook(self._ended, self._on_ended)
        self._down = self._gone = self._ended = None
        if not self.cut.done():
            self.cut.cancel()


def _unhook(future: asyncio.Future[Any] | None, callback: Callable[[Any], None]) -> None:
    if future is not None:
        future.remove_done_callback(callback)
