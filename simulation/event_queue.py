"""The future of a discrete-event simulation: events by time, those at the same time in the
order they were pushed (so that a seed replays the same run)."""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, TypeVar

T = TypeVar("T")


class EventQueue(Generic[T]):
    __slots__ = ("_heap", "_seen", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._seen: list[tuple[float, int]] = []
        """(time, sequence) of the events pushed as ``seen``, a subset of ``_heap``."""
        self._seq = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, at: float, event: T, *, seen: bool = True) -> None:
        """``event`` at ``at`` seconds; the sequence number breaks ties, never ``event``.
        ``seen=False``: handling it reads and changes only what pushed it (an engine's
        plain decode step), so ``next_seen_at`` looks past it."""
        seq = next(self._seq)
        heapq.heappush(self._heap, (at, seq, event))
        if seen:
            heapq.heappush(self._seen, (at, seq))

    def next_at(self) -> float:
        """The earliest event's time (infinity when none is left)."""
        return self._heap[0][0] if self._heap else float("inf")

    def next_seen_at(self) -> float:
        """The earliest time of an event pushed as ``seen`` (infinity when none is left)."""
        return self._seen[0][0] if self._seen else float("inf")

    def pop(self) -> tuple[float, T]:
        """The earliest event and its time."""
        at, seq, event = heapq.heappop(self._heap)
        if self._seen and self._seen[0][1] == seq:  # both heaps pop in (time, seq) order
            heapq.heappop(self._seen)
        return at, event


class WakeupAlarm:
    """The policy's next wake-up (``next_wakeup()``) as one event in the queue: a wake-up no
    earlier than the one still ahead needs no event of its own."""

    __slots__ = ("_armed",)

    def __init__(self) -> None:
        self._armed: float | None = None

    def arm(self, wake: float | None, now: float) -> float | None:
        """The time to push a wake-up event at, or None when none is needed."""
        if wake is None or wake <= now:
            return None
        if self._armed is not None and now < self._armed <= wake:
            return None
        self._armed = wake
        return wake
