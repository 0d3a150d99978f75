"""The rebuild rule to the entry: a structure is rebuilt once it holds more than twice its live
entries plus 64, and the rebuilt heap holds exactly the current items less the leaving one."""

from __future__ import annotations

import heapq

from policies.engine.dead_entries import Item, live_items, must_rebuild
from tests.unit.policies.helpers import queued_entry


def test_a_rebuild_is_due_only_past_twice_the_live_plus_64() -> None:
    assert must_rebuild(2 * 3 + 64, 3) is False
    assert must_rebuild(2 * 3 + 65, 3) is True
    assert must_rebuild(64, 0) is False and must_rebuild(65, 0) is True


def test_the_rebuilt_heap_keeps_current_items_only_without_the_leaving_entry() -> None:
    entries = [queued_entry(i, float(i), 30.0) for i in range(5)]
    heap: list[Item] = []
    for e in entries:
        heapq.heappush(heap, (e.expires_at, e.seq, e.gen, e))
    entries[1].alive = False  # dead
    entries[2].gen += 1  # popped since: its item is stale
    kept = live_items(heap, entries[3])  # leaving, not yet marked dead
    assert sorted(item[3].seq for item in kept) == [0, 4]
    assert heapq.heappop(kept)[3] is entries[0]
