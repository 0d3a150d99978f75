"""Retry-After to the second: the drain time behind the queue-full and deadline answers, and
the clamp and jitter applied to it."""

from __future__ import annotations

import math
import random

import pytest

from policies.engine.retry_after import JitterSequence, drain_seconds, retry_after
from policies.engine.retry_after_params import RetryAfterParams

HALFWAY = 0.5
"""The jitter's place in its window: exactly half of it."""


class HalfwayRandom(random.Random):
    """A generator whose every draw is 0.5."""

    def random(self) -> float:
        return 0.5


PARAMS = RetryAfterParams(min_s=2.0, max_s=30.0, jitter=0.2)


def test_drain_time_is_the_work_over_the_measured_rate() -> None:
    assert drain_seconds(3000.0, 250.0) == 12.0
    assert drain_seconds(100.0, 0.5) == 200.0  # a rate under one token per second still counts
    assert drain_seconds(0.0, 40.0) == 0.0


@pytest.mark.parametrize("rate", [None, 0.0, -5.0])
def test_drain_time_is_unknown_without_a_positive_measured_rate(rate: float | None) -> None:
    assert drain_seconds(3000.0, rate) is None


def test_retry_after_stretches_the_wait_by_the_jitter_drawn() -> None:
    assert retry_after(10.0, PARAMS, HALFWAY) == pytest.approx(11.0)  # 10 + 0.5 x (0.2 x 10)


def test_retry_after_is_clamped_to_its_bounds_before_the_jitter() -> None:
    # under the floor or unknown: a window min_s wide above it, [2, 4], whatever the jitter
    assert retry_after(0.5, PARAMS, HALFWAY) == pytest.approx(3.0)
    assert retry_after(None, PARAMS, HALFWAY) == pytest.approx(3.0)
    flat = RetryAfterParams(min_s=2.0, max_s=30.0, jitter=0.0)
    assert retry_after(None, flat, HALFWAY) == pytest.approx(3.0)
    assert retry_after(1.9, flat, HALFWAY) == pytest.approx(3.0)
    # at the floor exactly, the value is kept: [2, 2 + 0.2 x 2]
    assert retry_after(2.0, PARAMS, HALFWAY) == pytest.approx(2.2)
    # the window no longer fits under max_s: it ends there, [30 - 5.8, 30]
    assert retry_after(29.0, PARAMS, HALFWAY) == pytest.approx(27.1)
    assert retry_after(500.0, PARAMS, HALFWAY) == pytest.approx(27.0)  # [24, 30]


def test_retry_after_without_jitter_is_the_clamped_wait() -> None:
    flat = RetryAfterParams(min_s=2.0, max_s=30.0, jitter=0.0)
    assert retry_after(7.25, flat, HALFWAY) == 7.25
    assert retry_after(30.0, flat, HALFWAY) == 30.0
    # past the maximum, a window of min_s below it: [28, 30]
    assert retry_after(99.0, flat, HALFWAY) == pytest.approx(29.0)


def test_the_jitter_sequence_steps_by_the_golden_ratio_from_its_random_start() -> None:
    sequence = JitterSequence(HalfwayRandom())
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    assert sequence.next() == pytest.approx((0.5 + golden) % 1.0)
    assert sequence.next() == pytest.approx((0.5 + 2 * golden) % 1.0)


def test_a_window_narrower_than_min_s_below_the_maximum_keeps_its_width() -> None:
    # 29 s is under max_s, its window 1.45 s wide does not fit under it: [28.55, 30],
    # not widened to min_s (that is for waits past max_s only)
    narrow = RetryAfterParams(min_s=2.0, max_s=30.0, jitter=0.05)
    assert retry_after(29.0, narrow, HALFWAY) == pytest.approx(29.275)
    assert retry_after(29.0, narrow, 0.0) == pytest.approx(28.55)
