"""``priority`` count by count: the live count after every operation (it decides when the heaps
are rebuilt), the highest band first, a handed-back entry back in its band."""

from __future__ import annotations

from policies.fairness.priority import PriorityBands, PriorityState
from policies.fairness.priority_params import PriorityParams
from tests.unit.policies.helpers import queued_entry


def test_the_live_count_follows_push_pop_push_back_and_discard() -> None:
    bands, state = PriorityBands(PriorityParams()), PriorityState()
    e1, e2, e3 = (queued_entry(i, 0.0, 30.0) for i in range(3))
    assert state.live == 0
    for e in (e1, e2, e3):
        bands.push(state, e, 0.0)
    assert state.live == 3
    assert bands.pop(state, 0.0) is e1 and state.live == 2
    bands.push_back(state, e1)
    assert state.live == 3
    bands.discard(state, e2)
    e2.alive = False
    assert state.live == 2
    assert bands.pop(state, 0.0) is e1 and bands.pop(state, 0.0) is e3 and state.live == 0
    assert bands.pop(state, 0.0) is None
