"""When the soak's rounds run, so that the whole soak ends by its deadline: a round's traffic
is cut short when a full round, its drain and its quiet point would not fit; the clients'
requests still open when the traffic stops get a bounded drain, then are cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Schedule:
    """Rounds against a deadline, in the seconds of one monotonic clock."""

    deadline: float
    """When the soak must have ended (its last quiet point taken)."""
    round_s: float
    """A round's traffic, when it fits."""
    drain_s: float
    """Longest wait, once a round's traffic has stopped, for the requests still open."""
    settle_s: float
    """Longest wait at a quiet point for the gateway to end what the clients left."""
    tail_s: float
    """A quiet point's part after settling (rest, samples, books): the longest measured so
    far, or a first guess."""

    def next_round(self, now: float) -> float | None:
        """When the next round's traffic stops, or None: not even half a round fits before
        the deadline, after the longest drain and quiet point it may need."""
        fits = self.deadline - now - self.drain_s - self.settle_s - self.tail_s
        if fits < self.round_s / 2:
            return None
        return now + min(self.round_s, fits)

    def quiet_point_tail(self, seconds: float) -> None:
        """One quiet point took ``seconds`` after settling."""
        self.tail_s = max(self.tail_s, seconds)


async def drained(
    tasks: Sequence[asyncio.Task[None]], until: float, clock: Callable[[], float]
) -> int:
    """Wait for ``tasks`` until ``until`` (``clock`` seconds), then cancel those still
    running; how many were cancelled."""
    pending: set[asyncio.Task[None]] = {t for t in tasks if not t.done()}
    if pending:
        _, pending = await asyncio.wait(pending, timeout=max(0.0, until - clock()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return len(pending)
