"""The scheduler's learners at their exact edges: a drain-meter bucket that opens at the very
instant the last one closes and leaves the window at the very instant it ends, rates with
no tokens or no busy time, cost classes, and the p95 order statistic."""

from __future__ import annotations

from policies.engine.observe import DrainMeter, ExecQuantiles, cost_class


def _meter() -> DrainMeter:
    """Window 10 s: buckets of 1 s. 50 tokens in a bucket opened at 100.5 with 1 s busy; 30 in
    the next, opened at 101.5 exactly when the first closed, with 1 s busy."""
    m = DrainMeter(window_s=10.0)
    m.tick(100.0, True)
    m.add(100.5, 50)
    m.tick(101.0, True)
    assert m.rate(101.0) == 50.0
    m.tick(101.5, True)
    m.add(102.0, 30)
    m.tick(102.0, False)  # idle from here: no more busy time
    m.tick(105.0, True)
    m.tick(105.0, False)
    return m


def test_a_bucket_leaves_the_window_just_after_its_end_is_a_window_old() -> None:
    m = _meter()
    assert m.rate(102.0) == 80 / 2.0
    assert m.rate(111.5) == 80 / 2.0  # the first bucket ended at 101.5: exactly 10 s ago
    assert m.rate(111.5001) == 30 / 1.0  # the first bucket left; the second is all that counts
    assert m.rate(112.5) == 30 / 1.0
    assert m.rate(112.6) is None


def test_a_bucket_busier_than_its_start_time_still_closes_and_leaves_on_time() -> None:
    """A clock that starts at 0: the first bucket (opened at 0.25) holds 1 s of busy time,
    more than its start. It still closes at 1.25 and leaves the window after 11.25."""
    m = DrainMeter(window_s=10.0)
    m.tick(0.0, True)
    m.add(0.25, 10)
    m.tick(1.0, True)
    m.tick(1.25, False)  # 0.25 s busy, in a new bucket
    m.add(1.3, 20)
    assert m.rate(11.25) == 30 / 1.25
    assert m.rate(11.3) == 20 / 0.25


def test_no_rate_without_tokens_or_without_busy_time() -> None:
    busy_only = DrainMeter(window_s=10.0)
    assert busy_only.rate(0.0) is None
    busy_only.tick(0.0, True)
    busy_only.tick(2.0, True)
    assert busy_only.rate(2.0) is None
    idle_tokens = DrainMeter(window_s=10.0)
    idle_tokens.add(0.0, 100)
    idle_tokens.tick(1.0, False)
    idle_tokens.tick(3.0, False)
    assert idle_tokens.rate(3.0) is None
    idle_tokens.tick(4.0, True)
    idle_tokens.tick(4.5, True)
    assert idle_tokens.rate(4.5) == 200.0


def test_default_window_is_thirty_seconds() -> None:
    m = DrainMeter()
    m.tick(0.0, True)
    m.add(0.0, 90)
    m.tick(3.0, False)
    assert m.rate(33.0) == 30.0  # the bucket 0..3 s ends 30 s before
    assert m.rate(33.001) is None


def test_cost_classes_are_powers_of_two() -> None:
    assert [cost_class(t) for t in (-5, 0, 1, 2, 3, 4, 7, 8)] == [1, 1, 1, 2, 2, 3, 3, 4]


def test_p95_needs_five_samples_and_is_the_order_statistic() -> None:
    q = ExecQuantiles()
    for latency in (5.0, 1.0, 3.0, 2.0):
        q.add(3, latency)  # class 2
    q.add(3, float("nan"))
    assert q.p95(3) is None
    q.add(2, 4.0)
    assert q.p95(3) == 5.0 and q.p95(2) == 5.0  # 5 samples: the 5th
    assert q.p95(1) is None and q.p95(0) is None  # the cheaper class has none
    assert q.p95(4) == 5.0 and q.p95(1000) == 5.0  # a dearer class reads the cheaper one
    for latency in (0.5, 0.25, 0.125, 6.0, 7.0):
        q.add(1, latency)  # class 1: 5 samples
    assert (q.p95(0), q.p95(1), q.p95(2)) == (7.0, 7.0, 5.0)
    for i in range(15):
        q.add(2, 10.0 + i)  # class 2: 20 samples, the 95th percentile is the 20th
    assert q.p95(2) == 24.0
    q.add(2, 100.0)  # 21: int(0.95 x 21) = 19, the 20th of 21
    assert q.p95(2) == 24.0


def test_p95_keeps_the_last_128_samples_of_a_class() -> None:
    q = ExecQuantiles()
    q.add(8, 1000.0)
    for _ in range(127):
        q.add(8, 1.0)
    assert q.p95(8) == 1.0  # int(0.95 x 128) = 121: still a 1.0
    for _ in range(7):
        q.add(8, 2.0)
    assert q.p95(8) == 2.0  # 1000 left with the 129th sample; 7 of 128 are 2.0
