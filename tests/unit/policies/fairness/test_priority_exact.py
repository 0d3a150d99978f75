"""``priority`` count by count: the live count after every operation (it decides when the heaps
are rebuilt), the highest band first, a handed-back entry back in its band."""

from __future__ import annotations

from policies.fairness.priority import PriorityBands, PriorityState
from policies.fairness.priority_params import PriorityParams
from tests.unit.policies.fairness.live_count import (
    assert_live_count_follows_push_pop_push_back_and_discard,
)


def test_the_live_count_follows_push_pop_push_back_and_discard() -> None:
    bands, state = PriorityBands(PriorityParams()), PriorityState()
    assert_live_count_follows_push_pop_push_back_and_discard(bands, state)
