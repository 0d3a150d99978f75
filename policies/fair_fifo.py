"""``fifo``: one queue in arrival order. No fairness; the baseline to compare against."""

from __future__ import annotations

from collections import deque

from policies.contracts import Allow, Fairness, NoParams, QueuedEntry


class Fifo(Fairness[deque[QueuedEntry], NoParams]):
    type_name = "fifo"

    def new_state(self) -> deque[QueuedEntry]:
        return deque()

    def push(self, state: deque[QueuedEntry], entry: QueuedEntry, now: float) -> None:
        state.append(entry)

    def pop(
        self, state: deque[QueuedEntry], now: float, allow: Allow | None = None
    ) -> QueuedEntry | None:
        while state:
            entry = state.popleft()
            if entry.alive:
                return entry
        return None

    def push_back(self, state: deque[QueuedEntry], entry: QueuedEntry) -> None:
        state.appendleft(entry)
