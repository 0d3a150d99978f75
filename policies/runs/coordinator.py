"""Agent runs inside the scheduler (docs/runs.md): admission, the runs' own queues,
precedence of started runs, and each run's end.

The scheduler holds one ``RunCoordinator`` and calls it where a call of a run passes
(submit, enqueue, dispatch, release, leaving the queue, poll); the coordinator owns the run
book and the calls held in their run's own queue, and reaches back into the scheduler only
through ``RunHost``: the gateway queue, the gates' accounting, refusals and the drain rates.
The gateway reads and ends runs through the same object (``Scheduler.runs``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from policies.contracts import QueuedEntry
from policies.engine.queue_book import QueueBook
from policies.runs.book import RunBook
from policies.runs.run import Reservation, Run, RunEnd, RunEnded, RunStats
from policies.runs.run_state import EndedRunState, RunState, open_state
from policies.runs.runs_params import RunsParams
from policies.types import Clock, Decision, Outcome, Reason, RequestInfo, Usage

Refuse = Callable[[RequestInfo, Reason, float | None, float, tuple[str, ...]], Decision]
"""A REJECT of a request for a reason: (request, reason, seconds, now, the gates that
shadowed it); ``seconds`` None: the Retry-After the scheduler computes."""


class RunHost(Protocol):
    """What the coordinator needs back from the scheduler that holds it."""

    def runs_params(self) -> RunsParams: ...

    @property
    def refuse(self) -> Refuse:
        """The scheduler's refusal (``Scheduler.refuse``)."""

    def delayed(self, entry: QueuedEntry, position: int) -> Decision:
        """The DELAY decision of ``entry``, waiting at ``position``."""

    def drain_rate(self, saturated: bool, now: float) -> float | None:
        """Tokens completed per second while anything is in flight (``saturated``: while
        the gateway queue is not empty)."""

    def queued(self, request_id: str) -> QueuedEntry | None:
        """The entry of ``request_id`` in the gateway queue."""

    def enqueue_copy(self, entry: QueuedEntry, names: tuple[str, ...], now: float) -> QueuedEntry:
        """A live copy of ``entry`` (dead from now on) joins the gateway queue and fairness."""

    def take_copy(self, entry: QueuedEntry) -> QueuedEntry:
        """``entry`` leaves fairness as if popped: a live copy takes its place in the gateway
        queue and is returned, to dispatch in this poll."""

    def put_back(self, entry: QueuedEntry) -> None:
        """A popped entry goes back to fairness, keeping its place."""

    def unqueue(self, entry: QueuedEntry) -> tuple[str, ...]:
        """``entry`` leaves the gateway queue and fairness; the gates that accepted it."""

    def unserved(self, req: RequestInfo, now: float, gate_names: tuple[str, ...]) -> None:
        """``req`` left without reaching a backend: its gates account it."""


