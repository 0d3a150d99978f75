"""The prefill backlog bound: un-prefilled prompt tokens per backend stay within the
measured prefill rate x the TTFT target; the rest waits in the gateway queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from policies.backends import BackendsSnapshot
from policies.engine.prefill_backlog import BackendPrefill, PrefillBacklog, PrefillRate
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, Ending, Outcome
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

ON = {"prefill_backlog": {"enabled": True, "ttft_target_s": 0.5}}
OFF = {"prefill_backlog": {"enabled": False}}


def test_rate_is_tokens_over_busy_seconds_and_forgets_with_the_half_life() -> None:
    rate = PrefillRate(half_life_s=10.0)
    assert rate.tokens_per_s() is None
    rate.add(1000, 0.5, now=0.0)
    rate.add(3000, 0.5, now=0.0)
    assert rate.tokens_per_s() == pytest.approx(4000.0)
    rate.add(100, 1.0, now=10.0)  # the older samples weigh half now
    assert rate.tokens_per_s() == pytest.approx((2000 + 100) / (0.5 + 1.0))


def test_a_first_token_ends_the_prefill_of_everything_sent_before_it() -> None:
    b = BackendPrefill(half_life_s=10.0)
    b.dispatched("big", 1500, now=0.0, streamed=False)
    b.dispatched("small", 50, now=0.1, streamed=True)
    b.dispatched("later", 700, now=0.2, streamed=True)
    b.first_token("small", now=0.4)
    assert b.pending_tokens == 700
    assert b.rate.tokens_per_s() == pytest.approx(1550 / 0.4)
    b.ended("later")
    assert b.pending_tokens == 0


def test_unstreamed_prefill_is_estimated_done_at_the_measured_rate() -> None:
    b = BackendPrefill(half_life_s=10.0)
    b.dispatched("probe", 1000, now=0.0, streamed=True)
    b.first_token("probe", now=1.0)  # 1,000 tokens/s
    b.dispatched("a", 500, now=2.0, streamed=False)
    b.dispatched("b", 500, now=2.0, streamed=False)
    assert b.estimate(2.4) == pytest.approx(2.5)  # a is due at 2.5
    assert b.pending_tokens == 1000
    assert b.estimate(2.6) == pytest.approx(3.0)  # a done; b due at 3.0
    assert b.pending_tokens == 500
    assert b.estimate(3.0) is None and b.pending_tokens == 0


def test_nothing_is_estimated_before_a_rate_was_measured() -> None:
    b = BackendPrefill(half_life_s=10.0)
    b.dispatched("a", 500, now=0.0, streamed=False)
    assert b.estimate(100.0) is None
    assert b.pending_tokens == 500


def test_a_completed_request_settles_the_backlog_ahead_without_a_rate_sample() -> None:
    b = BackendPrefill(half_life_s=10.0)
    b.dispatched("a", 500, now=0.0, streamed=False)
    b.dispatched("b", 500, now=0.0, streamed=False)
    b.ended("b", completed=True)
    assert b.pending_tokens == 0 and b.rate.tokens_per_s() is None


def test_the_bound_admits_one_request_on_an_empty_backend_whatever_its_size() -> None:
    backlog = PrefillBacklog(PrefillBacklogParams(ttft_target_s=0.5))
    b = backlog.backend("b1")
    b.dispatched("probe", 100, now=0.0, streamed=True)
    b.first_token("probe", now=0.1)  # 1,000 tokens/s: a bound of 500 tokens
    assert backlog.bound("b1") == pytest.approx(500.0)
    assert backlog.admits("b1", 5000)
    b.dispatched("huge", 5000, now=1.0, streamed=False)
    assert not backlog.admits("b1", 600)


def test_short_prompts_line_up_behind_an_oversized_head_up_to_the_bound() -> None:
    """The head's prefill delays them however long they wait in the gateway; what they
    add behind it is bounded, and a second oversized prompt still waits."""
    backlog = PrefillBacklog(PrefillBacklogParams(ttft_target_s=0.5))
    b = backlog.backend("b1")
    b.dispatched("probe", 100, now=0.0, streamed=True)
    b.first_token("probe", now=0.1)  # 1,000 tokens/s: a bound of 500 tokens
    b.dispatched("huge", 5000, now=1.0, streamed=False)
    assert backlog.admits("b1", 50)
    assert not backlog.admits("b1", 5000)
    b.dispatched("short", 450, now=1.0, streamed=True)
    assert backlog.admits("b1", 50) and not backlog.admits("b1", 51)
    b.first_token("short", now=2.0)  # ends the head's prefill too
    assert b.pending_tokens == 0 and backlog.admits("b1", 5000)


def test_a_head_within_the_bound_still_counts() -> None:
    backlog = PrefillBacklog(PrefillBacklogParams(ttft_target_s=0.5))
    b = backlog.backend("b1")
    b.dispatched("probe", 100, now=0.0, streamed=True)
    b.first_token("probe", now=0.1)
    b.dispatched("medium", 400, now=1.0, streamed=False)
    assert backlog.admits("b1", 100) and not backlog.admits("b1", 101)


def _measured(
    raw: Mapping[str, Any] = ON, prober: str = "probe"
) -> tuple[ManualClock, Scheduler, BackendsSnapshot]:
    """A scheduler of ``raw`` over one backend of 64 slots that has measured a prefill rate
    of 1,000 tokens/s (a probe of 1,000 prompt tokens from tenant ``prober``, its first
    token 1 s later): with ``ON``, a bound of 500 tokens."""
    clock = ManualClock()
    s = scheduler(clock, raw)
    f = fleet(clock, backend(max_num_seqs=64))
    probe = s.submit(request(clock, tenant=prober, prompt=1000, stream=True), f)
    assert isinstance(probe, Ticket)
    clock.advance(1.0)
    s.first_token(probe)
    s.release(probe, Ending(Outcome.COMPLETED))
    return clock, s, f


def test_scheduler_holds_a_flood_of_long_prompts_in_its_queue_and_lets_a_short_one_pass() -> None:
    clock, s, f = _measured()  # 1,000 tokens/s: a bound of 500 tokens
    flood = [s.submit(request(clock, tenant="noisy", prompt=1500), f) for _ in range(8)]
    assert sum(isinstance(x, Ticket) for x in flood) == 1  # the rest waits in the gateway
    victim = s.submit(request(clock, tenant="victim", prompt=50, stream=True), f)
    assert isinstance(victim, Decision)
    order: list[str] = []
    while "victim" not in order:
        clock.advance(1.6)  # each long prompt is estimated prefilled 1.5 s after the last
        out = [t.request.tenant for t in s.poll(f) if isinstance(t, Ticket)]
        assert out.count("noisy") <= 1  # one at a time: 1,500 tokens exceed the bound alone
        order += out
    assert order in (["victim"], ["noisy", "victim"])  # not behind the 6 others (fair share)


def test_without_the_bound_the_whole_flood_goes_to_the_engine() -> None:
    clock, s, f = _measured(OFF)
    flood = [s.submit(request(clock, tenant="noisy", prompt=1500), f) for _ in range(8)]
    assert all(isinstance(x, Ticket) for x in flood)


def test_next_wakeup_is_the_estimated_end_of_the_prefill_ahead() -> None:
    clock, s, f = _measured()
    start = clock.now
    first = s.submit(request(clock, tenant="noisy", prompt=1500), f)
    second = s.submit(request(clock, tenant="noisy", prompt=1500), f)
    assert isinstance(first, Ticket) and isinstance(second, Decision)
    assert s.next_wakeup() == pytest.approx(start + 1.5)


def test_a_streamed_first_token_opens_room_at_once() -> None:
    clock, s, f = _measured()
    first = s.submit(request(clock, tenant="a", prompt=1500, stream=True), f)
    second = s.submit(request(clock, tenant="b", prompt=1500, stream=True), f)
    assert isinstance(first, Ticket) and isinstance(second, Decision)
    assert s.poll(f) == []
    clock.advance(0.2)
    s.first_token(first)
    (out,) = s.poll(f)
    assert isinstance(out, Ticket) and out.request.tenant == "b"


def test_released_requests_leave_no_backlog_behind() -> None:
    clock, s, f = _measured()
    t = s.submit(request(clock, tenant="a", prompt=1500, stream=True), f)
    assert isinstance(t, Ticket)
    s.release(t, Ending(Outcome.FAILED))
    s.release(t, Ending(Outcome.FAILED))  # idempotent
    s.first_token(t)  # late: ignored
    prefill = s._place.prefill
    assert prefill is not None and prefill.pending_tokens() == {"b1": 0}


def test_the_bound_picks_another_backend_with_room() -> None:
    clock = ManualClock()
    s = scheduler(clock, ON)
    f = fleet(clock, backend("b1", max_num_seqs=64), backend("b2", max_num_seqs=64))
    for name in ("b1", "b2"):
        prefill = s._place.prefill
        assert prefill is not None
        prefill.backend(name).rate.add(1000, 1.0, clock.now)
    out = [s.submit(request(clock, tenant="noisy", prompt=1500), f) for _ in range(3)]
    placed = [x.backend for x in out if isinstance(x, Ticket)]
    assert sorted(placed) == ["b1", "b2"]


def test_a_swap_keeps_the_measured_rate_and_the_pending_prompts() -> None:
    clock, s, f = _measured()
    s.submit(request(clock, tenant="noisy", prompt=1500), f)
    before = s._place.prefill
    s.swap(scheduler(clock, {"prefill_backlog": {"ttft_target_s": 2.0}}).policy)
    assert s._place.prefill is before and before is not None
    assert before.pending_tokens() == {"b1": 1500}
    assert before.bound("b1") == pytest.approx(2000.0)


def test_a_long_prompt_held_by_the_bound_does_not_block_a_short_one_behind_it() -> None:
    clock, s, f = _measured()  # a bound of 500 tokens
    first = s.submit(request(clock, tenant="noisy", prompt=300, stream=True), f)
    held = s.submit(request(clock, tenant="noisy", prompt=1500), f)
    short = s.submit(request(clock, tenant="victim", prompt=50, stream=True), f)
    assert isinstance(first, Ticket) and isinstance(held, Decision)
    assert isinstance(short, Decision)  # others are queued: it goes through poll
    (out,) = s.poll(f)
    assert isinstance(out, Ticket) and out.request.tenant == "victim"


def test_a_short_turn_is_dispatched_at_once_behind_an_oversized_prompt() -> None:
    clock, s, f = _measured()  # a bound of 500 tokens
    big = s.submit(request(clock, tenant="noisy", prompt=3000), f)
    short = s.submit(request(clock, tenant="victim", prompt=50, stream=True), f)
    other_big = s.submit(request(clock, tenant="noisy", prompt=3000), f)
    assert isinstance(big, Ticket) and isinstance(short, Ticket)
    assert isinstance(other_big, Decision)


BETWEEN = {"prefill_backlog": {"enabled": True, "ttft_target_s": 0.5, "between_tenants": True}}


def test_between_tenants_a_tenant_alone_sends_its_prompts_to_the_engine() -> None:
    """Alone, its prompts wait behind its own in its own order wherever they wait."""
    clock, s, f = _measured(BETWEEN, prober="agents")  # a bound of 500 tokens
    flood = [s.submit(request(clock, tenant="agents", prompt=1500), f) for _ in range(8)]
    assert all(isinstance(x, Ticket) for x in flood)


def test_between_tenants_the_bound_holds_while_another_tenant_is_active() -> None:
    clock, s, f = _measured(BETWEEN, prober="victim")
    flood = [s.submit(request(clock, tenant="noisy", prompt=1500), f) for _ in range(8)]
    assert sum(isinstance(x, Ticket) for x in flood) == 1  # the victim is active: held
    victim = s.submit(request(clock, tenant="victim", prompt=50, stream=True), f)
    assert isinstance(victim, Decision)  # behind the queue, not behind the whole flood
    (out,) = [t for t in s.poll(f) if isinstance(t, Ticket)]
    assert out.request.tenant == "victim"


def test_between_tenants_the_bound_lifts_once_the_other_tenant_left_the_window() -> None:
    clock, s, f = _measured({**BETWEEN, "headroom": {"active_window_s": 2.0}}, prober="victim")
    first = s.submit(request(clock, tenant="noisy", prompt=1500, stream=True), f)
    held = s.submit(request(clock, tenant="noisy", prompt=1500), f)
    assert isinstance(first, Ticket) and isinstance(held, Decision)
    assert s.poll(f) == []  # its first token not back: the victim is still active
    clock.advance(1.5)  # past the window since the victim submitted (1 s before the flood)
    f = fleet(clock, backend(max_num_seqs=64))
    later = s.submit(request(clock, tenant="noisy", prompt=1500), f)
    assert isinstance(later, Decision)  # behind the one queued
    out = [t for t in s.poll(f) if isinstance(t, Ticket)]
    assert [t.request.request_id for t in out] == [held.request_id, later.request_id]


def test_by_default_the_bound_holds_a_tenant_alone_too() -> None:
    clock, s, f = _measured(prober="agents")
    flood = [s.submit(request(clock, tenant="agents", prompt=1500), f) for _ in range(8)]
    assert sum(isinstance(x, Ticket) for x in flood) == 1
