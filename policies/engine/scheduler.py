"""The scheduler: gates -> queue -> limit -> route, with all mutable state in one place.

It owns the gateway queue, the in-flight tickets, per-backend load and the charges. Policy
objects (a ``PolicySet``) hold parameters only, so ``swap`` changes parameters and keeps
queues and tickets. Every request ends in exactly one terminal outcome: a REJECT from
``submit``/``poll``, a ``cancel`` while queued, or a ``release`` of its ticket.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from policies.cache_estimate import expected_hit_rate, with_cached_estimate
from policies.contracts import GateContext, Limit, QueuedEntry
from policies.engine.flow_keys import FlowKeys
from policies.engine.gate_chain import GateChain
from policies.engine.observe import DrainMeter, ExecQuantiles
from policies.engine.placement import Placement
from policies.engine.queue_book import QueueBook
from policies.engine.retry_after import JitterSequence, drain_seconds, retry_after
from policies.engine.scheduler_types import SchedulerStats, Ticket, make_decision
from policies.engine.swap import PolicyStates
from policies.fairness.fleet_share import FleetShare, ShareReport
from policies.fleet import BackendView, FleetSnapshot
from policies.ladder.ladder import apply_ladder, update_active
from policies.policy_set import PolicySet
from policies.runs.book import RunBook
from policies.runs.run import Reservation, Run, RunEnd, RunEnded, RunStats
from policies.types import (
    NO_DEGRADATION,
    Clock,
    Decision,
    DecisionKind,
    Degradation,
    Outcome,
    Reason,
    RequestInfo,
    Usage,
)

__all__ = ["DuplicateRequestId", "Scheduler", "SchedulerStats", "Ticket"]


class DuplicateRequestId(ValueError):
    """``submit`` got a request id that is still queued or in flight. Ids key ``cancel`` and
    ``release``, so the gateway must keep them unique among live requests."""


_MAX_SKIPS_PER_POLL = 64
"""Queued requests set aside per poll because their model has no room (bounds the scan)."""


class Scheduler:
    def __init__(
        self, policy: PolicySet, *, clock: Clock, rng: random.Random | None = None
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._rng = rng or random.Random()
        self._jitter = JitterSequence(self._rng)
        self._states = PolicyStates.fresh(policy)
        self._gates = GateChain(policy.gates, self._states.gates)
        self._limit_learns = policy.limit.overrides(Limit, "on_sample")
        self._place = Placement(policy, self._states.limit, clock())
        self._queue = QueueBook()
        self._in_flight: dict[str, tuple[str, ...]] = {}
        """The gates that accepted each request in flight, by request id."""
        self._seq = 0
        self._flows = FlowKeys()
        self._drain = DrainMeter()
        self._full_drain = DrainMeter()
        """Tokens completed per second while the queue is not empty: the fleet's capacity."""
        self._exec = ExecQuantiles()
        self._saturation = 0.0
        self._charged = 0
        self._released = 0
        self._runs = RunBook()
        self._held = QueueBook()
        """Calls waiting in their run's own queue (beyond its fan-out ceiling)."""

    @property
    def policy(self) -> PolicySet:
        return self._policy

    def swap(self, policy: PolicySet) -> None:
        """Hot reload: new parameters, same queues, same in-flight tickets."""
        self._states = self._states.carry_over(self._policy, policy, self._queue.live())
        self._policy = policy
        self._gates = GateChain(policy.gates, self._states.gates)
        self._limit_learns = policy.limit.overrides(Limit, "on_sample")
        self._place.bind(policy, self._states.limit)

    # -- submit --------------------------------------------------------------------------

    def submit(self, req: RequestInfo, fleet: FleetSnapshot) -> Decision | Ticket:
        """Ticket: dispatched now. Decision DELAY: queued, comes out of ``poll``. REJECT:
        terminal, nothing taken. Raises ``DuplicateRequestId`` for a live id."""
        rid = req.request_id
        if self._queue.get(rid) is not None or rid in self._in_flight or self._held.get(rid):
            raise DuplicateRequestId(rid)
        now = self._observe(fleet)
        place = self._place
        place.active.touch(req.tenant, req.weight, now)
        if not place.view.serving(req.model):
            return self._reject(req, Reason.NO_HEALTHY_BACKEND, None, now)
        if req.deadline is not None and req.deadline <= now:
            return self._reject(req, Reason.DEADLINE_INFEASIBLE, None, now)
        oldest = self._update_saturation(req.model, now)
        degradation: Degradation = NO_DEGRADATION
        shadowed: tuple[str, ...] = ()
        if self._states.ladder:  # some step is on (none on: the request passes unchanged)
            lad = apply_ladder(
                req, self._states.ladder, self._policy.ladder, place.view.served_models()
            )
            if lad.reject is not None:
                return self._reject(req, lad.reject, None, now, shadowed=lad.shadowed)
            req, degradation, shadowed = lad.request, lad.degradation, lad.shadowed
        kind = DecisionKind.DEGRADE if degradation.steps else DecisionKind.ADMIT
        run: Run | Reservation | None = None
        if req.run is not None and self._policy.runs.enabled:
            checked = self._run_check(req, now)
            if isinstance(checked, Decision):
                return checked
            run = checked
        backend = None if self._queue or not place.may_take(req) else place.pick(req)
        room_now = backend is not None
        req = with_cached_estimate(
            req, expected_hit_rate(backend, () if room_now else place.view.serving(req.model))
        )
        if self._gates:
            ctx = self._gate_context(req, now, room_now, oldest)
            gate_shadowed, verdict = self._gates.run(req, ctx)
            shadowed += gate_shadowed
            if verdict is not None:
                return self._reject(
                    req, verdict.reason, verdict.retry_after_s, now, shadowed=shadowed
                )
        bound = self._policy.queue.max_queued_tokens
        if not room_now and bound is not None and self._queue.tokens + req.estimate.total > bound:
            return self._reject(req, Reason.QUEUE_FULL, None, now, shadowed=shadowed)
        gate_names = self._gates.accept(req, now)
        entry = self._new_entry(req, kind, degradation, shadowed, now)
        if isinstance(run, Reservation):  # the run's first call: its admission
            run = self._runs.open(req, run, now)
        if run is not None and not run.room():
            return self._hold(run, entry, gate_names)
        if backend is not None:
            self._policy.discipline.on_empty(self._states.discipline)
            return self._dispatch(entry, backend, now, gate_names)
        return self._enqueue(entry, gate_names)

    def _gate_context(
        self, req: RequestInfo, now: float, room_now: bool, oldest: QueuedEntry | None
    ) -> GateContext:
        rates = self._gates.reads_rates  # else no gate reads them: left None
        return GateContext(  # by position, in field order
            now,
            0 if room_now else self._queue.tokens,  # queued_tokens
            self._drain.rate(now) if rates else None,  # drain_tokens_per_s
            self._exec.p95(req.estimate.total) if rates else None,  # exec_p95_s
            room_now,
            None if room_now or oldest is None else now - oldest.enqueued_at,  # oldest_queued_s
        )

    def _new_entry(
        self, req: RequestInfo, kind: DecisionKind, degradation: Degradation,
        shadowed: tuple[str, ...], now: float,
    ) -> QueuedEntry:  # fmt: skip
        self._seq += 1
        if req.deadline is not None:  # the client's own bound replaces the queue's
            expires_at, reason = req.deadline, Reason.DEADLINE_EXPIRED
        else:
            expires_at, reason = now + self._policy.queue.max_wait_s, Reason.OVERLOADED
        return QueuedEntry(
            req, kind, degradation, shadowed, now, expires_at, reason, self._seq,
            self._flows.of(req),
        )  # fmt: skip

    def _enqueue(self, entry: QueuedEntry, gate_names: tuple[str, ...]) -> Decision:
        req = entry.request
        self._queue.add(entry, gate_names)
        self._full_drain.tick(entry.enqueued_at, True)
        self._policy.fairness.push(self._states.fairness, entry, entry.enqueued_at)
        if req.run is not None:
            run = self._runs.find(req.tenant, req.run.run_id)
            if run is not None:
                self._runs.enqueued(run, entry)
        return make_decision(
            self._policy, req, DecisionKind.DELAY, Reason.QUEUED_FOR_CAPACITY,
            queue_position=len(self._queue), degradation=entry.degradation,
            shadowed=entry.shadowed, flow=entry.flow,
        )  # fmt: skip

    # -- poll ----------------------------------------------------------------------------

    def poll(self, fleet: FleetSnapshot) -> list[Ticket | Decision]:
        """Expire, then dispatch queued requests while capacity allows (fairness picks)."""
        now = self._observe(fleet)
        queue = self._queue
        out: list[Ticket | Decision] = []
        if self._runs:
            out += self._end_due_runs(now)
        if queue.due(now) or self._held.due(now):
            out += self._expire(now)
        blocked: set[str] = set()
        deferred: list[QueuedEntry] = []
        fairness, fstate = self._policy.fairness, self._states.fairness
        place = self._place
        allow = place.allow if place.headroom_on() else None
        spare = True  # False: this dispatch took the last slot _room_now had found
        while queue and len(deferred) < _MAX_SKIPS_PER_POLL:
            if len(blocked) >= len(queue.models) or not spare:
                break
            room, room_spare = place.room_now(queue.models)
            if room is False:
                break
            entry = fairness.pop(fstate, now, allow)
            if entry is None:
                break
            if self._runs.continuations:
                entry = self._precedence(entry, deferred)
            if allow is not None and not allow(entry):
                deferred.append(entry)  # over its share with headroom low; others may go
                continue
            req = entry.request
            if room is True or req.session_id:
                backend = None if req.model in blocked else place.pick(req)
            elif place.prefill is None or place.prefill_admits(room, req):
                backend = room  # what place.pick picks for it
            else:
                backend = place.pick(req)  # another backend may hold less un-prefilled work
            if backend is None:
                if not place.prefill_refused(req):
                    blocked.add(req.model)  # else a shorter prompt may still fit
                deferred.append(entry)
                continue
            if self._drop_at_dequeue(entry, now):
                out.append(self._leave_queue(entry, entry_reason=Reason.OVERLOADED, now=now))
                continue
            out.append(self._dispatch(entry, backend, now, queue.remove(entry)))
            spare = room_spare or backend is not room
        for entry in reversed(deferred):
            fairness.push_back(fstate, entry)
        if not queue:
            self._policy.discipline.on_empty(self._states.discipline)
        self._full_drain.tick(now, bool(queue))
        return out

    def _drop_at_dequeue(self, entry: QueuedEntry, now: float) -> bool:
        sojourn = now - entry.enqueued_at
        backlog = len(self._queue) - 1
        return self._policy.discipline.should_drop(self._states.discipline, sojourn, now, backlog)

    def _expire(self, now: float) -> Iterator[Decision]:
        for entry in self._queue.expired(now):
            self._policy.fairness.discard(self._states.fairness, entry)
            yield self._leave_queue(entry, entry_reason=entry.expiry_reason, now=now)
        for entry in self._held.expired(now):
            yield self._leave_held(entry, entry.expiry_reason, now)

    def _leave_queue(self, entry: QueuedEntry, *, entry_reason: Reason, now: float) -> Decision:
        """A queued request ends without service: REJECT with a computed Retry-After."""
        names = self._queue.remove(entry)
        req = entry.request
        self._gates.finish(req, now, None, served=False, names=names)
        if req.run is not None:
            self._run_left(req.request_id, now)
        return self._reject(req, entry_reason, None, now, shadowed=entry.shadowed)

    def _dispatch(
        self, entry: QueuedEntry, backend: BackendView, now: float, gate_names: tuple[str, ...]
    ) -> Ticket:
        req = entry.request
        reason = (
            Reason.DEGRADED_UNDER_LOAD
            if entry.kind is DecisionKind.DEGRADE
            else (Reason.CAPACITY_AVAILABLE)
        )
        decision = make_decision(
            self._policy, req, entry.kind, reason, degradation=entry.degradation,
            shadowed=entry.shadowed, backend=backend.name, flow=entry.flow,
        )  # fmt: skip
        ticket = Ticket(req.request_id, backend.name, decision, now, req)
        total = req.estimate.total
        self._place.took(backend.name, req, total)
        self._charged += total
        self._policy.fairness.charge(self._states.fairness, req, total)
        self._in_flight[req.request_id] = gate_names
        self._drain.tick(now, True)
        if req.run is not None:
            self._runs.dispatched(req, now)
        return ticket

    def release(
        self,
        ticket: Ticket,
        outcome: Outcome,
        usage: Usage | None = None,
        *,
        ttft_s: float | None = None,
        latency_s: float | None = None,
    ) -> None:
        """Idempotent: frees the slot, corrects the charge with ``usage``, feeds learners."""
        gate_names = self._in_flight.pop(ticket.request_id, None)
        if gate_names is None:
            return
        now = self._clock()
        req = ticket.request
        total = req.estimate.total
        load = self._place.gave_back(ticket.backend, req, total, outcome is Outcome.COMPLETED)
        self._released += total
        if usage is not None:
            self._policy.fairness.charge(self._states.fairness, req, usage.total - total)
            self._drain.add(now, usage.total)
            if self._queue:
                self._full_drain.add(now, usage.total)
        if outcome is Outcome.COMPLETED and latency_s is not None:
            self._exec.add(total, latency_s)
        self._gates.finish(req, now, usage, served=True, names=gate_names)
        if req.run is not None:
            used = None if usage is None else usage.total
            promote = self._runs.released(self._policy.runs, req, outcome, used, now)
            if promote is not None:
                self._promote(promote, now)
        if self._limit_learns:
            self._policy.limit.on_sample(
                self._states.limit, self._place.view.get(ticket.backend), load, ttft_s, latency_s,
                outcome is Outcome.FAILED,
            )  # fmt: skip
        self._drain.tick(now, bool(self._in_flight))
        self._full_drain.tick(now, bool(self._queue))

    def share_report(self) -> ShareReport | None:
        """Fleet mode: what this replica served since its last report, and who is queued
        here (None: the fairness type shares nothing)."""
        return self._policy.fairness.share_report(self._states.fairness)

    def share_merge(self, share: FleetShare | None, failed: ShareReport | None = None) -> None:
        """Fleet mode: the fleet's fairness view (None: fairness within this replica)."""
        self._policy.fairness.share_merge(self._states.fairness, share, failed)

    def first_token(self, ticket: Ticket) -> None:
        """The first token of ``ticket``'s response came back (streamed responses): its
        prompt, and all sent to that backend before it, left the engine's prefill backlog."""
        prefill = self._place.prefill
        if prefill is not None and ticket.request_id in self._in_flight:
            prefill.backend(ticket.backend).first_token(ticket.request_id, self._clock())

    def cancel(self, request_id: str) -> bool:
        """The client went away while queued: removed at once (outcome CANCELLED)."""
        entry = self._queue.get(request_id)
        if entry is None:
            held = self._held.get(request_id)
            if held is not None:
                self._leave_held(held, Reason.OVERLOADED, self._clock())
            return held is not None
        self._policy.fairness.discard(self._states.fairness, entry)
        names = self._queue.remove(entry)
        now = self._clock()
        self._gates.finish(entry.request, now, None, served=False, names=names)
        if entry.request.run is not None:
            self._run_left(request_id, now)
        return True

    # -- agent runs (docs/runs.md) --------------------------------------------------------

    def _run_check(self, req: RequestInfo, now: float) -> Run | Reservation | Decision:
        """The call's open run; for a run's first call, what it would reserve (admission);
        a REJECT for a call of an ended run, past its deadline, or over the promise."""
        hints = req.run
        assert hints is not None
        book, params = self._runs, self._policy.runs
        refused = book.refusal(req.tenant, hints.run_id)
        if refused is not None:
            return self._reject(req, refused, None, now)
        run = book.find(req.tenant, hints.run_id)
        deadline = hints.deadline if run is None else run.deadline
        if deadline is not None and deadline <= now:
            return self._reject(req, Reason.RUN_DEADLINE_EXPIRED, None, now)
        if run is not None:
            return run
        plan = book.plan(params, req)
        drain = self._full_drain if params.promise_rate == "saturated" else self._drain
        wait = book.promise_wait(params, plan, drain.rate(now), now, deadline)
        if wait is not None:
            return self._reject(req, Reason.RUN_RESERVATIONS_FULL, wait, now)
        return plan

    def _hold(self, run: Run, entry: QueuedEntry, gate_names: tuple[str, ...]) -> Decision:
        """``entry`` waits in its run's own queue: the run has its most parallel calls."""
        self._held.add(entry, gate_names)
        self._runs.held(run, entry.request.request_id, entry.enqueued_at)
        return make_decision(
            self._policy, entry.request, DecisionKind.DELAY, Reason.QUEUED_FOR_CAPACITY,
            queue_position=len(run.held), degradation=entry.degradation,
            shadowed=entry.shadowed, flow=entry.flow,
        )  # fmt: skip

    def _promote(self, request_id: str, now: float) -> None:
        """A held call goes to the gateway queue: a call of its run left."""
        old = self._held.get(request_id)
        if old is None:
            return
        names = self._held.remove(old)
        entry = self._alive_copy(old)
        self._queue.add(entry, names)
        self._policy.fairness.push(self._states.fairness, entry, now)
        self._runs.promoted(request_id, entry)

    def _alive_copy(self, entry: QueuedEntry) -> QueuedEntry:
        """A live copy of a queued entry that moves from one structure to another; the
        original is dead, so the items of it left behind are dropped as they surface. A
        new sequence number: heap items of the two never tie (entries do not compare)."""
        self._seq += 1
        return QueuedEntry(
            entry.request, entry.kind, entry.degradation, entry.shadowed, entry.enqueued_at,
            entry.expires_at, entry.expiry_reason, self._seq, entry.flow,
        )  # fmt: skip

    def _leave_held(self, entry: QueuedEntry, reason: Reason, now: float) -> Decision:
        names = self._held.remove(entry)
        req = entry.request
        self._gates.finish(req, now, None, served=False, names=names)
        self._run_left(req.request_id, now)
        return self._reject(req, reason, None, now, shadowed=entry.shadowed)

    def _run_left(self, request_id: str, now: float) -> None:
        promote = self._runs.left(self._policy.runs, request_id, now)
        if promote is not None:
            self._promote(promote, now)

    def _precedence(self, entry: QueuedEntry, deferred: list[QueuedEntry]) -> QueuedEntry:
        """``entry``, or in its place its tenant's oldest continuation of an admitted run:
        started work goes first within the tenant's turn (fair share is unchanged).
        Continuations already set aside in this poll (``deferred``) are not taken again."""
        req = entry.request
        book = self._runs
        if book.has_precedence(req.request_id, req.tenant):
            return entry
        other = book.first_continuation(req.tenant, req.model, deferred)
        if other is None:
            return entry
        fairness, fstate = self._policy.fairness, self._states.fairness
        fairness.discard(fstate, other)
        # ``other`` leaves the fairness structures as if popped: it is marked dead (so no
        # copy of it there can come out again) and a live copy takes its place in the queue.
        taken = self._alive_copy(other)
        self._queue.add(taken, self._queue.remove(other))
        book.replaced(taken)
        fairness.push_back(fstate, entry)
        return taken

    def _end_due_runs(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        for run, end, reason in self._runs.due(self._policy.runs, now):
            out += self._end_run(run, end, reason, now)
        return out

    def _end_run(self, run: Run, end: RunEnd, reason: Reason, now: float) -> list[Decision]:
        """End ``run``; its queued and held calls are refused at once (REJECT ``reason``)."""
        self._runs.end(self._policy.runs, run, end, now, reason)
        queued, held = self._runs.forget_calls(run)
        out: list[Decision] = []
        for rid in queued:
            entry = self._queue.get(rid)
            if entry is not None:
                self._policy.fairness.discard(self._states.fairness, entry)
                names = self._queue.remove(entry)
                self._gates.finish(entry.request, now, None, served=False, names=names)
                out.append(self._reject(entry.request, reason, None, now))
        for rid in held:
            entry = self._held.get(rid)
            if entry is not None:
                names = self._held.remove(entry)
                self._gates.finish(entry.request, now, None, served=False, names=names)
                out.append(self._reject(entry.request, reason, None, now))
        return out

    def end_run(self, tenant: str, run_id: str, *, cancel: bool = True) -> list[Decision] | None:
        """The client ends its run. ``cancel``: at once, its queued calls refused (returned,
        REJECT run_cancelled) and those in flight named for cutting (``take_run_ends``);
        else it completes once its calls queued or in flight are done. None: no such open
        run of ``tenant``."""
        run = self._runs.find(tenant, run_id)
        if run is None:
            return None
        now = self._clock()
        if not cancel:
            self._runs.close(self._policy.runs, run, now)
            return []
        return self._end_run(run, RunEnd.CANCELLED, Reason.RUN_CANCELLED, now)

    def run_state(self, tenant: str, run_id: str) -> dict[str, object] | None:
        """An open run's state, an ended run's reason, or None (unknown to ``tenant``)."""
        run = self._runs.find(tenant, run_id)
        if run is not None:
            return run.describe(self._clock())
        reason = self._runs.refusal(tenant, run_id)
        if reason is None:
            return None
        return {"id": run_id, "object": "agent.run", "status": "ended", "reason": reason.value}

    def take_run_ends(self) -> list[RunEnded]:
        """Runs ended since the last call, each once (calls in flight to cut, metrics)."""
        return self._runs.take_ends()

    def run_stats(self) -> RunStats:
        return self._runs.stats(len(self._held))

    # -- helpers ---------------------------------------------------------------------------

    def _observe(self, fleet: FleetSnapshot) -> float:
        now = self._clock()
        self._place.observe(fleet, now)
        self._drain.tick(now, bool(self._in_flight))
        self._full_drain.tick(now, bool(self._queue))
        return now

    def _update_saturation(self, model: str, now: float) -> QueuedEntry | None:
        """Updates the ladder's saturation; returns the oldest queued entry (read for it)."""
        pool = self._place.view.saturation(model, self._policy.ladder)
        oldest = self._queue.oldest()
        queue = (
            0.0 if oldest is None else (now - oldest.enqueued_at) / self._policy.queue.max_wait_s
        )
        self._saturation = max(pool, queue)
        update_active(self._states.ladder, self._policy.ladder, self._saturation)
        return oldest

    def _reject(
        self,
        req: RequestInfo,
        reason: Reason,
        seconds: float | None,
        now: float,
        *,
        shadowed: tuple[str, ...] = (),
    ) -> Decision:
        if seconds is None:
            seconds = drain_seconds(self._queue.tokens + req.estimate.total, self._drain.rate(now))
        after = self.retry_after(seconds)
        return make_decision(
            self._policy, req, DecisionKind.REJECT, reason, retry_after_s=after, shadowed=shadowed
        )

    def retry_after(self, seconds: float | None) -> float:
        """Seconds to tell a refused client: ``seconds`` within the policy's bounds, spread
        by its jitter (the gateway's own refusals take theirs here too)."""
        return retry_after(seconds, self._policy.retry_after, self._jitter.next())

    def next_wakeup(self) -> float | None:
        """The earliest clock time at which ``poll`` has work without any other event."""
        expiry = self._queue.next_expiry()
        if self._runs:
            for other in (self._held.next_expiry(), self._runs.next_due()):
                if other is not None and (expiry is None or other < expiry):
                    expiry = other
        prefill = self._place.prefill
        if prefill is None or not self._queue:
            return expiry
        estimated = prefill.advance(self._clock())  # a non-streamed prefill estimated done
        if estimated is None or (expiry is not None and expiry <= estimated):
            return expiry
        return estimated

    def stats(self) -> SchedulerStats:
        now = self._clock()
        oldest = self._queue.oldest()
        limits = self._place.limits()
        loads = self._place.loads
        return SchedulerStats(
            queued=len(self._queue),
            queued_tokens=self._queue.tokens,
            oldest_age_s=None if oldest is None else now - oldest.enqueued_at,
            in_flight=len(self._in_flight),
            in_flight_tokens=sum(ld.in_flight_tokens for ld in loads.values()),
            in_flight_by_backend={n: ld.in_flight for n, ld in loads.items()},
            limits=limits,
            deficits=dict(self._policy.fairness.deficits(self._states.fairness)),
            saturation=self._saturation,
            active_steps=tuple(
                s.name for s in self._policy.ladder.steps if s.name in self._states.ladder
            ),
            drain_tokens_per_s=self._drain.rate(now),
            charged_tokens=self._charged,
            released_tokens=self._released,
        )
