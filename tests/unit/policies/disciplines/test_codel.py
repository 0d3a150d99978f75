"""CoDel against RFC 8289: target, interval, interval/sqrt(count) spacing, state reset."""

from __future__ import annotations

import itertools
import math

from policies.disciplines.codel import Codel, CodelState
from policies.disciplines.codel_params import CodelParams

TARGET, INTERVAL = 1.0, 10.0


def codel() -> tuple[Codel, CodelState]:
    c = Codel(CodelParams(target_s=TARGET, interval_s=INTERVAL))
    return c, c.new_state()


def test_no_drop_while_sojourn_stays_below_target() -> None:
    c, st = codel()
    assert not any(c.should_drop(st, TARGET * 0.99, t, backlog=50) for t in range(100))


def test_first_drop_only_after_a_full_interval_above_target() -> None:
    c, st = codel()
    assert not c.should_drop(st, 2.0, 0.0, backlog=5)  # starts the interval
    assert not c.should_drop(st, 2.0, INTERVAL - 0.01, backlog=5)
    assert c.should_drop(st, 2.0, INTERVAL, backlog=5)
    assert st.dropping and st.count == 1


def test_dip_below_target_restarts_the_interval() -> None:
    c, st = codel()
    c.should_drop(st, 2.0, 0.0, backlog=5)
    c.should_drop(st, 0.5, 5.0, backlog=5)
    assert not c.should_drop(st, 2.0, INTERVAL, backlog=5)
    assert not c.should_drop(st, 2.0, INTERVAL + 5.0, backlog=5)
    assert c.should_drop(st, 2.0, 2 * INTERVAL, backlog=5)


def test_nearly_empty_queue_is_never_dropped() -> None:
    c, st = codel()
    assert not any(c.should_drop(st, 100.0, t, backlog=0) for t in range(0, 100, 5))


def test_drops_follow_the_control_law() -> None:
    c, st = codel()
    c.should_drop(st, 2.0, 0.0, backlog=5)
    drops: list[float] = []
    t = INTERVAL
    while len(drops) < 6:
        if c.should_drop(st, 2.0, t, backlog=5):
            drops.append(t)
        t = round(t + 0.01, 2)
    gaps = [b - a for a, b in itertools.pairwise(drops)]
    for count, gap in enumerate(gaps, start=1):
        assert math.isclose(gap, INTERVAL / math.sqrt(count), abs_tol=0.011)


def test_leaving_dropping_state_and_count_memory_on_quick_reentry() -> None:
    c, st = codel()
    c.should_drop(st, 2.0, 0.0, backlog=5)
    t, drops = INTERVAL, 0
    while drops < 4:
        drops += c.should_drop(st, 2.0, t, backlog=5)
        t += 0.01
    assert not c.should_drop(st, 0.1, t, backlog=5)  # below target: leave dropping
    assert not st.dropping
    c.should_drop(st, 2.0, t + 0.01, backlog=5)
    assert c.should_drop(st, 2.0, t + INTERVAL + 0.01, backlog=5)
    assert st.count == 4 - 1  # RFC: count resumes at count - lastcount when delta > 1


def test_empty_queue_resets_first_above_time() -> None:
    c, st = codel()
    c.should_drop(st, 2.0, 0.0, backlog=5)
    c.on_empty(st)
    assert not c.should_drop(st, 2.0, INTERVAL, backlog=5)
