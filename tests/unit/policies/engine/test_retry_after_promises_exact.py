"""Retry-After as a promise of the queue's capacity: refusals told after the returns
already promised, a new request kept from taking a promised place, a return at its time
drawing on its promise, promises lapsing, and no measured rate: nothing promised, no limit
opened. The drain counts the tokens the engine computes: the rate what completed requests
computed (output and uncached prompt), the queued work, each refusal's own request and the
promised returns their expected uncached prompt and output (``estimate.computed_total``),
so a cached context neither stretches a Retry-After nor holds a place it does not need."""

from __future__ import annotations

from typing import Any

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, DecisionKind, Ending, Outcome, Reason, RunHints, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

RATE = 25.0
"""The drain the setup measures: 100 tokens completed in 4 s of busy time."""
QUEUED = 26
"""Tokens left waiting in the queue by the setup."""
CONFIG: dict[str, Any] = {
    "retry_after": {"jitter": 0.0, "grace_s": 1.0, "promise": True},
    "prefill_backlog": {"enabled": False},
    "queue": {"max_queued_tokens": 50, "max_wait_s": 4.5},
}


def _decision(x: Decision | Ticket) -> Decision:
    assert isinstance(x, Decision), x
    return x


def _measured(clock: ManualClock, config: dict[str, Any]) -> tuple[Scheduler, BackendsSnapshot]:
    """A drain of 25 tokens/s measured, nothing in flight, 26 tokens queued (not polled)."""
    s = scheduler(clock, config)
    f = fleet(clock, backend("b1", max_num_seqs=1))
    running = s.submit(request(clock, prompt=60, output=40), f)
    assert isinstance(running, Ticket)
    clock.advance(4.0)
    assert _decision(s.submit(request(clock, prompt=21, output=5), f)).decision is (
        DecisionKind.DELAY
    )
    s.release(running, Ending(Outcome.COMPLETED, Usage(60, 40)))
    assert s.stats().drain_tokens_per_s == RATE
    return s, f


def test_simultaneous_refusals_are_told_increasing_times_after_each_other() -> None:
    clock = ManualClock()
    s, f = _measured(clock, CONFIG)
    afters = []
    for _ in range(4):  # 26 queued + 25 > the bound of 50
        out = _decision(s.submit(request(clock, prompt=20, output=5), f))
        assert out.reason is Reason.QUEUE_FULL
        afters.append(out.retry_after_s)
    # each after the queue and every earlier promise: (26 + 25 k) / 25
    assert afters == [(QUEUED + 25 * k) / RATE for k in (1, 2, 3, 4)]


def test_a_new_request_may_not_take_a_promised_place_but_the_return_may() -> None:
    clock = ManualClock()
    s, f = _measured(clock, CONFIG)
    told = [_decision(s.submit(request(clock, prompt=20, output=5), f)) for _ in range(3)]
    assert [o.retry_after_s for o in told] == [2.04, 3.04, 4.04]
    # 24 tokens fit under the bound (26 + 24 = 50), but behind the 75 promised tokens the
    # queue would hold (26 + 75 + 24) / 25 = 5.0 s > max_wait_s 4.5: refused, and promised
    door = _decision(s.submit(request(clock, prompt=20, output=4), f))
    assert (door.reason, door.retry_after_s) == (Reason.OVERLOADED, 5.0)
    clock.advance(2.04)
    back = s.submit(request(clock, prompt=20, output=4, is_retry=True), f)
    assert _decision(back).decision is DecisionKind.DELAY  # queued, not refused
    # the return took its 25 tokens out of the book: 26 + 24 queued, 50 + 24 promised
    probe = _decision(s.submit(request(clock, prompt=1, output=0), f))
    assert probe.retry_after_s == (QUEUED + 24 + 74 + 1) / RATE


def test_a_retry_before_its_time_is_a_new_request() -> None:
    clock = ManualClock()
    s, f = _measured(clock, CONFIG)
    for _ in range(3):
        _decision(s.submit(request(clock, prompt=20, output=5), f))
    clock.advance(2.0)  # the first promise is due at 2.04
    early = _decision(s.submit(request(clock, prompt=20, output=4, is_retry=True), f))
    assert (early.reason, early.retry_after_s) == (Reason.OVERLOADED, (26 + 75 + 24) / RATE)


def test_promises_lapse_grace_after_their_time_and_free_the_queue() -> None:
    clock = ManualClock()
    s, f = _measured(clock, CONFIG)
    start = clock.now
    for _ in range(3):  # due at +2.04, +3.04, +4.04; lapsed 1 s (the grace) later
        _decision(s.submit(request(clock, prompt=20, output=5), f))
    clock.now = start + 3.04  # the first at its lapse time: still held
    held = _decision(s.submit(request(clock, prompt=20, output=4), f))
    assert (held.reason, held.retry_after_s) == (Reason.OVERLOADED, (26 + 75 + 24) / RATE)
    clock.now = start + 3.0401  # lapsed: 25 tokens leave the book, the 24 just refused join
    freed = _decision(s.submit(request(clock, prompt=20, output=4), f))
    assert freed.retry_after_s == (26 + 50 + 24 + 24) / RATE
    clock.now = start + 3.0401 + freed.retry_after_s + 1.0001  # every promise lapsed
    assert _decision(s.submit(request(clock, prompt=20, output=4), f)).decision is (
        DecisionKind.DELAY
    )


