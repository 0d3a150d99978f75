"""``tenant_quota``'s concurrency refusals as promises of a slot: told apart by the rate
the tenant's requests are measured to leave, a freed slot kept for the client it was
promised to, and the learned run time before anything has left."""

from __future__ import annotations

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, Ending, Outcome, Reason, Usage
from tests.unit.policies.helpers import ManualClock, promising_quota, refused_after, request

CAP = 2  # the operator's cap on the tenant's requests in the system


def _full(clock: ManualClock) -> tuple[Scheduler, BackendsSnapshot, list[Ticket]]:
    """Two requests left in 4 s of the tenant being busy (0.5 a second); two in flight."""
    s, f = promising_quota(clock, {"max_concurrent": CAP}, 10, {"grace_s": 1.0, "min_s": 0.01})
    running = [s.submit(request(clock), f) for _ in range(CAP)]
    clock.advance(4.0)
    for t in running:
        assert isinstance(t, Ticket)
        s.release(t, Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=4.0))
    held = [s.submit(request(clock), f) for _ in range(CAP)]
    assert all(isinstance(t, Ticket) for t in held)
    return s, f, held  # type: ignore[return-value]


def _slot_refusal(out: Decision | Ticket) -> float:
    return refused_after(out, Reason.TENANT_CONCURRENCY)


def _promise_due(clock: ManualClock) -> tuple[Scheduler, BackendsSnapshot, list[Ticket]]:
    """``_full``, then a newcomer refused with the promise of a slot in 2 s (one departure
    at 0.5 a second), and the clock at that promise's due time, nothing having left."""
    s, f, held = _full(clock)
    start = clock.now
    assert _slot_refusal(s.submit(request(clock), f)) == 2.0
    clock.now = start + 2.0
    return s, f, held


def test_refused_together_each_told_the_time_its_slot_is_due_to_free() -> None:
    clock = ManualClock()
    s, f, _ = _full(clock)
    afters = [_slot_refusal(s.submit(request(clock), f)) for _ in range(3)]
    assert afters == [2.0, 4.0, 6.0]  # 1, 2, 3 departures at 0.5 a second


def test_a_freed_slot_is_kept_for_the_client_it_was_promised_to() -> None:
    clock = ManualClock()
    s, f, held = _promise_due(clock)
    s.release(held[0], Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=2.0))
    # busy 6 s, 3 left: 0.5 a second; the free slot is promised, so a newcomer waits for
    # the one still in flight to leave
    assert _slot_refusal(s.submit(request(clock), f)) == 1 / (3 / 6.0)
    assert isinstance(s.submit(request(clock, is_retry=True), f), Ticket)


def test_a_promised_slot_is_not_taken_past_the_cap() -> None:
    clock = ManualClock()
    s, f, _ = _promise_due(clock)  # due, but nothing has left: the cap still holds
    assert _slot_refusal(s.submit(request(clock, is_retry=True), f)) > 0.0


def test_before_anything_left_the_wait_is_the_learned_run_time_or_the_floor() -> None:
    clock = ManualClock()
    s, f = promising_quota(clock, {"max_concurrent": 1}, 10, {}, backlog_off=False)
    assert isinstance(s.submit(request(clock), f), Ticket)
    out = s.submit(request(clock), f)
    floor = s.policy.retry_after.min_s  # no p95 learned yet: the floor's window
    assert floor <= _slot_refusal(out) <= 2 * floor


def test_the_departure_rate_counts_the_time_the_tenant_still_had_one_in_the_system() -> None:
    clock = ManualClock()
    s, f = promising_quota(clock, {"max_concurrent": CAP}, 10, {"min_s": 0.01})
    first, second = (s.submit(request(clock), f) for _ in range(CAP))
    assert isinstance(first, Ticket) and isinstance(second, Ticket)
    clock.advance(2.0)
    s.release(first, Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=2.0))
    clock.advance(2.0)  # one still in the system: these 2 s are busy time too
    s.release(second, Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=4.0))
    assert all(isinstance(s.submit(request(clock), f), Ticket) for _ in range(CAP))
    # 2 left in 4 busy seconds: 0.5 a second (not 2 in the 2 s before the first left)
    assert _slot_refusal(s.submit(request(clock), f)) == 2.0


def test_a_retry_refused_again_gives_up_its_old_promise_for_the_new_one() -> None:
    clock = ManualClock()
    s, f, _ = _promise_due(clock)  # nothing has left: refused again, a promise of 1 slot
    # its own departure at 0.5 a second (the meter has seen 4 busy seconds, 2 departures)
    assert _slot_refusal(s.submit(request(clock, is_retry=True), f)) == 2.0
    # a newcomer waits behind the one slot promised (the retry's second promise), not two:
    # 2 + 1 + 1 - 2 departures at 0.5 a second
    assert _slot_refusal(s.submit(request(clock), f)) == 4.0


def test_a_newcomer_admitted_beside_a_due_promise_leaves_the_promise_in_the_book() -> None:
    clock = ManualClock()
    s, f, held = _promise_due(clock)
    for t in held:
        s.release(t, Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=2.0))
    # none in the system, one slot promised: a newcomer fits beside it
    newcomer = s.submit(request(clock), f)
    assert isinstance(newcomer, Ticket)
    # the promise is still there (it was the retry's, not the newcomer's): the cap is reached
    assert _slot_refusal(s.submit(request(clock), f)) > 0.0
    assert isinstance(s.submit(request(clock, is_retry=True), f), Ticket)
    s.release(newcomer, Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=0.0))
    # the retry took its slot out of the book: one in the system (the retry) and one
    # promised (to the newcomer refused above) leave 1 departure to wait for, at 5 in 6
    # busy seconds
    assert _slot_refusal(s.submit(request(clock), f)) == 1 / (5 / 6.0)


def test_a_retry_refused_again_waits_behind_the_other_slots_promised() -> None:
    clock = ManualClock()
    s, f, _ = _full(clock)
    start = clock.now
    assert [_slot_refusal(s.submit(request(clock), f)) for _ in range(2)] == [2.0, 4.0]
    clock.now = start + 2.0  # the first due, nothing has left: its own departure and the
    # one promised to the second, at 0.5 a second
    assert _slot_refusal(s.submit(request(clock, is_retry=True), f)) == 4.0


def test_the_time_the_tenant_had_none_in_the_system_is_not_counted() -> None:
    clock = ManualClock()
    s, f, held = _full(clock)
    for t in held:  # 4 left in 4 busy seconds
        s.release(t, Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=0.0))
    clock.advance(4.0)  # 4 s with none in the system
    assert all(isinstance(s.submit(request(clock), f), Ticket) for _ in range(CAP))
    assert _slot_refusal(s.submit(request(clock), f)) == 1.0  # 4 a 4 s: 1 a second
