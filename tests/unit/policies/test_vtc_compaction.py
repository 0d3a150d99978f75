"""VTC drops the heap items of discarded entries with a bound: a tenant that stays backlogged
(its head never leaves) while its other requests are cancelled holds at most twice its live
entries plus a constant, and pops still come out as a plain model of the queue says."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.contracts import QueuedEntry
from policies.fair_vtc import Vtc, VtcState
from policies.registry import build_policy

from .helpers import queued_entry

_SLACK_BOUND = 64  # VTC's rebuild slack, restated: the test's own ceiling


def _vtc() -> tuple[Vtc, VtcState]:
    fairness = build_policy({"fairness": {"type": "vtc"}}).fairness
    assert isinstance(fairness, Vtc)
    return fairness, fairness.new_state()


def _leave(vtc: Vtc, state: VtcState, entry: QueuedEntry) -> None:
    """Cancelled or expired, as the scheduler does it: discard, then the book marks it dead."""
    vtc.discard(state, entry)
    entry.alive = False


def test_a_backlogged_tenants_cancelled_items_stay_bounded() -> None:
    vtc, state = _vtc()
    stuck = queued_entry(0, 0.0, 1.0)  # the earliest expiry: the head, never popped
    vtc.push(state, stuck, 0.0)
    peak = 0
    for seq in range(1, 50_001):
        e = queued_entry(seq, seq * 1e-3, 3600.0)
        vtc.push(state, e, e.enqueued_at)
        _leave(vtc, state, e)
        held = len(state.queues["t"])
        peak = max(peak, held)
        assert held <= 2 * state.live["t"] + _SLACK_BOUND + 1
    assert peak < 200  # 50,000 cancelled: without compaction all of them would be held
    assert vtc.pop(state, 60.0) is stuck


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 5.0), st.integers(0, 10**6)), max_size=500)
)
def test_pops_match_a_plain_model_across_compactions(ops: list[tuple[int, float, int]]) -> None:
    """One tenant: VTC pops its earliest expiry first (then the earliest seq)."""
    vtc, state = _vtc()
    live: dict[int, QueuedEntry] = {}
    now = 0.0
    for seq, (op, wait_s, pick) in enumerate(ops):
        now += 0.01
        if op == 0 or not live:
            e = queued_entry(seq, now, wait_s)
            vtc.push(state, e, now)
            live[seq] = e
        elif op == 1:
            _leave(vtc, state, live.pop(sorted(live)[pick % len(live)]))
        else:
            expected = min(live.values(), key=lambda x: (x.expires_at, x.seq))
            got = vtc.pop(state, now)
            assert got is expected
            del live[expected.seq]
            expected.alive = False  # dispatched: the book removes it
        assert state.live.get("t", 0) == len(live)
        assert len(state.queues.get("t", [])) <= 2 * len(live) + _SLACK_BOUND + 1


def test_after_a_compaction_the_survivors_pop_in_expiry_order() -> None:
    vtc, state = _vtc()
    rng = random.Random(5)
    entries = [queued_entry(seq, seq * 1e-3, rng.uniform(0.0, 100.0)) for seq in range(300)]
    for e in entries:
        vtc.push(state, e, e.enqueued_at)
    leaving = rng.sample(entries, 250)
    for e in leaving:
        _leave(vtc, state, e)
    assert len(state.queues["t"]) < 300  # a compaction ran (250 dead > 2 x 50 live + slack)
    survivors = sorted((e for e in entries if e.alive), key=lambda x: (x.expires_at, x.seq))
    assert [vtc.pop(state, 200.0) for _ in survivors] == survivors
    assert vtc.pop(state, 200.0) is None
