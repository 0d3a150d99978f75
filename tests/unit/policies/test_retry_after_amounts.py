"""Retry-After to the second: the drain time behind the queue-full and deadline answers, and
the clamp and jitter applied to it."""

from __future__ import annotations

import random

import pytest

from policies.engine.retry_after import drain_seconds, retry_after
from policies.engine.retry_after_params import RetryAfterParams


class HalfwayRandom(random.Random):
    """A generator whose every draw is 0.5: the jitter added is exactly half its bound."""

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
    assert retry_after(10.0, PARAMS, HalfwayRandom()) == pytest.approx(11.0)


def test_retry_after_is_clamped_to_its_bounds_before_the_jitter() -> None:
    assert retry_after(0.5, PARAMS, HalfwayRandom()) == pytest.approx(2.2)
    assert retry_after(None, PARAMS, HalfwayRandom()) == pytest.approx(2.2)
    assert retry_after(29.0, PARAMS, HalfwayRandom()) == 30.0  # 31.9 capped at max_s
    assert retry_after(500.0, PARAMS, HalfwayRandom()) == 30.0


def test_retry_after_without_jitter_is_the_clamped_wait() -> None:
    flat = RetryAfterParams(min_s=2.0, max_s=30.0, jitter=0.0)
    assert retry_after(7.25, flat, HalfwayRandom()) == 7.25
