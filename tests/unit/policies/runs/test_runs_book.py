"""The run book through the scheduler, with exact amounts: reservations, precedence of
started runs, fan-out ceilings, and the release of a run on each of its ends."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from policies.engine.scheduler import Scheduler, Ticket
from policies.runs.book import RunBook
from policies.runs.run import Reservation, RunEnd
from policies.runs.run_state import EndedRunState, OpenRunState
from policies.runs.runs_params import RunsParams
from policies.types import Decision, DecisionKind, Outcome, Reason, RequestInfo, RunHints
from tests.unit.policies.endings import used
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler
from tests.unit.policies.helpers import queued as queued_call


def runs_on(clock: ManualClock, **params: Any) -> Scheduler:
    return scheduler(clock, {"runs": {"enabled": True, **params}})


def runs_off(clock: ManualClock) -> Scheduler:
    return scheduler(clock, {"runs": {"enabled": False}})


def call(clock: ManualClock, run_id: str, tenant: str = "t1", **hints: Any) -> RequestInfo:
    """A call of 100 prompt + 100 output estimated tokens (200 in all)."""
    deadline_in = hints.pop("deadline_in", None)
    deadline = None if deadline_in is None else clock.now + deadline_in
    return request(clock, tenant=tenant, run=RunHints(run_id, deadline=deadline, **hints))


def reserved(s: Scheduler, run_id: str, tenant: str = "t1") -> Any:
    state = s.runs.state(tenant, run_id)
    assert isinstance(state, OpenRunState)
    res = state.reserved
    return {
        "tokens": res.tokens,
        "calls": res.calls,
        "branches": res.branches,
        "source": res.source,
    }


def test_hints_reserve_the_run_and_each_call_draws_on_it() -> None:
    clock = ManualClock()
    s = runs_on(clock)
    f = fleet(clock)
    first = s.submit(call(clock, "a", tokens=1000, calls=5, branches=3), f)
    assert isinstance(first, Ticket)
    assert reserved(s, "a") == {"tokens": 1000, "calls": 5, "branches": 3, "source": "hints"}
    assert s.runs.stats().promised_tokens == 800  # 1000 reserved - 200 drawn at dispatch
    s.release(first, used(100, 50))
    assert s.runs.stats().promised_tokens == 850  # the draw corrected to the 150 used
    second = s.submit(call(clock, "a"), f)
    assert isinstance(second, Ticket)
    assert s.runs.stats().promised_tokens == 650
    assert s.runs.stats().open_runs == 1 and s.runs.stats().started == {"t1": 1}


def test_without_hints_a_new_flow_reserves_default_calls_of_its_first_call() -> None:
    clock = ManualClock()
    s = runs_on(clock, default_calls=3)
    s.submit(call(clock, "a"), fleet(clock))
    assert reserved(s, "a") == {"tokens": 600, "calls": 3, "branches": None, "source": "default"}


def test_a_flow_learns_its_runs_from_those_that_completed() -> None:
    clock = ManualClock()
    s = runs_on(clock)
    f = fleet(clock)
    for _ in range(3):
        t = s.submit(call(clock, "done"), f)
        assert isinstance(t, Ticket)
        s.release(t, used(100, 60))
    assert s.runs.end("t1", "done", cancel=False) == []
    (ended,) = s.runs.take_ends()
    assert (ended.end, ended.calls, ended.spent_tokens) == (RunEnd.COMPLETED, 3, 480)
    s.submit(call(clock, "next"), f)
    assert reserved(s, "next") == {"tokens": 480, "calls": 3, "branches": None, "source": "learned"}
    assert s.runs.stats().reservation_error == (800 - 480) / 480  # the default reserved 800


def _next_after_a_started_run_and_a_new_run(
    s: Scheduler,
    clock: ManualClock,
    a_calls: int = 4,
    a_tokens: int = 1000,
    a_deadline_in: float | None = None,
) -> tuple[str, str, list[str]]:
    """One slot. Run ``a``'s first call (of ``a_calls`` reserved, ``a_tokens``) ran; run
    ``b``'s first call queued; then ``a``'s second call queued behind it. Returns (a's
    second, b's first) request ids and those the next poll dispatches. One second passes
    between ``a``'s start and the poll; ``a`` has drawn 200 tokens by then."""
    f = fleet(clock, backend(max_num_seqs=1))
    hints = {} if a_deadline_in is None else {"deadline_in": a_deadline_in}
    a1 = s.submit(call(clock, "a", calls=a_calls, tokens=a_tokens, **hints), f)
    assert isinstance(a1, Ticket)
    clock.advance(1)
    b1 = s.submit(call(clock, "b", calls=4, tokens=1000), f)
    s.release(a1, used(100, 100))
    a2 = s.submit(call(clock, "a"), f)
    assert isinstance(b1, Decision) and isinstance(a2, Decision)
    out = s.poll(fleet(clock, backend(max_num_seqs=1)))
    return a2.request_id, b1.request_id, [t.request_id for t in out if isinstance(t, Ticket)]


# Which the next poll dispatches ("a": a's second call, "b": b's first) with the runs' parameters
# (None: a scheduler without runs) and a's reservation (calls, tokens) and deadline.
PRECEDENCE = [
    pytest.param({}, 4, 1000, None, "a", id="a-started-run-before-a-new-runs-first-call"),
    # a: 200 of 1,000 tokens drawn (0.2) with 1 s of its 100 s gone (0.01); b's run has not
    # started (its first call is queued), so its missing deadline does not count
    pytest.param({}, 4, 1000, 100.0, "b", id="keeping-its-pace-leaves-the-older-its-turn"),
    # 1 s of 1.5 s gone (0.67) against 0.2 of its tokens drawn
    pytest.param({}, 4, 1000, 1.5, "a", id="behind-its-pace-goes-first"),
    pytest.param({"precedence": "always"}, 4, 1000, 100.0, "a", id="always-whatever-its-pace"),
    pytest.param(None, 4, 1000, None, "b", id="without-runs-the-older-goes-first"),
    # a reserved one call: its second is beyond
    pytest.param({}, 1, 200, None, "b", id="beyond-the-reservation-no-precedence"),
]


@pytest.mark.parametrize(("runs", "a_calls", "a_tokens", "a_deadline_in", "first"), PRECEDENCE)
def test_a_started_runs_next_call_or_the_older_first_call_of_a_new_run_goes_first(
    runs: dict[str, Any] | None,
    a_calls: int,
    a_tokens: int,
    a_deadline_in: float | None,
    first: str,
) -> None:
    clock = ManualClock()
    s = runs_off(clock) if runs is None else runs_on(clock, **runs)
    a2, b1, dispatched = _next_after_a_started_run_and_a_new_run(
        s, clock, a_calls, a_tokens, a_deadline_in
    )
    assert dispatched == [{"a": a2, "b": b1}[first]]


def test_precedence_stays_inside_the_tenant_fair_share() -> None:
    clock = ManualClock()
    s = runs_on(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    a1 = s.submit(call(clock, "a", calls=4, tokens=1000), f)  # t1 is charged 200
    assert isinstance(a1, Ticket)
    b1 = s.submit(call(clock, "b", tenant="t2", calls=4, tokens=1000), f)
    s.release(a1, used(100, 100))
    s.submit(call(clock, "a"), f)
    out = s.poll(f)
    assert isinstance(b1, Decision)
    assert [t.request_id for t in out if isinstance(t, Ticket)] == [b1.request_id]


def test_calls_beyond_the_branch_limit_wait_in_the_run_queue() -> None:
    clock = ManualClock()
    s = runs_on(clock)
    f = fleet(clock, backend(max_num_seqs=8))
    out = [s.submit(call(clock, "a", branches=2), f) for _ in range(4)]
    tickets = [o for o in out if isinstance(o, Ticket)]
    held = [o for o in out if isinstance(o, Decision)]
    assert len(tickets) == 2 and [d.queue_position for d in held] == [1, 2]
    assert s.stats().queued == 0  # not in the tenant's queue
    assert s.runs.stats().held_calls == 2
    assert s.poll(f) == []
    s.release(tickets[0], used(100, 100))
    moved = s.poll(f)
    assert [t.request_id for t in moved if isinstance(t, Ticket)] == [held[0].request_id]
    assert s.runs.stats().held_calls == 1


def test_cancel_refuses_queued_calls_names_those_in_flight_and_releases_the_run() -> None:
    clock = ManualClock()
    s = runs_on(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    running = s.submit(call(clock, "a", tokens=1000, branches=2), f)
    queued = s.submit(call(clock, "a"), f)
    held = s.submit(call(clock, "a"), f)
    assert isinstance(running, Ticket) and isinstance(queued, Decision)
    assert isinstance(held, Decision) and s.runs.stats().held_calls == 1
    assert s.runs.end("t2", "a") is None  # another tenant's run is not visible
    refused = s.runs.end("t1", "a")
    assert refused is not None
    assert sorted(d.request_id for d in refused) == sorted([queued.request_id, held.request_id])
    assert {d.reason for d in refused} == {Reason.RUN_CANCELLED}
    assert s.stats().queued == 0 and s.runs.stats().held_calls == 0
    assert s.runs.stats().promised_tokens == 0
    (ended,) = s.runs.take_ends()
    assert (ended.end, ended.cut) == (RunEnd.CANCELLED, (running.request_id,))
    s.release(running, used(100, 7, Outcome.CANCELLED))
    assert s.runs.stats().wasted_tokens == {"t1": 107}
    late = s.submit(call(clock, "a"), f)
    assert isinstance(late, Decision) and late.reason is Reason.RUN_CANCELLED
    assert s.runs.state("t1", "a") == EndedRunState("a", Reason.RUN_CANCELLED)
    assert s.stats().in_flight == 0 and s.runs.stats().ended == {("t1", "cancelled"): 1}


def test_a_passing_run_deadline_abandons_the_run() -> None:
    clock = ManualClock()
    s = runs_on(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    running = s.submit(call(clock, "a", deadline_in=5.0), f)
    queued = s.submit(call(clock, "a"), f)
    assert isinstance(running, Ticket) and isinstance(queued, Decision)
    assert s.next_wakeup() == clock.now + 5.0
    clock.advance(5.0)
    (refused,) = s.poll(f)
    assert isinstance(refused, Decision)
    assert (refused.request_id, refused.reason) == (queued.request_id, Reason.RUN_DEADLINE_EXPIRED)
    (ended,) = s.runs.take_ends()
    assert (ended.end, ended.cut) == (RunEnd.ABANDONED, (running.request_id,))
    assert s.runs.stats().promised_tokens == 0 and s.runs.stats().open_runs == 0


def test_an_idle_run_ends_completed_at_its_last_call() -> None:
    clock = ManualClock()
    s = runs_on(clock, idle_timeout_s=30.0)
    f = fleet(clock)
    t = s.submit(call(clock, "a"), f)
    assert isinstance(t, Ticket)
    clock.advance(2.0)
    s.release(t, used(100, 100))
    assert s.next_wakeup() == clock.now + 30.0
    clock.advance(29.0)
    assert s.poll(f) == [] and s.runs.take_ends() == []
    clock.advance(1.0)
    assert s.poll(f) == []
    (ended,) = s.runs.take_ends()
    assert ended.end is RunEnd.COMPLETED and ended.ended_at - ended.started_at == 2.0
    assert s.runs.stats().promised_tokens == 0 and s.runs.stats().wasted_tokens == {}


def test_a_late_call_opens_again_a_run_that_ended_idle_but_not_one_its_client_ended() -> None:
    """An agent whose tool ran longer than the idle timeout is not refused; a run its
    client completed or cancelled is over (409)."""
    clock = ManualClock()
    s = runs_on(clock, idle_timeout_s=30.0)
    f = fleet(clock, backend(max_num_seqs=8))
    for run_id in ("idle", "done", "gone"):
        t = s.submit(call(clock, run_id), f)
        assert isinstance(t, Ticket)
        s.release(t, used(100, 100))
    assert s.runs.end("t1", "done", cancel=False) == []
    assert s.runs.end("t1", "gone") == []
    clock.advance(30.0)
    s.poll(f)
    ends = {e.run_id: e.end for e in s.runs.take_ends()}
    assert ends == {"idle": RunEnd.COMPLETED, "done": RunEnd.COMPLETED, "gone": RunEnd.CANCELLED}
    late = s.submit(call(clock, "idle"), f)
    assert isinstance(late, Ticket)
    assert isinstance(s.runs.state("t1", "idle"), OpenRunState)
    assert s.runs.stats().open_runs == 1 and s.runs.stats().started == {"t1": 4}
    for run_id, reason in (("done", Reason.RUN_ENDED), ("gone", Reason.RUN_CANCELLED)):
        refused = s.submit(call(clock, run_id), f)
        assert isinstance(refused, Decision) and refused.reason is reason


def test_a_run_the_gateway_shed_stays_ended_after_its_idle_timeout() -> None:
    """Its call expired in the queue and its client was not back within the idle timeout:
    under overload that is a run that cannot finish, and its late call is refused (409)."""
    clock = ManualClock()
    s = runs_on(clock, idle_timeout_s=30.0)
    f = fleet(clock, backend(max_num_seqs=1))
    first = s.submit(call(clock, "a"), f)
    assert isinstance(first, Ticket)
    s.release(first, used(100, 100))
    blocker = s.submit(request(clock, tenant="t2"), f)
    waiting = s.submit(call(clock, "a"), f)
    assert isinstance(blocker, Ticket) and isinstance(waiting, Decision)
    clock.advance(30.0)  # the queue bound (max_wait_s 30) and the idle timeout both pass
    expired = [d for d in s.poll(f) if isinstance(d, Decision)]
    assert [(d.request_id, d.reason) for d in expired] == [(waiting.request_id, Reason.OVERLOADED)]
    clock.advance(30.0)
    s.poll(f)
    (ended,) = s.runs.take_ends()
    assert (ended.run_id, ended.end) == ("a", RunEnd.COMPLETED)  # its last call completed
    s.release(blocker, used(100, 100))
    late = s.submit(call(clock, "a"), f)
    assert isinstance(late, Decision) and late.reason is Reason.RUN_ENDED
    assert s.runs.stats().open_runs == 0


def test_a_call_refused_at_submit_also_makes_the_idle_end_final_until_one_is_served() -> None:
    """A refusal of a call of an open run (here the gateway queue's token bound) marks the
    run shed; a later call that is served clears it, and the run's idle end is then the
    client's pause (its late call opens it again)."""
    clock = ManualClock()
    s = scheduler(
        clock,
        {"runs": {"enabled": True, "idle_timeout_s": 30.0}, "queue": {"max_queued_tokens": 100}},
    )
    f = fleet(clock, backend(max_num_seqs=1))
    first = s.submit(call(clock, "shed"), f)
    assert isinstance(first, Ticket)
    refused = s.submit(call(clock, "shed"), f)  # 200 tokens over the bound of 100
    assert isinstance(refused, Decision) and refused.reason is Reason.QUEUE_FULL
    s.release(first, used(100, 100))
    clock.advance(30.0)
    s.poll(f)
    assert [e.run_id for e in s.runs.take_ends()] == ["shed"]
    late = s.submit(call(clock, "shed"), f)
    assert isinstance(late, Decision) and late.reason is Reason.RUN_ENDED

    first = s.submit(call(clock, "served"), f)
    assert isinstance(first, Ticket)
    refused = s.submit(call(clock, "served"), f)
    assert isinstance(refused, Decision) and refused.reason is Reason.QUEUE_FULL
    s.release(first, used(100, 100))
    retried = s.submit(call(clock, "served"), f)  # its retry is served
    assert isinstance(retried, Ticket)
    s.release(retried, used(100, 100))
    clock.advance(30.0)
    s.poll(f)
    assert [e.run_id for e in s.runs.take_ends()] == ["served"]
    assert isinstance(s.submit(call(clock, "served"), f), Ticket)


def test_an_idle_run_whose_last_call_failed_is_abandoned_and_its_tokens_wasted() -> None:
    clock = ManualClock()
    s = runs_on(clock, idle_timeout_s=30.0)
    t = s.submit(call(clock, "a"), fleet(clock))
    assert isinstance(t, Ticket)
    s.release(t, used(100, 20, Outcome.FAILED))
    clock.advance(30.0)
    s.poll(fleet(clock))
    (ended,) = s.runs.take_ends()
    assert ended.end is RunEnd.ABANDONED and s.runs.stats().wasted_tokens == {"t1": 120}


def test_a_new_run_beyond_the_promise_horizon_is_refused() -> None:
    clock = ManualClock()
    s = runs_on(clock, promise_horizon_s=10.0)
    f = fleet(clock)
    plain = s.submit(request(clock), f)  # measures the drain: 1000 tokens in 1 s busy
    assert isinstance(plain, Ticket)
    clock.advance(1.0)
    s.release(plain, used(500, 500))
    first = s.submit(call(clock, "a", tokens=6000), f)
    assert isinstance(first, Ticket)
    assert s.runs.stats().promised_tokens == 5800
    second = s.submit(call(clock, "b", tokens=4400), f)  # 5800 + 4400: 10.2 s
    assert isinstance(second, Decision)
    assert second.decision is DecisionKind.REJECT
    assert second.reason is Reason.RUN_RESERVATIONS_FULL
    assert s.runs.state("t1", "b") is None  # nothing was taken
    fits = s.submit(call(clock, "c", tokens=4200), f)  # 5800 + 4200 = 10 s of drain
    assert isinstance(fits, Ticket)


def test_runs_off_ignores_run_hints() -> None:
    clock = ManualClock()
    s = runs_off(clock)
    f = fleet(clock, backend(max_num_seqs=8))
    out = [s.submit(call(clock, "a", branches=1), f) for _ in range(3)]
    assert all(isinstance(o, Ticket) for o in out)
    assert s.runs.state("t1", "a") is None and s.runs.stats().open_runs == 0


def test_a_continuation_set_aside_by_headroom_is_neither_lost_nor_dispatched_twice() -> None:
    clock = ManualClock()
    s = scheduler(
        clock,
        {
            "runs": {"enabled": True},
            "fairness": {"type": "fifo"},
            "limit": {"type": "fixed", "parameters": {"max_in_flight": 4}},
            "headroom": {"reserve_fraction": 0.25, "hold_arrivals": True},
        },
    )
    f = fleet(clock)
    other = s.submit(request(clock, tenant="t2", weight=7.0), f)
    a1 = s.submit(call(clock, "a", calls=4, tokens=1000), f)
    plain = s.submit(request(clock), f)  # t1 holds 2: past its share (0.5) plus 1 reserved
    b1 = s.submit(call(clock, "b", calls=4, tokens=1000), f)
    a2 = s.submit(call(clock, "a"), f)
    assert all(isinstance(t, Ticket) for t in (other, a1, plain))
    assert isinstance(b1, Decision) and isinstance(a2, Decision)
    for _ in range(3):  # t1 is over its share: its calls stay queued, each once
        assert s.poll(f) == [] and s.stats().queued == 2
    assert isinstance(plain, Ticket)
    s.release(plain, used(100, 100))
    first = s.poll(f)
    assert [t.request_id for t in first if isinstance(t, Ticket)] == [a2.request_id]
    assert isinstance(a1, Ticket)
    s.release(a1, used(100, 100))
    second = s.poll(f)
    assert [t.request_id for t in second if isinstance(t, Ticket)] == [b1.request_id]
    assert s.stats().queued == 0 and s.poll(f) == []


def test_precedence_over_many_queued_calls_of_the_same_instant() -> None:
    """Every queued call expires at the same instant (no deadline, one arrival time): the
    queue's heaps order them by sequence, so a continuation taken ahead must not share
    its sequence with the item it left behind (entries themselves do not compare)."""
    clock = ManualClock()
    s = runs_on(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    running = s.submit(call(clock, "a", calls=100, tokens=100_000), f)
    queued = [s.submit(call(clock, f"new{i}"), f) for i in range(40)]
    queued += [s.submit(call(clock, "a"), f) for _ in range(40)]
    assert all(isinstance(d, Decision) for d in queued)
    served: list[str] = []
    while isinstance(running, Ticket):
        s.release(running, used(100, 100))
        s.next_wakeup()  # reads the expiry heap from its front, as the dispatcher does
        out = [t for t in s.poll(f) if isinstance(t, Ticket)]
        served += [t.request_id for t in out]
        running = out[0] if out else None
    assert served[:40] == [d.request_id for d in queued[40:]]  # run a's calls first
    assert sorted(served) == sorted(d.request_id for d in queued)


def test_calls_queued_for_capacity_count_against_the_branch_limit() -> None:
    clock = ManualClock()
    s = scheduler(clock, {"runs": {"enabled": True}, "headroom": {"reserve_fraction": 0.0}})
    f = fleet(clock, backend(max_num_seqs=2))
    fill = [s.submit(request(clock, tenant="t2"), f) for _ in range(2)]
    out = [s.submit(call(clock, "a", branches=2), f) for _ in range(4)]
    assert all(isinstance(d, Decision) for d in out)
    assert s.stats().queued == 2 and s.runs.stats().held_calls == 2
    for ticket in fill:
        assert isinstance(ticket, Ticket)
        s.release(ticket, used(100, 100))
    dispatched = [t for t in s.poll(f) if isinstance(t, Ticket)]
    assert sorted(t.request_id for t in dispatched) == sorted(d.request_id for d in out[:2])
    assert s.poll(f) == [] and s.runs.stats().held_calls == 2


def test_the_ended_runs_remembered_are_the_newest_ended_kept() -> None:
    """Ended run ids are a bounded memory: a long-lived gateway that ends runs forever
    keeps ``ended_kept`` of them (refusing their late calls), and forgets the older ones."""
    clock = ManualClock()
    s = runs_on(clock, ended_kept=3)
    f = fleet(clock)
    for i in range(10):
        t = s.submit(call(clock, f"r{i}"), f)
        assert isinstance(t, Ticket)
        s.release(t, used(100, 100))
        assert s.runs.end("t1", f"r{i}", cancel=False) == []
    ended = [i for i in range(10) if isinstance(s.runs.state("t1", f"r{i}"), EndedRunState)]
    assert ended == [7, 8, 9]
    assert all(s.runs.state("t1", f"r{i}") is None for i in range(7))


def open_run(
    book: RunBook, clock: ManualClock, run_id: str, tokens: int, deadline_in: float | None = 100.0
) -> RequestInfo:
    """A run of 1,000 reserved tokens opened in ``book``, its first call ``tokens`` long."""
    half = tokens // 2
    deadline = None if deadline_in is None else clock.now + deadline_in
    req = request(clock, prompt=half, output=half, run=RunHints(run_id, deadline=deadline))
    book.open(req, Reservation(1000, 4, None, "hints"), clock.now)
    return req


def x_started_y_queued() -> tuple[RunBook, ManualClock, RequestInfo]:
    """Runs ``x`` (its first call of 100 tokens dispatched) and ``y`` (its first call of 20
    queued), each reserving 1,000 tokens with 100 s to its deadline; 9 s later."""
    book, clock = RunBook(), ManualClock()
    book.dispatched(open_run(book, clock, "x", 100), clock.now)
    y = open_run(book, clock, "y", 20)
    book.enqueued(book.runs[("t1", "y")], queued_call(y, 1, clock.now, clock.now + 30))
    clock.advance(9.0)
    return book, clock, y


def test_the_pace_is_summed_over_the_tenant_started_runs() -> None:
    """Both runs reserve 1,000 tokens with 100 s to their deadline. ``x`` draws 100, ``y``
    20: at 9 s ``x`` alone keeps its pace (100 >= 90) but the two together do not (120 <
    180). A run whose first call waits in the queue, another tenant's runs, and a started
    run without a deadline (always behind: nothing says it may wait)."""
    book, clock, y = x_started_y_queued()
    assert not book.behind_pace("t1", clock.now)  # y has not started: x alone, 100 >= 90
    book.dispatched(y, clock.now)
    assert book.behind_pace("t1", clock.now)  # 120 < 90 + 90
    assert not book.behind_pace("t2", clock.now)  # no runs of its own
    book.end(RunsParams(), book.runs[("t1", "y")], RunEnd.COMPLETED, clock.now)
    assert not book.behind_pace("t1", clock.now)  # y's end takes it out of the sum
    book.dispatched(open_run(book, clock, "z", 100, deadline_in=None), clock.now)
    assert book.behind_pace("t1", clock.now)


def test_each_run_keeps_its_own_pace() -> None:
    """The same runs as above, each on its own: at 9 s ``x`` (100 drawn of the 90 its pace
    asks) is ahead, ``y`` (20) behind; a run whose first call waits, a run not open, and a
    started run without a deadline are behind (nothing says they may wait)."""
    book, clock, y = x_started_y_queued()
    assert not book.run_behind_pace("t1", "x", clock.now)
    assert book.run_behind_pace("t1", "y", clock.now)  # not started
    book.dispatched(y, clock.now)
    assert book.run_behind_pace("t1", "y", clock.now)  # 20 < 90
    assert not book.run_behind_pace("t1", "x", clock.now)  # y's pace is not x's
    clock.advance(2.0)
    assert book.run_behind_pace("t1", "x", clock.now)  # 100 < 110
    assert book.run_behind_pace("t1", "nope", clock.now) and book.run_behind_pace("t2", "x", 0)
    book.dispatched(open_run(book, clock, "z", 2000, deadline_in=None), clock.now)
    assert book.run_behind_pace("t1", "z", clock.now)


def test_a_cap_that_spares_runs_behind_pace_cuts_a_run_ahead_of_it() -> None:
    """At saturation the default's output cap is on. With ``skip_runs: behind_pace`` a run's
    first call, and a later call while the run is behind its pace, pass whole; a later call
    of a run ahead of its pace is cut like any call."""
    clock = ManualClock()
    cap = {"name": "cap", "at": 0.5, "action": "cap_max_tokens", "max_tokens": 64}
    s = scheduler(
        clock,
        {"runs": {"enabled": True}, "ladder": {"steps": [{**cap, "skip_runs": "behind_pace"}]}},
    )
    full = fleet(clock, backend(waiting=10.0, kv_cache_usage=0.9))

    def submit(run_id: str) -> Ticket:
        req = call(clock, run_id, deadline_in=100.0, tokens=1000, calls=4)
        out = s.submit(replace(req, max_tokens=500), full)
        assert isinstance(out, Ticket)
        return out

    first = submit("a")
    assert first.request.max_tokens == 500  # not started: spared
    s.release(first, used(100, 500))  # 600 drawn of 1000 at 0 s: ahead of its pace
    clock.advance(10.0)
    ahead = submit("a")
    assert ahead.request.max_tokens == 64 and ahead.decision.degradation.steps == ("cap",)
    s.release(ahead, used(100, 64))  # 764 drawn
    clock.advance(80.0)  # the pace asks 900
    behind = submit("a")
    assert behind.request.max_tokens == 500
    s.release(behind, used(100, 500))
    plain = s.submit(replace(request(clock), max_tokens=500), full)
    assert isinstance(plain, Ticket) and plain.request.max_tokens == 64
