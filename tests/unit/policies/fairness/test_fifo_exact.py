"""``fifo`` count by count: the live count after every operation (it decides when the deque
is rebuilt), arrival order, a handed-back entry first again, dead entries skipped."""

from __future__ import annotations

from policies.engine.dead_entries import SLACK
from policies.fairness.fifo import Fifo, FifoState
from tests.unit.policies.fairness.live_count import (
    assert_live_count_follows_push_pop_push_back_and_discard,
)
from tests.unit.policies.helpers import queued_entry


def test_the_live_count_follows_push_pop_push_back_and_discard() -> None:
    fifo, state = Fifo(None), FifoState()  # type: ignore[arg-type]
    assert_live_count_follows_push_pop_push_back_and_discard(fifo, state)


def test_the_deque_is_rebuilt_once_the_dead_outnumber_the_live_past_the_slack() -> None:
    fifo, state = Fifo(None), FifoState()  # type: ignore[arg-type]
    head = queued_entry(0, 0.0, 30.0)
    fifo.push(state, head, 0.0)
    gone = [queued_entry(i, 0.0, 30.0) for i in range(1, SLACK + 3)]
    for e in gone:
        fifo.push(state, e, 0.0)
    for e in gone[: SLACK + 1]:  # 67 held, 2 live at the end: 67 <= 2 x 2 + 64, kept
        fifo.discard(state, e)
        e.alive = False
    assert len(state.queue) == SLACK + 3 and state.live == 2
    fifo.discard(state, gone[-1])  # 67 > 2 x 1 + 64: rebuilt from the live ones
    gone[-1].alive = False
    assert list(state.queue) == [head] and state.live == 1