def test_without_a_measured_rate_nothing_is_promised_and_the_bound_still_holds() -> None:
    clock = ManualClock()
    s = scheduler(clock, CONFIG)
    f = fleet(clock, backend("b1", max_num_seqs=1))
    assert isinstance(s.submit(request(clock, prompt=60, output=40), f), Ticket)
    _decision(s.submit(request(clock, prompt=21, output=5), f))
    floor = s.policy.retry_after.min_s
    told = set()
    for _ in range(3):  # the bound refuses; the floor's window, no promise behind it
        out = _decision(s.submit(request(clock, prompt=20, output=5), f))
        assert out.reason is Reason.QUEUE_FULL and out.retry_after_s is not None
        assert floor <= out.retry_after_s <= 2 * floor
        told.add(out.retry_after_s)
    assert len(told) == 3  # unknown waits are spread, even with jitter 0
    assert _decision(s.submit(request(clock, prompt=20, output=4), f)).decision is (
        DecisionKind.DELAY
    )


def test_a_tenant_holding_no_promise_is_not_held_back_by_the_others() -> None:
    clock = ManualClock()
    s, f = _measured(clock, CONFIG)
    for _ in range(3):  # t1's refused clients hold 75 tokens of the queue
        _decision(s.submit(request(clock, prompt=20, output=5), f))
    other = _decision(s.submit(request(clock, tenant="t2", prompt=20, output=4), f))
    assert other.decision is DecisionKind.DELAY  # the fair queue serves it by its share
    mine = _decision(s.submit(request(clock, prompt=1, output=0), f))  # the queue is full
    assert mine.retry_after_s == (QUEUED + 24 + 75 + 1) / RATE


def test_with_promises_off_each_refusal_is_an_estimate_that_holds_nothing() -> None:
    clock = ManualClock()
    off = CONFIG | {"retry_after": {"jitter": 0.0, "promise": False}}
    s, f = _measured(clock, off)
    afters = [_decision(s.submit(request(clock, prompt=20, output=5), f)) for _ in range(3)]
    assert [a.retry_after_s for a in afters] == [(QUEUED + 25) / RATE] * 3
    assert _decision(s.submit(request(clock, prompt=20, output=4), f)).decision is (
        DecisionKind.DELAY
    )


def test_a_call_of_an_agent_run_is_left_to_the_run_book() -> None:
    clock = ManualClock()
    s, f = _measured(clock, CONFIG)
    for _ in range(3):
        _decision(s.submit(request(clock, prompt=20, output=5), f))
    plain = _decision(s.submit(request(clock, prompt=20, output=4), f))
    assert plain.reason is Reason.OVERLOADED  # the door, as above
    call = request(clock, prompt=20, output=4, run=RunHints("run-1"))
    assert _decision(s.submit(call, f)).decision is DecisionKind.DELAY


# -- counted in the tokens the engine computes ----------------------------------------

UNCACHED_RATE = 20.0
"""80 computed tokens (100 used, 20 of them cached) completed in 4 s of busy time."""
UNCACHED_QUEUED = 16
"""Computed tokens queued by the setup: 22 prompt (half of them, 11, cached) + 5 output."""


def _measured_half_cached(clock: ManualClock) -> tuple[Scheduler, BackendsSnapshot]:
    """A backend whose prefix cache serves half of every prompt (its hit rate)."""
    s = scheduler(clock, CONFIG)
    f = fleet(clock, backend("b1", max_num_seqs=1, prefix_cache_hit_rate=0.5))
    running = s.submit(request(clock, prompt=60, output=40), f)
    assert isinstance(running, Ticket)
    clock.advance(4.0)
    queued = _decision(s.submit(request(clock, prompt=22, output=5), f))
    assert queued.decision is DecisionKind.DELAY
    stats = s.stats()  # 30 of the running prompt's 60 tokens expected cached
    assert (stats.in_flight_tokens, stats.in_flight_computed_tokens) == (100, 70)
    assert (stats.queued_tokens, stats.queued_computed_tokens) == (27, UNCACHED_QUEUED)
    s.release(running, Ending(Outcome.COMPLETED, Usage(60, 40, cached_tokens=20)))
    assert (s.stats().drain_tokens_per_s, s.stats().in_flight_computed_tokens) == (UNCACHED_RATE, 0)
    return s, f


def test_refusals_are_told_the_drain_of_the_uncached_work_ahead_and_their_own() -> None:
    clock = ManualClock()
    s, f = _measured_half_cached(clock)
    afters = []
    for _ in range(3):  # 27 queued + 25 > the bound of 50 (the bound counts every token)
        out = _decision(s.submit(request(clock, prompt=20, output=5), f))
        assert out.reason is Reason.QUEUE_FULL
        afters.append(out.retry_after_s)
    # each refusal computes 10 + 5 = 15 tokens: (16 + 15 k) / 20
    assert afters == [(UNCACHED_QUEUED + 15 * k) / UNCACHED_RATE for k in (1, 2, 3)]


def test_a_new_request_takes_a_place_the_uncached_promised_work_leaves() -> None:
    clock = ManualClock()
    s, f = _measured_half_cached(clock)
    for _ in range(4):  # promised 4 x 15 = 60 computed tokens
        _decision(s.submit(request(clock, prompt=20, output=5), f))
    # 20 + 3 = 23 tokens fit under the bound, and (16 + 60 + 13) / 20 = 4.45 s <= 4.5: it
    # queues (counted in every token, (27 + 100 + 23) / 25 = 6 s: it would be refused)
    late = _decision(s.submit(request(clock, prompt=20, output=3), f))
    assert late.decision is DecisionKind.DELAY
