from __future__ import annotations

import random
from pathlib import Path

import pytest

from simulation.metrics import TurnRecord, percentile, summarise
from simulation.results import Row, read_csv, write_csv
from simulation.workload import BackoffPolicy


def turn(
    first: float, attempts: list[float], deferrals: list[float], start: float, end: float
) -> TurnRecord:
    return TurnRecord(0, 10, first, attempts, deferrals, attempts[-1], start, end)


def test_deferral_share_counts_every_submission_in_the_window() -> None:
    records = [
        turn(10.0, [10.0, 12.0, 16.0], [10.0, 12.0], start=20.0, end=30.0),
        turn(11.0, [11.0], [], start=11.5, end=15.0),
        turn(1.0, [1.0, 3.0], [1.0], start=4.0, end=6.0),  # before the window: not counted
    ]
    s = summarise(records, 5.0, 100.0)
    assert (s.submissions, s.turns_completed) == (4, 3)
    assert s.deferral_share == pytest.approx(2 / 4)
    assert s.p99_felt_wait_s == pytest.approx(10.0)  # 20 - 10: from the first submission
    assert s.p99_queue_wait_s == pytest.approx(4.0)  # 20 - 16: from the accepted one
    assert s.goodput_tps == pytest.approx(3 / 95.0)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 99.0) == 99.0
    assert percentile(values, 50.0) == 50.0
    assert percentile([3.0], 99.0) == 3.0
    assert percentile([], 99.0) == 0.0


def test_backoff_grows_is_capped_and_honours_retry_after() -> None:
    rng = random.Random(1)
    b = BackoffPolicy(base_s=2.0, growth=2.0, cap_s=10.0)
    assert [b.delay(k, None, rng) for k in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert b.delay(0, 7.5, rng) == 7.5
    trusting = BackoffPolicy(base_s=0.0, growth=1.0, honour_retry_after=True)
    assert trusting.delay(3, 1.25, rng) == 1.25
    deaf = BackoffPolicy(base_s=2.0, growth=1.0, honour_retry_after=False)
    assert deaf.delay(0, 30.0, rng) == 2.0
    jittered = BackoffPolicy(base_s=4.0, growth=1.0, jitter=0.5)
    draws = [jittered.delay(0, None, rng) for _ in range(200)]
    assert all(2.0 <= d <= 4.0 for d in draws) and len(set(draws)) > 1


def test_csv_round_trip(tmp_path: Path) -> None:
    rows = [Row("simulate", "codel-8s", 24, 1, 0.875, 24.5, 0.23, 60.25, 20.0, 12.0, 100, 77)]
    write_csv(rows, tmp_path / "out.csv")
    assert read_csv(tmp_path / "out.csv") == rows
