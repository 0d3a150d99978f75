"""``codel_admission``'s Retry-After to the second: the queue's drain time past the target,
never negative, unknown without a positive measured rate."""

from __future__ import annotations

import pytest

from policies.contracts import GateContext
from policies.gates.codel_admission import CodelAdmission
from policies.gates.codel_admission_params import CodelAdmissionParams

GATE = CodelAdmission(CodelAdmissionParams(target_s=1.0, interval_s=10.0))


def wait(queued: int, rate: float | None) -> float | None:
    return GATE._retry_after_s(GateContext(0.0, queued, rate, None, False))


def test_the_wait_is_the_drain_time_beyond_the_target() -> None:
    assert wait(1000, 100.0) == 9.0  # 10 s to drain, 1 s of it is the target
    assert wait(300, 0.5) == 599.0  # a rate under a token per second still counts


def test_a_queue_that_drains_within_the_target_waits_nothing() -> None:
    assert wait(100, 200.0) == 0.0  # 0.5 s: under the 1 s target


@pytest.mark.parametrize("rate", [None, 0.0, -3.0])
def test_no_wait_is_computed_without_a_positive_rate(rate: float | None) -> None:
    assert wait(1000, rate) is None
