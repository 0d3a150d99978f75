"""The step-time signal's amounts at their edges: the one-second span, the 16-token minimum,
the 15-minute floor, a restart, written as literals so a changed constant shows."""

from __future__ import annotations

import math

import pytest

from gateway.backends.scrape.sample import Histogram
from policies.step_latency import StepLatency


def _h(total_s: float, count: float) -> Histogram:
    return Histogram(bounds=(math.inf,), cumulative=(count,), sum=total_s, count=count)


def test_the_span_is_one_second_starting_at_the_newest_scrape_at_or_before_it() -> None:
    s = StepLatency()
    s.add(0.0, _h(0.0, 0))
    s.add(0.5, _h(1.0, 100))  # 10 ms steps in (0, 0.5]
    s.add(1.0, _h(1.2, 200))  # 2 ms steps in (0.5, 1.0]
    assert s.itl_s == pytest.approx(1.2 / 200)  # the span starts at 0.0: 1.0 s before
    s.add(1.5, _h(1.4, 300))  # 2 ms steps
    assert s.itl_s == pytest.approx((1.4 - 1.0) / 200)  # starts at 0.5, exactly 1 s before
    s.add(2.0, _h(1.6, 400))
    assert s.itl_s == pytest.approx((1.6 - 1.2) / 200)  # starts at 1.0


def test_sixteen_tokens_are_enough_and_fifteen_are_not() -> None:
    s = StepLatency()
    s.add(0.0, _h(0.0, 0))
    s.add(0.5, _h(0.15, 15))
    assert s.itl_s is None
    s = StepLatency()
    s.add(0.0, _h(0.0, 0))
    s.add(0.5, _h(0.16, 16))
    assert s.itl_s == pytest.approx(0.01)


def test_the_floor_is_the_lowest_mean_and_outlives_higher_later_ones() -> None:
    s = StepLatency()
    s.add(100.0, _h(0.0, 0))
    s.add(100.5, _h(0.2, 100))  # 2 ms
    s.add(101.5, _h(0.8, 200))  # 6 ms
    s.add(102.5, _h(1.2, 300))  # 4 ms
    assert s.floor_s == pytest.approx(0.002)
    assert s.itl_s == pytest.approx(0.004)


def test_the_floor_is_kept_for_fifteen_minutes_to_the_second() -> None:
    def floor_at(now: float) -> float | None:
        s = StepLatency()
        s.add(0.0, _h(0.0, 0))
        s.add(1.0, _h(0.2, 100))  # a 2 ms floor, seen at t = 1
        s.add(now - 1.0, _h(10.0, 2000))
        s.add(now, _h(10.5, 2100))  # 5 ms now
        return s.floor_s

    assert floor_at(900.5) == pytest.approx(0.002)
    assert floor_at(901.0) == pytest.approx(0.002)  # exactly 900 s old: still kept
    assert floor_at(901.5) == pytest.approx(0.005)


def test_a_restart_whose_count_fell_starts_the_span_afresh_at_once() -> None:
    s = StepLatency()
    s.add(0.0, _h(0.1, 100))
    s.add(0.5, _h(0.2, 200))
    s.add(1.0, _h(0.5, 50))  # restarted: fewer tokens, yet a larger sum
    assert s.itl_s is None
    s.add(1.5, _h(1.0, 150))
    assert s.itl_s == pytest.approx(0.005)  # measured from the restart, not across it


def test_a_restart_whose_sum_fell_starts_afresh_too() -> None:
    s = StepLatency()
    s.add(0.0, _h(5.0, 100))
    s.add(0.5, _h(6.0, 200))
    s.add(1.0, _h(0.1, 300))  # restarted: a smaller sum (the count happens to be higher)
    assert s.itl_s is None
    s.add(1.5, _h(0.6, 400))
    assert s.itl_s == pytest.approx(0.005)


def test_a_restart_that_lost_one_token_or_a_fraction_of_a_second_is_a_restart() -> None:
    s = StepLatency()
    s.add(0.0, _h(0.1, 100))
    s.add(0.5, _h(0.5, 99))  # one token fewer than before: the server started again
    s.add(1.0, _h(1.0, 199))
    assert s.itl_s == pytest.approx(0.005)  # from the restart: 0.5 s over 100 tokens
    s = StepLatency()
    s.add(0.0, _h(1.0, 100))
    s.add(0.5, _h(0.5, 300))  # half a second less in total: started again
    s.add(1.0, _h(1.0, 400))
    assert s.itl_s == pytest.approx(0.005)
