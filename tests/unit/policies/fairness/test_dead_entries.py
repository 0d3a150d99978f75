"""Every fairness policy drops the items of discarded entries with a bound: a queue whose
front never moves (its head never leaves) while the requests behind it are cancelled holds
at most twice its live entries plus a constant, and pops still come out as a plain model of
the policy says."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.contracts import Fairness, QueuedEntry
from policies.registry import build_policy
from tests.unit.policies.helpers import queued_entry

_SLACK_BOUND = 64  # the rebuild slack, restated: the test's own ceiling

HELD: dict[str, Callable[[Any], int]] = {
    # the largest structure each keeps (every live entry is in it once)
    "vtc": lambda state: max((len(q) for q in state.queues.values()), default=0),
    "fifo": lambda state: len(state.queue),
    "priority": lambda state: len(state.by_age),
}
ORDER: dict[str, Callable[[QueuedEntry], tuple[float, int]]] = {
    # one tenant, one band, no starvation guard reached: what each pops first
    "vtc": lambda e: (e.expires_at, e.seq),
    "fifo": lambda e: (0.0, e.seq),
    "priority": lambda e: (e.expires_at, e.seq),
}


def _fairness(kind: str) -> tuple[Fairness[Any, Any], Any]:
    fairness = build_policy({"fairness": {"type": kind}}).fairness
    return fairness, fairness.new_state()


def _leave(fairness: Fairness[Any, Any], state: Any, entry: QueuedEntry) -> None:
    """Cancelled or expired, as the scheduler does it: discard, then the book marks it dead."""
    fairness.discard(state, entry)
    entry.alive = False


@pytest.mark.parametrize("kind", sorted(HELD))
def test_cancelled_items_behind_a_head_that_never_leaves_stay_bounded(kind: str) -> None:
    fairness, state = _fairness(kind)
    stuck = queued_entry(0, 0.0, 1.0)  # first in, earliest expiry: the head of every order
    fairness.push(state, stuck, 0.0)
    peak = 0
    for seq in range(1, 50_001):
        e = queued_entry(seq, seq * 1e-4, 3600.0)
        fairness.push(state, e, e.enqueued_at)
        _leave(fairness, state, e)
        held = HELD[kind](state)
        peak = max(peak, held)
        assert held <= 2 * 1 + _SLACK_BOUND + 1
    assert peak < 200  # 50,000 cancelled: without the rebuild all of them would be held
    assert fairness.pop(state, 5.0) is stuck
    assert fairness.pop(state, 5.0) is None


@pytest.mark.parametrize("kind", sorted(HELD))
def test_after_a_rebuild_the_survivors_pop_in_order(kind: str) -> None:
    fairness, state = _fairness(kind)
    rng = random.Random(5)
    entries = [queued_entry(seq, seq * 1e-3, rng.uniform(0.0, 100.0)) for seq in range(300)]
    for e in entries:
        fairness.push(state, e, e.enqueued_at)
    for e in rng.sample(entries, 250):
        _leave(fairness, state, e)
    assert HELD[kind](state) < 300  # a rebuild ran (250 dead > 2 x 50 live + slack)
    survivors = sorted((e for e in entries if e.alive), key=ORDER[kind])
    assert [fairness.pop(state, 1.0) for _ in survivors] == survivors
    assert fairness.pop(state, 1.0) is None


@pytest.mark.parametrize("kind", sorted(HELD))
@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 2), st.floats(0.0, 5.0), st.integers(0, 10**6)), max_size=400
    )
)
def test_pops_match_a_plain_model_across_rebuilds(
    kind: str, ops: list[tuple[int, float, int]]
) -> None:
    fairness, state = _fairness(kind)
    live: dict[int, QueuedEntry] = {}
    now = 0.0
    for seq, (op, wait_s, pick) in enumerate(ops):
        now += 0.01  # 400 ops: 4 s, below the priority policy's 10 s starvation guard
        if op == 0 or not live:
            e = queued_entry(seq, now, wait_s)
            fairness.push(state, e, now)
            live[seq] = e
        elif op == 1:
            _leave(fairness, state, live.pop(sorted(live)[pick % len(live)]))
        else:
            expected = min(live.values(), key=ORDER[kind])
            assert fairness.pop(state, now) is expected
            del live[expected.seq]
            expected.alive = False  # dispatched: the book removes it
        assert HELD[kind](state) <= 2 * len(live) + _SLACK_BOUND + 1


def test_priority_by_age_heap_stays_bounded_when_pops_come_from_the_bands() -> None:
    """A band pop leaves the entry's item in the age heap; an old entry with a far expiry
    keeps that heap's head in place (the starvation guard is not reached here)."""
    fairness, state = _fairness("priority")
    old = queued_entry(0, 0.0, 3600.0)
    fairness.push(state, old, 0.0)
    for seq in range(1, 20_001):
        e = queued_entry(seq, seq * 1e-4, 1.0)  # expires first: the band pops it at once
        fairness.push(state, e, e.enqueued_at)
        assert fairness.pop(state, e.enqueued_at) is e
        e.alive = False
        assert len(state.by_age) <= 2 * 1 + _SLACK_BOUND + 1
    assert fairness.pop(state, 3.0) is old
