"""CoDel (RFC 8289) to the instant: the drop at exactly ``first_above_time``, each next drop at
exactly ``drop_next`` by the control law, the sojourn exactly at target counted as above, a
backlog of one still droppable, and the re-entry that resumes ``count - lastcount`` only when
that is above 1 and within exactly 16 intervals of the last ``drop_next``. Times start far from
0 so a sum cannot pass for a difference."""

from __future__ import annotations

import math

from policies.disciplines.codel import Codel, CodelState
from policies.disciplines.codel_params import CodelParams

TARGET, INTERVAL, T0 = 1.0, 10.0, 1000.0
HIGH, LOW = 2.0, 0.5  # sojourns above and below target


def codel() -> tuple[Codel, CodelState]:
    c = Codel(CodelParams(target_s=TARGET, interval_s=INTERVAL))
    return c, c.new_state()


def law(t: float, count: int) -> float:
    return t + INTERVAL / math.sqrt(count)


def entered(c: Codel, st: CodelState, at: float) -> bool:
    """A sample above target one interval before ``at`` and one at ``at`` (backlog 5)."""
    assert not c.should_drop(st, HIGH, at - INTERVAL, backlog=5)
    return c.should_drop(st, HIGH, at, backlog=5)


def test_the_first_drop_is_exactly_one_interval_after_the_sojourn_went_above() -> None:
    c, st = codel()
    assert not c.should_drop(st, HIGH, T0, backlog=5)
    assert st.first_above_time == T0 + INTERVAL
    assert not c.should_drop(st, HIGH, T0 + INTERVAL - 0.001, backlog=5)
    assert c.should_drop(st, HIGH, T0 + INTERVAL, backlog=5)
    assert (st.dropping, st.count, st.lastcount) == (True, 1, 1)
    assert st.drop_next == T0 + 2 * INTERVAL


def test_a_sojourn_exactly_at_target_counts_and_a_backlog_of_one_is_droppable() -> None:
    c, st = codel()
    assert not c.should_drop(st, TARGET, T0, backlog=1)
    assert c.should_drop(st, TARGET, T0 + INTERVAL, backlog=1)
    c, st = codel()
    assert not c.should_drop(st, HIGH, T0, backlog=5)
    assert not c.should_drop(st, HIGH, T0 + INTERVAL, backlog=0)  # alone: never dropped
    assert st.first_above_time == 0.0  # and the interval starts over
    assert not c.should_drop(st, HIGH, T0 + INTERVAL, backlog=5)


def test_each_next_drop_is_exactly_at_drop_next() -> None:
    c, st = codel()
    assert entered(c, st, T0)
    due = T0 + INTERVAL  # interval / sqrt(1)
    assert not c.should_drop(st, HIGH, due - 0.001, backlog=5)
    assert st.drop_next == due  # a sample that drops nothing moves nothing
    assert c.should_drop(st, HIGH, due, backlog=5)
    assert st.count == 2 and st.drop_next == due  # advanced only when the next is ok to drop
    for count in (2, 3, 4):
        due = law(due, count)
        assert not c.should_drop(st, HIGH, due - 0.001, backlog=5)
        assert st.drop_next == due
        assert c.should_drop(st, HIGH, due, backlog=5)
        assert st.count == count + 1


def test_a_sample_below_target_leaves_the_dropping_state() -> None:
    c, st = codel()
    assert entered(c, st, T0)
    assert not c.should_drop(st, LOW, T0 + 1.0, backlog=5)
    assert (st.dropping, st.advance_pending, st.first_above_time) == (False, False, 0.0)
    assert not c.should_drop(st, HIGH, T0 + 2.0, backlog=5)  # the interval starts over
    assert st.first_above_time == T0 + 2.0 + INTERVAL


def reentry_count(count: int, lastcount: int, drop_next: float, at: float) -> int:
    """``count`` after entering the dropping state at ``at``, the last cycle having left
    these numbers."""
    c = Codel(CodelParams(target_s=TARGET, interval_s=INTERVAL))
    st = CodelState(drop_next=drop_next, count=count, lastcount=lastcount)
    assert entered(c, st, at)
    assert st.drop_next == law(at, st.count) and st.lastcount == st.count
    return st.count


def test_reentry_resumes_the_last_cycles_drops_within_sixteen_intervals() -> None:
    assert reentry_count(3, 1, T0, T0 + 16 * INTERVAL - 0.5) == 2
    assert reentry_count(3, 1, T0, T0 + 15.5 * INTERVAL) == 2
    assert reentry_count(3, 1, T0, T0 + 16 * INTERVAL) == 1  # exactly 16: too late
    assert reentry_count(3, 1, T0, T0 + 16.5 * INTERVAL) == 1
    assert reentry_count(3, 1, T0, T0 + 1.0 * INTERVAL) == 2
    assert reentry_count(7, 2, T0, T0 + 2 * INTERVAL) == 5


def test_reentry_after_a_cycle_of_one_or_two_drops_starts_at_one() -> None:
    assert reentry_count(2, 1, T0, T0 + INTERVAL) == 1  # delta 1
    assert reentry_count(1, 1, T0, T0 + INTERVAL) == 1  # delta 0
    c, st = codel()
    assert entered(c, st, T0)  # one drop, then leave and come back soon
    assert not c.should_drop(st, LOW, T0 + 1.0, backlog=5)
    assert entered(c, st, T0 + 20.0)
    assert st.count == 1 and st.drop_next == law(T0 + 20.0, 1)


def test_an_empty_queue_resets_the_interval_and_the_dropping_state() -> None:
    c, st = codel()
    assert entered(c, st, T0)
    assert c.should_drop(st, HIGH, T0 + INTERVAL, backlog=5)
    c.on_empty(st)
    assert (st.first_above_time, st.dropping, st.advance_pending) == (0.0, False, False)
    assert not c.should_drop(st, HIGH, T0 + 2 * INTERVAL, backlog=5)  # a new interval
    assert c.should_drop(st, HIGH, T0 + 3 * INTERVAL, backlog=5)
    assert st.count == 1  # delta 2 - 1 = 1: starts at one
