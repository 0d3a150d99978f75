"""``fifo``: one queue in arrival order. No fairness; the baseline to compare against."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from policies.contracts import Allow, Fairness, QueuedEntry
from policies.engine.dead_entries import must_rebuild
from policies.params import NoParams


@dataclass
class FifoState:
    queue: deque[QueuedEntry] = field(default_factory=deque)
    live: int = 0
    """Entries pushed and neither popped nor discarded."""


class Fifo(Fairness[FifoState, NoParams]):
    type_name = "fifo"

    state_model = FifoState

    def push(self, state: FifoState, entry: QueuedEntry, now: float) -> None:
        state.queue.append(entry)
        state.live += 1

    def pop(self, state: FifoState, now: float, allow: Allow | None = None) -> QueuedEntry | None:
        queue = state.queue
        while queue:
            entry = queue.popleft()
            if entry.alive:
                state.live -= 1
                return entry
        return None

    def push_back(self, state: FifoState, entry: QueuedEntry) -> None:
        state.queue.appendleft(entry)
        state.live += 1

    def discard(self, state: FifoState, entry: QueuedEntry) -> None:
        """``entry`` leaves unpopped (the caller marks it dead after this); it stays in the
        deque until it reaches the front, so the deque is rebuilt from live entries by the
        rule of ``policies/engine/dead_entries.py``."""
        state.live -= 1
        if must_rebuild(len(state.queue), state.live):
            state.queue = deque(e for e in state.queue if e is not entry and e.alive)
