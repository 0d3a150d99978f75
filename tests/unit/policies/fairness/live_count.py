"""The live-count walk that every queue of queued entries must pass (``fifo``, ``priority``):
the count after every push, pop, push-back and discard, which decides when it is rebuilt."""

from __future__ import annotations

from typing import Any

from tests.unit.policies.helpers import queued_entry


def assert_live_count_follows_push_pop_push_back_and_discard(queue: Any, state: Any) -> None:
    """Three entries through ``queue`` (a fairness plugin) and its empty ``state``: arrival
    order, a handed-back entry first again, a discarded one skipped once it is dead."""
    e1, e2, e3 = (queued_entry(i, 0.0, 30.0) for i in range(3))
    assert state.live == 0
    for e in (e1, e2, e3):
        queue.push(state, e, 0.0)
    assert state.live == 3
    assert queue.pop(state, 0.0) is e1 and state.live == 2
    queue.push_back(state, e1)
    assert state.live == 3
    queue.discard(state, e2)
    e2.alive = False
    assert state.live == 2
    assert queue.pop(state, 0.0) is e1 and queue.pop(state, 0.0) is e3 and state.live == 0
    assert queue.pop(state, 0.0) is None
