"""The scheduler's exact amounts: what ``stats`` reports as requests go out to two backends
with different slots and come back (loads, charges, the usage correction of tenants with
weights 2 and 0.5, the drain rate), the queue bound at its edge, deadlines against the
queue's own wait bound, and the Retry-After a refusal computes from the measured drain."""

from __future__ import annotations

from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, DecisionKind, Ending, Outcome, Reason, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

NO_JITTER = {"retry_after": {"jitter": 0.0}, "prefill_backlog": {"enabled": False}}


def _ticket(x: Decision | Ticket) -> Ticket:
    assert isinstance(x, Ticket), x
    return x


def _decision(x: Decision | Ticket) -> Decision:
    assert isinstance(x, Decision), x
    return x


def test_stats_follow_dispatch_and_release_on_two_backends() -> None:
    clock = ManualClock()
    s = scheduler(clock, NO_JITTER)
    f = fleet(clock, backend("b1", max_num_seqs=1), backend("b2", max_num_seqs=2))
    r1 = _ticket(s.submit(request(clock, tenant="a", weight=0.5, prompt=100, output=50), f))
    r2 = _ticket(s.submit(request(clock, tenant="b", weight=2.0, prompt=30, output=10), f))
    r3 = _ticket(s.submit(request(clock, tenant="b", weight=2.0, prompt=7, output=3), f))
    assert (r1.backend, r2.backend, r3.backend) == ("b1", "b2", "b2")
    assert r1.decision.reservation_tokens == 150 and r1.dispatched_at == clock.now
    assert r1.decision.reason is Reason.CAPACITY_AVAILABLE
    st = s.stats()
    assert (st.queued, st.queued_tokens, st.oldest_age_s) == (0, 0, None)
    assert (st.in_flight, st.in_flight_tokens) == (3, 200)
    assert st.in_flight_by_backend == {"b1": 1, "b2": 2}
    assert st.limits == {"b1": 1.0, "b2": 2.0}
    assert (st.charged_tokens, st.released_tokens, st.drain_tokens_per_s) == (200, 0, None)
    assert st.deficits == {"a": 280.0, "b": 5.0}  # a: 150 / 0.5; b: 40 / 2 + 10 / 2, less 20
    clock.advance(2.0)
    s.release(r1, Ending(Outcome.COMPLETED, Usage(100, 80), latency_s=2.0))
    st = s.stats()
    assert (st.in_flight, st.in_flight_tokens) == (2, 50)
    assert st.in_flight_by_backend == {"b1": 0, "b2": 2}
    assert (st.charged_tokens, st.released_tokens) == (200, 150)
    assert st.drain_tokens_per_s == 90.0  # 180 tokens over 2 s busy
    assert st.deficits == {"a": 60.0, "b": -275.0}  # a: 300 + 30 / 0.5, above a's own 300
    s.release(r2, Ending(Outcome.FAILED))
    s.release(r2, Ending(Outcome.FAILED))  # idempotent
    s.release(r3, Ending(Outcome.COMPLETED, Usage(7, 1)))
    st = s.stats()
    assert (st.in_flight, st.in_flight_tokens, st.charged_tokens, st.released_tokens) == (
        0,
        0,
        200,
        200,
    )
    assert st.deficits == {"a": 60.0, "b": -276.0}  # b: 25 + (8 - 10) / 2; the floor stays


def test_queued_requests_count_their_tokens_age_and_position() -> None:
    clock = ManualClock()
    s = scheduler(clock, NO_JITTER)
    f = fleet(clock, backend("b1", max_num_seqs=1))
    _ticket(s.submit(request(clock, prompt=10, output=10), f))
    first = _decision(s.submit(request(clock, prompt=20, output=5), f))
    clock.advance(3.0)
    second = _decision(s.submit(request(clock, prompt=1, output=2), f))
    assert (first.decision, first.queue_position, second.queue_position) == (
        DecisionKind.DELAY,
        1,
        2,
    )
    assert (first.reservation_tokens, second.reservation_tokens) == (25, 3)
    st = s.stats()
    assert (st.queued, st.queued_tokens, st.oldest_age_s) == (2, 28, 3.0)
    assert st.saturation == 3.0 / s.policy.queue.max_wait_s  # the oldest waited 3 s
    assert s.next_wakeup() == clock.now - 3.0 + s.policy.queue.max_wait_s


def test_the_queue_bound_admits_work_up_to_it_and_refuses_a_token_more() -> None:
    clock = ManualClock()
    s = scheduler(clock, NO_JITTER | {"queue": {"max_queued_tokens": 50}})
    f = fleet(clock, backend("b1", max_num_seqs=1))
    running = _ticket(s.submit(request(clock, prompt=60, output=40), f))
    for _ in range(2):  # 25 + 25 = 50 queued: at the bound, not past it
        queued = _decision(s.submit(request(clock, prompt=20, output=5), f))
        assert queued.decision is DecisionKind.DELAY
    full = _decision(s.submit(request(clock, prompt=1, output=0), f))
    assert (full.decision, full.reason) == (DecisionKind.REJECT, Reason.QUEUE_FULL)
    floor = s.policy.retry_after.min_s  # nothing drained yet: the floor's window
    assert full.retry_after_s is not None and floor <= full.retry_after_s <= 2 * floor
    clock.advance(4.0)
    s.release(running, Ending(Outcome.COMPLETED, Usage(60, 40)))  # 100 tokens in 4 s: 25 per second
    (out,) = s.poll(f)
    assert isinstance(out, Ticket)
    refused = _decision(s.submit(request(clock, prompt=20, output=10), f))
    assert refused.reason is Reason.QUEUE_FULL
    assert refused.retry_after_s == (25 + 30) / 25.0  # the queue and itself, drained