class RunCoordinator:
    """The runs of one scheduler: its run book and the calls waiting in their run's queue."""

    def __init__(self, host: RunHost, clock: Clock) -> None:
        self._host = host
        self._clock = clock
        self._book = RunBook()
        self._held = QueueBook()
        """Calls waiting in their run's own queue (beyond its fan-out ceiling)."""

    # -- what the gateway asks ------------------------------------------------------------

    def end(self, tenant: str, run_id: str, *, cancel: bool = True) -> list[Decision] | None:
        """The client ends its run. ``cancel``: at once, its queued calls refused (returned,
        REJECT run_cancelled) and those in flight named for cutting (``take_ends``); else
        it completes once its calls queued or in flight are done. None: no such open run of
        ``tenant``."""
        run = self._book.find(tenant, run_id)
        if run is None:
            return None
        now = self._clock()
        if not cancel:
            self._book.close(self._host.runs_params(), run, now)
            return []
        return self._end(run, RunEnd.CANCELLED, Reason.RUN_CANCELLED, now)

    def state(self, tenant: str, run_id: str) -> RunState | None:
        """An open run's state, an ended run's reason, or None (unknown to ``tenant``)."""
        run = self._book.find(tenant, run_id)
        if run is not None:
            return open_state(run, self._clock())
        reason = self._book.refusal(tenant, run_id)
        return None if reason is None else EndedRunState(run_id, reason)

    def take_ends(self) -> list[RunEnded]:
        """Runs ended since the last call, each once (calls in flight to cut, metrics)."""
        return self._book.take_ends()

    def stats(self) -> RunStats:
        return self._book.stats(len(self._held))

    # -- where a call of a run passes the scheduler ---------------------------------------

    def turned_away(self, req: RequestInfo) -> None:
        """A call of ``req``'s run was refused (by the gates, the ladder, the queue's
        bound): an idle end of the run is final."""
        if req.run is not None:
            self._book.turned_away(req.tenant, req.run.run_id)

    def behind_pace(self, req: RequestInfo, now: float) -> bool:
        """Whether ``req``'s run is behind the pace its deadline asks, or not known to be
        ahead of it (``RunBook.run_behind_pace``); False for a call of no run."""
        if req.run is None:
            return False
        return self._book.run_behind_pace(req.tenant, req.run.run_id, now)

    def holds(self, request_id: str) -> bool:
        """Whether ``request_id`` waits in its run's own queue."""
        return self._held.get(request_id) is not None

    def check(self, req: RequestInfo, now: float) -> Run | Reservation | Decision | None:
        """The call's open run; for a run's first call, what it would reserve (admission);
        a REJECT for a call of an ended run, past its deadline, or over the promise. None:
        not a call of a run, or runs are off. A run that ended idle while served opens
        again (``RunBook.reopen``)."""
        hints = req.run
        params = self._host.runs_params()
        if hints is None or not params.enabled:
            return None
        book, host = self._book, self._host
        refused = book.refusal(req.tenant, hints.run_id)
        if refused is not None and not book.reopen(req.tenant, hints.run_id):
            return host.refuse(req, refused, None, now, ())
        run = book.find(req.tenant, hints.run_id)
        deadline = hints.deadline if run is None else run.deadline
        if deadline is not None and deadline <= now:
            return host.refuse(req, Reason.RUN_DEADLINE_EXPIRED, None, now, ())
        if run is not None:
            return run
        plan = book.plan(params, req)
        rate = host.drain_rate(params.promise_rate == "saturated", now)
        wait = book.promise_wait(params, plan, rate, now, deadline)
        if wait is not None:
            return host.refuse(req, Reason.RUN_RESERVATIONS_FULL, wait, now, ())
        return plan

    def admit(
        self, checked: Run | Reservation, entry: QueuedEntry, gate_names: tuple[str, ...]
    ) -> Decision | None:
        """``entry`` passed the gates: a run's first call opens it (its admission). A DELAY
        when it waits in its run's own queue (the run has its most parallel calls); None
        when it goes on to the gateway queue or a backend."""
        run = checked
        if isinstance(run, Reservation):
            run = self._book.open(entry.request, run, entry.enqueued_at)
        if run.room():
            return None
        self._held.add(entry, gate_names)
        self._book.held(run, entry.request.request_id, entry.enqueued_at)
        return self._host.delayed(entry, len(run.held))

    def enqueued(self, entry: QueuedEntry) -> None:
        req = entry.request
        assert req.run is not None
        run = self._book.find(req.tenant, req.run.run_id)
        if run is not None:
            self._book.enqueued(run, entry)

    def dispatched(self, req: RequestInfo, now: float) -> None:
        self._book.dispatched(req, now)

    def released(self, req: RequestInfo, outcome: Outcome, usage: Usage | None, now: float) -> None:
        params = self._host.runs_params()
        self._promote(self._book.released(params, req, outcome, usage, now), now)

    def left(self, request_id: str, now: float) -> None:
        """A queued call of a run ended without service."""
        self._promote(self._book.left(self._host.runs_params(), request_id, now), now)

    def cancel_held(self, request_id: str) -> bool:
        """The client of a call held in its run's queue went away; False: none such."""
        entry = self._held.get(request_id)
        if entry is not None:
            self._leave_held(entry, Reason.OVERLOADED, self._clock())
        return entry is not None

    def precedence(self, entry: QueuedEntry, deferred: list[QueuedEntry]) -> QueuedEntry:
        """``entry``, or in its place its tenant's oldest continuation of an admitted run:
        started work goes first within the tenant's turn (fair share is unchanged), while
        the tenant's started runs are behind their pace (``RunsParams.precedence``).
        Continuations already set aside in this poll (``deferred``) are not taken again."""
        book = self._book
        if not book.continuations:
            return entry
        req = entry.request
        if book.has_precedence(req.request_id, req.tenant):
            return entry
        other = book.first_continuation(req.tenant, req.model, deferred)
        if other is None:
            return entry
        if self._host.runs_params().precedence == "behind_pace" and not book.behind_pace(
            req.tenant, self._clock()
        ):
            return entry  # the started runs keep their pace: the fair order stands
        taken = self._host.take_copy(other)
        book.replaced(taken)
        self._host.put_back(entry)
        return taken

    def end_due(self, now: float) -> list[Decision]:
        """Runs past their deadline or idle too long end; their waiting calls are refused."""
        out: list[Decision] = []
        if self._book:
            for run, end, reason in self._book.due(self._host.runs_params(), now):
                out += self._end(run, end, reason, now, idle=reason is Reason.RUN_ENDED)
        return out

    def expire_held(self, now: float) -> Iterator[Decision]:
        """Held calls past their queue deadline are refused."""
        if self._held.due(now):
            for entry in self._held.expired(now):
                yield self._leave_held(entry, entry.expiry_reason, now)

    def next_wakeup(self) -> float | None:
        """The earliest time a held call expires or a run is due (None: none)."""
        if not self._book:
            return None
        times = [t for t in (self._held.next_expiry(), self._book.next_due()) if t is not None]
        return min(times) if times else None

    # -- helpers ----------------------------------------------------------------------------

    def _promote(self, request_id: str | None, now: float) -> None:
        """A held call goes to the gateway queue: a call of its run left."""
        old = None if request_id is None else self._held.get(request_id)
        if old is None:
            return
        entry = self._host.enqueue_copy(old, self._held.remove(old), now)
        self._book.promoted(entry.request.request_id, entry)

    def _leave_held(self, entry: QueuedEntry, reason: Reason, now: float) -> Decision:
        names = self._held.remove(entry)
        req = entry.request
        self._host.unserved(req, now, names)
        self.left(req.request_id, now)
        return self._host.refuse(req, reason, None, now, entry.shadowed)

    def _end(
        self, run: Run, end: RunEnd, reason: Reason, now: float, *, idle: bool = False
    ) -> list[Decision]:
        """End ``run``; its queued and held calls are refused at once (REJECT ``reason``)."""
        book, host = self._book, self._host
        book.end(host.runs_params(), run, end, now, reason, idle=idle)
        queued, held = book.forget_calls(run)
        out: list[Decision] = []
        for rid in queued:
            entry = host.queued(rid)
            if entry is not None:
                host.unserved(entry.request, now, host.unqueue(entry))
                out.append(host.refuse(entry.request, reason, None, now, ()))
        for rid in held:
            entry = self._held.get(rid)
            if entry is not None:
                host.unserved(entry.request, now, self._held.remove(entry))
                out.append(host.refuse(entry.request, reason, None, now, ()))
        return out
