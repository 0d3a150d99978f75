"""The four outcomes of the minimal default policy, and the contract's lifecycle rules."""

from __future__ import annotations

import pytest

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import DuplicateRequestId, Scheduler, Ticket
from policies.types import Decision, DecisionKind, Ending, Outcome, Reason, Usage
from tests.unit.policies.helpers import ManualClock, backend, down, fleet, request, scheduler


def test_admits_when_backend_has_room() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    out = s.submit(request(clock), fleet(clock))
    assert isinstance(out, Ticket)
    assert out.decision.decision is DecisionKind.ADMIT
    assert out.backend == "b1"


def test_no_backend_rejects_at_once_with_retry_after() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    out = s.submit(request(clock), fleet(clock, down()))
    assert isinstance(out, Decision)
    assert out.reason is Reason.NO_HEALTHY_BACKEND
    assert out.retry_after_s is not None and out.retry_after_s > 0
    assert s.stats().queued == 0 and s.stats().in_flight == 0


def _one_seat_taken() -> tuple[Scheduler, BackendsSnapshot, Ticket, Decision]:
    """A scheduler in front of one backend with one seat: ``first`` holds the seat,
    ``second`` is answered with a decision."""
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    first = s.submit(request(clock), f)
    second = s.submit(request(clock), f)
    assert isinstance(first, Ticket) and isinstance(second, Decision)
    return s, f, first, second


def test_delays_when_engine_is_full_then_dispatches_on_release() -> None:
    s, f, first, second = _one_seat_taken()
    assert second.decision is DecisionKind.DELAY
    assert second.queue_position == 1
    assert s.poll(f) == []
    s.release(first, Ending(Outcome.COMPLETED, Usage(100, 50), latency_s=1.0))
    out = s.poll(f)
    assert len(out) == 1 and isinstance(out[0], Ticket)
    assert out[0].request_id == second.request_id


def test_queued_request_expires_at_its_deadline() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    s.submit(request(clock), f)
    delayed = s.submit(request(clock, deadline_in=2.0), f)
    assert isinstance(delayed, Decision)
    assert s.next_wakeup() == clock.now + 2.0
    clock.advance(2.0)
    out = s.poll(f)
    assert len(out) == 1 and isinstance(out[0], Decision)
    assert out[0].reason is Reason.DEADLINE_EXPIRED
    assert out[0].retry_after_s is not None
    assert s.stats().queued == 0


def test_degrades_max_tokens_when_backends_are_saturated() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock, backend(waiting=0.0, kv_cache_usage=0.85))
    out = s.submit(request(clock, output=2000, max_tokens=2000), f)
    assert isinstance(out, Ticket)
    assert out.decision.decision is DecisionKind.DEGRADE
    cap = out.decision.degradation.max_tokens
    assert cap is not None and cap < 2000
    assert out.request.max_tokens == cap and out.request.estimate.output_tokens == cap


def test_cancel_removes_queued_request_and_release_is_idempotent() -> None:
    s, f, first, delayed = _one_seat_taken()
    assert s.cancel(delayed.request_id) is True
    assert s.cancel(delayed.request_id) is False
    s.release(first, Ending(Outcome.COMPLETED))
    s.release(first, Ending(Outcome.COMPLETED))
    st = s.stats()
    assert st.queued == 0 and st.in_flight == 0
    assert st.charged_tokens == st.released_tokens
    assert s.poll(f) == []


def test_queue_wait_bound_applies_only_without_a_deadline() -> None:
    clock = ManualClock()
    s = scheduler(clock, {"queue": {"max_wait_s": 5}})
    f = fleet(clock, backend(max_num_seqs=1))
    s.submit(request(clock), f)
    patient = s.submit(request(clock, deadline_in=60.0), f)
    plain = s.submit(request(clock), f)
    assert isinstance(patient, Decision) and isinstance(plain, Decision)
    clock.advance(5.0)
    (out,) = s.poll(f)
    assert isinstance(out, Decision) and out.request_id == plain.request_id
    assert out.reason is Reason.OVERLOADED
    assert s.stats().queued == 1 and s.next_wakeup() == clock.now + 55.0


def test_a_live_request_id_cannot_be_submitted_twice() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    running = s.submit(request(clock, request_id="same"), f)
    with pytest.raises(DuplicateRequestId):
        s.submit(request(clock, request_id="same"), f)
    assert isinstance(running, Ticket)
    s.release(running, Ending(Outcome.COMPLETED))
    assert isinstance(s.submit(request(clock, request_id="same"), f), Ticket)  # ended: reusable
    assert s.stats().in_flight == 1
