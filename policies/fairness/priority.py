"""``priority``: strict priority bands (``RequestInfo.priority``, higher first), earliest
deadline first inside a band, with an anti-starvation guard.

The guard: a request that has waited ``starvation_after_s`` is served next whatever its
band, oldest first. So under sustained high-priority load a lower band still gets a turn
whenever its head has aged past the guard; its wait is bounded by roughly the guard plus
one dispatch, rather than unbounded. EDF uses each request's expiry: its deadline, or the
queue's ``max_wait_s`` bound when it has none.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from policies.contracts import Allow, Fairness, QueuedEntry
from policies.engine.dead_entries import Item, live_head, live_items, must_rebuild
from policies.fairness.priority_params import PriorityParams


@dataclass
class PriorityState:
    bands: dict[int, list[Item]] = field(default_factory=dict)
    by_age: list[Item] = field(default_factory=list)
    live: int = 0
    """Entries pushed and neither popped nor discarded (each is once in by_age)."""


class PriorityBands(Fairness[PriorityState, PriorityParams]):
    type_name = "priority"
    params_model = PriorityParams

    state_model = PriorityState

    def push(self, state: PriorityState, entry: QueuedEntry, now: float) -> None:
        self.push_back(state, entry)

    def push_back(self, state: PriorityState, entry: QueuedEntry) -> None:
        band = state.bands.setdefault(entry.request.priority, [])
        heapq.heappush(band, (entry.expires_at, entry.seq, entry.gen, entry))
        heapq.heappush(state.by_age, (entry.enqueued_at, entry.seq, entry.gen, entry))
        state.live += 1

    def discard(self, state: PriorityState, entry: QueuedEntry) -> None:
        """``entry`` leaves unpopped (the caller marks it dead after this); its items stay
        until they reach a head, so both heaps are rebuilt from live items by the rule of
        ``policies/engine/dead_entries.py``."""
        state.live -= 1
        if must_rebuild(len(state.by_age), state.live):
            state.by_age = live_items(state.by_age, entry)
            for priority, band in list(state.bands.items()):
                kept = live_items(band, entry)
                if kept:
                    state.bands[priority] = kept
                else:
                    del state.bands[priority]

    def pop(
        self, state: PriorityState, now: float, allow: Allow | None = None
    ) -> QueuedEntry | None:
        oldest = live_head(state.by_age)
        if oldest is not None and now - oldest.enqueued_at >= self.params.starvation_after_s:
            return _take(state, oldest)
        for priority in sorted(state.bands, reverse=True):
            entry = live_head(state.bands[priority])
            if entry is not None:
                _take(state, entry)
                # its by_age item is stale now but stays until it reaches that heap's head
                if must_rebuild(len(state.by_age), state.live):
                    state.by_age = live_items(state.by_age, entry)
                return entry
            del state.bands[priority]
        return None


def _take(state: PriorityState, entry: QueuedEntry) -> QueuedEntry:
    entry.gen += 1  # every heap copy is now stale; push_back makes fresh ones
    state.live -= 1
    return entry