def test_a_client_deadline_replaces_the_queue_wait_bound() -> None:
    clock = ManualClock()
    s = scheduler(clock, NO_JITTER)
    f = fleet(clock, backend("b1", max_num_seqs=1))
    _ticket(s.submit(request(clock), f))
    past = _decision(s.submit(request(clock, deadline_in=0.0), f))
    assert (past.decision, past.reason) == (DecisionKind.REJECT, Reason.DEADLINE_INFEASIBLE)
    _decision(s.submit(request(clock, request_id="patient"), f))
    _decision(s.submit(request(clock, request_id="hurried", deadline_in=5.0), f))
    assert s.next_wakeup() == clock.now + 5.0
    clock.advance(4.999)
    assert s.poll(f) == []
    clock.advance(0.001)
    (gone,) = s.poll(f)
    assert isinstance(gone, Decision)
    assert (gone.request_id, gone.reason) == ("hurried", Reason.DEADLINE_EXPIRED)
    clock.advance(s.policy.queue.max_wait_s - 5.0)
    (late,) = s.poll(f)
    assert isinstance(late, Decision) and (late.request_id, late.reason) == (
        "patient",
        Reason.OVERLOADED,
    )


def test_cancel_and_release_of_unknown_ids_change_nothing() -> None:
    clock = ManualClock()
    s: Scheduler = scheduler(clock, NO_JITTER)
    f = fleet(clock, backend("b1", max_num_seqs=1))
    t = _ticket(s.submit(request(clock, prompt=10, output=10), f))
    _decision(s.submit(request(clock, request_id="q", prompt=5, output=5), f))
    assert not s.cancel("nobody")
    assert s.cancel("q") and not s.cancel("q")
    st = s.stats()
    assert (st.queued, st.queued_tokens, st.in_flight) == (0, 0, 1)
    s.release(t, Ending(Outcome.CANCELLED))
    assert s.stats().released_tokens == 20


def _skips_then_room(ahead: int) -> list[Ticket | Decision]:
    """``ahead`` queued requests for a full model, then one for a model with room: what one
    poll gives."""
    clock = ManualClock()
    s = scheduler(clock, NO_JITTER)
    f = fleet(
        clock,
        backend("full", models=("x",), max_num_seqs=1),
        backend("free", models=("m",), max_num_seqs=4),
    )
    _ticket(s.submit(request(clock, tenant="t", model="x"), f))
    for _ in range(ahead):
        _decision(s.submit(request(clock, tenant="t", model="x"), f))
    _decision(s.submit(request(clock, tenant="t", model="m", request_id="behind"), f))
    return s.poll(f)


def test_a_poll_sets_aside_at_most_64_requests_without_room() -> None:
    (out,) = _skips_then_room(63)  # 63 set aside, then the 64th is looked at
    assert isinstance(out, Ticket) and out.request_id == "behind"
    assert _skips_then_room(64) == []  # 64 set aside: the poll stops there


def test_a_fresh_scheduler_reports_nothing_yet() -> None:
    clock = ManualClock()
    st = scheduler(clock).stats()
    assert (st.queued, st.queued_tokens, st.in_flight, st.in_flight_tokens) == (0, 0, 0, 0)
    assert (st.saturation, st.charged_tokens, st.released_tokens) == (0.0, 0, 0)
    assert (st.oldest_age_s, st.drain_tokens_per_s, st.active_steps) == (None, None, ())


def test_only_completed_requests_teach_the_execution_time() -> None:
    clock = ManualClock()
    s = scheduler(clock, NO_JITTER)
    f = fleet(clock, backend("b1", max_num_seqs=64))
    for outcome, latency in [(Outcome.FAILED, 9.0)] * 5 + [(Outcome.COMPLETED, 2.0)] * 5:
        t = _ticket(s.submit(request(clock, prompt=60, output=40), f))
        s.release(t, Ending(outcome, latency_s=latency))
    assert s._exec.p95(100) == 2.0


def test_next_wakeup_is_the_earlier_of_an_expiry_and_a_prefill_estimate() -> None:
    clock = ManualClock()
    s = scheduler(clock, {"prefill_backlog": {"ttft_target_s": 0.5}})
    f = fleet(clock, backend(max_num_seqs=64, prefill_tokens_per_s=1000.0))
    _ticket(s.submit(request(clock, prompt=1500), f))  # estimated prefilled in 1.5 s
    _decision(s.submit(request(clock, prompt=1500, deadline_in=0.5), f))
    assert s.next_wakeup() == clock.now + 0.5
    _decision(s.submit(request(clock, prompt=1500), f))
    clock.advance(0.6)
    assert s.poll(f) != [] and s.next_wakeup() == clock.now - 0.6 + 1.5


def test_a_completed_release_settles_the_prefill_ahead_and_a_failed_one_only_its_own() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock, backend(max_num_seqs=64, prefill_tokens_per_s=1e6))
    a, b, c = (_ticket(s.submit(request(clock, prompt=p), f)) for p in (300, 200, 50))
    prefill = s._place.prefill
    assert prefill is not None and prefill.pending_tokens() == {"b1": 550}
    s.release(c, Ending(Outcome.FAILED))
    assert prefill.pending_tokens() == {"b1": 500}
    s.release(b, Ending(Outcome.COMPLETED))
    assert prefill.pending_tokens() == {"b1": 0}
    s.release(a, Ending(Outcome.COMPLETED))
