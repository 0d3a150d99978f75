"""Dead queue entries, dropped lazily: when a structure must rebuild itself, and the two
heap operations the fairness policies share (the first current item, the rebuild).

The queue book and every fairness policy remove a leaving entry in O(1) by marking it dead
and dropping it when it reaches the front. A front that never moves (a tenant that stays
backlogged, an old request that never dispatches) would keep every dead entry behind it, so
each structure is rebuilt from its live entries once the dead outnumber the live by more
than ``SLACK``: memory stays below twice the live entries plus the slack, and a rebuild costs
less than twice the removals since the last one.
"""

from __future__ import annotations

import heapq

from policies.contracts import QueuedEntry

Item = tuple[float, int, int, QueuedEntry]
"""A heap item of a fairness policy: (key, seq, gen, entry). It is current while its entry
is alive and still at generation ``gen`` (a pop bumps the generation: copies go stale)."""

SLACK = 64
"""Dead entries a structure may hold beyond its live ones before it is rebuilt."""


def must_rebuild(held: int, live: int) -> bool:
    """Whether a structure holding ``held`` entries, ``live`` of them live, must be rebuilt."""
    return held > 2 * live + SLACK


def live_head(heap: list[Item]) -> QueuedEntry | None:
    """The entry of the heap's first current item, dropping the dead or stale ones before it."""
    while heap:
        _, _, gen, entry = heap[0]
        if entry.alive and entry.gen == gen:
            return entry
        heapq.heappop(heap)
    return None


def live_items(heap: list[Item], leaving: QueuedEntry) -> list[Item]:
    """The heap rebuilt from its current items, without those of ``leaving`` (an entry
    being discarded, not yet marked dead)."""
    kept = [
        item for item in heap if item[3] is not leaving and item[3].alive and item[3].gen == item[2]
    ]
    heapq.heapify(kept)
    return kept
