"""The scheduler: gates -> queue -> limit -> route, with all mutable state in one place.

It owns the gateway queue, the in-flight tickets, per-backend load and the charges. Policy
objects (a ``PolicySet``) hold parameters only, so ``swap`` changes parameters and keeps
queues and tickets. Every request ends in exactly one terminal outcome: a REJECT from
``submit``/``poll``, a ``cancel`` while queued, or a ``release`` of its ticket.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from policies.backends import BackendsSnapshot, BackendView
from policies.cache_estimate import (
    computed_usage,
    counted,
    expected_cached_tokens,
    with_cached_tokens,
)
from policies.contracts import GateContext, Limit, QueuedEntry
from policies.engine.cache_params import CacheEstimate
from policies.engine.flow_keys import FlowKeys
from policies.engine.gate_chain import GateChain
from policies.engine.observe import DrainMeter, ExecQuantiles
from policies.engine.placement import Placement
from policies.engine.promise_book import PromiseBook
from policies.engine.queue_book import QueueBook
from policies.engine.retry_after import JitterSequence, drain_seconds, retry_after
from policies.engine.scheduler_types import SchedulerStats, Ticket, make_decision
from policies.engine.swap import PolicyStates
from policies.fairness.fleet_share import FleetShare, ShareReport
from policies.gates.quota_params import QuotaCounts
from policies.ladder.ladder import apply_ladder, update_active
from policies.policy_set import PolicySet
from policies.runs.coordinator import RunCoordinator
from policies.runs.runs_params import RunsParams
from policies.types import (
    NO_DEGRADATION,
    Clock,
    Decision,
    DecisionKind,
    Degradation,
    Ending,
    Outcome,
    Reason,
    RequestInfo,
    WorkEstimate,
)

__all__ = ["DuplicateRequestId", "Scheduler", "SchedulerStats", "Ticket"]


class DuplicateRequestId(ValueError):
    """``submit`` got a request id that is still queued or in flight. Ids key ``cancel`` and
    ``release``, so the gateway must keep them unique among live requests."""


_PROMISED_REASONS = frozenset({Reason.OVERLOADED, Reason.QUEUE_FULL})
"""Refusals for the queue's capacity: their Retry-After is booked as a promise."""

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
        self._fair_estimates: dict[str, WorkEstimate] = {}
        """The estimate the fair share charged each request in flight when it differs from
        its admission's (cached tokens estimated again where it was placed)."""
        self._seq = 0
        self._flows = FlowKeys()
        self._drain = DrainMeter()
        """Computed tokens (``computed_usage``: output and uncached prompt) completed per
        second while anything is in flight; the queue's and the promises' work is counted
        in the same tokens, so a cached context neither slows nor speeds the drain."""
        self._full_drain = DrainMeter()
        """The same while the queue is not empty: the fleet's capacity."""
        self._exec = ExecQuantiles()
        self._promised = PromiseBook()
        """Every refusal's return, by tenant, until it is made or lapses; those refused for
        the queue's capacity (OVERLOADED, QUEUE_FULL) hold their tokens of it, the others
        none (``promise_book.py``)."""
        self._saturation = 0.0
        self._charged = 0
        self._released = 0
        self._in_flight_computed = 0
        """Expected computed tokens (``computed_total``) of the requests in flight."""
        self.runs = RunCoordinator(self, clock)
        """Agent runs (docs/runs.md): the gateway reads and ends them here."""

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

    def submit(self, req: RequestInfo, fleet: BackendsSnapshot) -> Decision | Ticket:
        """Ticket: dispatched now. Decision DELAY: queued, comes out of ``poll``. REJECT:
        terminal, nothing taken. Raises ``DuplicateRequestId`` for a live id."""
        rid = req.request_id
        if self._queue.get(rid) is not None or rid in self._in_flight or self.runs.holds(rid):
            raise DuplicateRequestId(rid)
        now = self._observe(fleet)
        promised = self._promised
        kept = req.is_retry and bool(promised) and promised.claim(req.tenant, now) is not None
        place = self._place
        place.active.touch(req.tenant, req.weight, now)
        if not place.view.serving(req.model):
            return self.refuse(req, Reason.NO_HEALTHY_BACKEND, None, now)
        if req.deadline is not None and req.deadline <= now:
            return self.refuse(req, Reason.DEADLINE_INFEASIBLE, None, now)
        oldest = self._update_saturation(req.model, now)
        degradation: Degradation = NO_DEGRADATION
        shadowed: tuple[str, ...] = ()
        if self._states.ladder:  # some step is on (none on: the request passes unchanged)
            lad = apply_ladder(
                req,
                self._states.ladder,
                self._policy.ladder,
                place.view.served_models(),
                self.runs.behind_pace(req, now),
            )
            if lad.reject is not None:
                return self.refuse(req, lad.reject, None, now, shadowed=lad.shadowed)
            req, degradation, shadowed = lad.request, lad.degradation, lad.shadowed
        kind = DecisionKind.DEGRADE if degradation.steps else DecisionKind.ADMIT
        run = None if req.run is None else self.runs.check(req, now)
        if isinstance(run, Decision):
            return run
        backend = None if self._queue or not place.may_take(req) else place.pick(req)
        room_now = backend is not None
        req = self._with_cached_estimate(req, backend)
        if self._gates:
            ctx = self._gate_context(req, now, room_now, oldest, kept)
            gate_shadowed, verdict = self._gates.run(req, ctx)
            shadowed += gate_shadowed
            if verdict is not None:
                refused = self.refuse(
                    req, verdict.reason, verdict.retry_after_s, now, shadowed=shadowed
                )
                if self._policy.retry_after.promise:
                    after = refused.retry_after_s or 0.0
                    self._gates.promised(req, now, after, self._lapse_at(now, after))
                return refused
        bound = self._policy.queue.max_queued_tokens
        if not room_now and bound is not None and self._queue.tokens + req.estimate.total > bound:
            return self.refuse(req, Reason.QUEUE_FULL, None, now, shadowed=shadowed)
        door = not room_now and not kept and req.run is None  # runs: the run book admits
        if door and promised and self._takes_promised(req, now):
            return self.refuse(req, Reason.OVERLOADED, None, now, shadowed=shadowed)
        gate_names = self._gates.accept(req, now)
        entry = self._new_entry(req, kind, degradation, shadowed, now)
        if run is not None:
            held = self.runs.admit(run, entry, gate_names)
            if held is not None:
                return held
        if backend is not None:
            self._policy.discipline.on_empty(self._states.discipline)
            return self._dispatch(entry, backend, now, gate_names)
        return self._enqueue(entry, gate_names)

    def _with_cached_estimate(self, req: RequestInfo, backend: BackendView | None) -> RequestInfo:
        """``req`` with its cached prompt tokens estimated on ``backend`` (None: it waits;
        the best of its model's backends): ``policies/cache_estimate.py``."""
        place = self._place
        prefixes = place.prefixes
        model = None
        if prefixes is not None and self._policy.cache.estimate is CacheEstimate.PREFIX_MODEL:
            model = prefixes.cached_tokens
        serving = () if backend is not None else place.view.serving(req.model)
        return with_cached_tokens(req, expected_cached_tokens(req, backend, serving, model))

    def _takes_promised(self, req: RequestInfo, now: float) -> bool:
        """Would ``req``, of a tenant whose refused clients hold promises of the queue,
        wait past ``max_wait_s`` once they are back? Then it may not take their place
        (unknown rate: no). A tenant with none promised is not held back: the fair queue
        serves it by its share, not behind the others' returns. Calls of agent runs never
        meet this door: the run coordinator's book admits them (docs/runs.md)."""
        rate = self._drain.rate(now)
        if rate is None or rate <= 0:
            return False
        if self._promised.outstanding(req.tenant, now) <= 0:  # appointments hold no tokens
            return False
        promised = self._promised.total(now)
        ahead = self._queue.computed + promised + req.estimate.computed_total
        return ahead / rate > self._policy.queue.max_wait_s

    def _gate_context(
        self,
        req: RequestInfo,
        now: float,
        room_now: bool,
        oldest: QueuedEntry | None,
        appointment: bool,
    ) -> GateContext:
        rates = self._gates.reads_rates  # else no gate reads them: left None
        return GateContext(  # by position, in field order
            now,
            0 if room_now else self._queue.computed,  # queued_tokens (computed)
            self._drain.rate(now) if rates else None,  # drain_tokens_per_s
            self._exec.p95(req.estimate.total) if rates else None,  # exec_p95_s
            room_now,
            None if room_now or oldest is None else now - oldest.enqueued_at,  # oldest_queued_s
            appointment,
        )

    def _new_entry(
        self,
        req: RequestInfo,
        kind: DecisionKind,
        degradation: Degradation,
        shadowed: tuple[str, ...],
        now: float,
    ) -> QueuedEntry:
        self._seq += 1
        if req.deadline is not None:  # the client's own bound replaces the queue's
            expires_at, reason = req.deadline, Reason.DEADLINE_EXPIRED
        else:
            expires_at, reason = now + self._policy.queue.max_wait_s, Reason.OVERLOADED
        return QueuedEntry(
            req,
            kind,
            degradation,
            shadowed,
            now,
            expires_at,
            reason,
            self._seq,
            self._flows.of(req),
        )

    def _enqueue(self, entry: QueuedEntry, gate_names: tuple[str, ...]) -> Decision:
        req = entry.request
        self._queue.add(entry, gate_names)
        self._full_drain.tick(entry.enqueued_at, True)
        self._policy.fairness.push(self._states.fairness, entry, entry.enqueued_at)
        if req.run is not None:
            self.runs.enqueued(entry)
        return make_decision(
            self._policy,
            req,
            DecisionKind.DELAY,
            Reason.QUEUED_FOR_CAPACITY,
            queue_position=len(self._queue),
            degradation=entry.degradation,
            shadowed=entry.shadowed,
            flow=entry.flow,
        )

    # -- poll ----------------------------------------------------------------------------

    def poll(self, fleet: BackendsSnapshot) -> list[Ticket | Decision]:
        """Expire, then dispatch queued requests while capacity allows (fairness picks)."""
        now = self._observe(fleet)
        queue = self._queue
        out: list[Ticket | Decision] = []
        out += self.runs.end_due(now)
        if queue.due(now):
            out += self._expire(now)
        out += self.runs.expire_held(now)
        deferred: list[QueuedEntry] = []
        fairness, fstate = self._policy.fairness, self._states.fairness
        place = self._place
        place.scan(True)
        try:
            self._dispatch_queued(now, out, deferred)
        finally:
            place.scan(False)
        for entry in reversed(deferred):
            fairness.push_back(fstate, entry)
        if not queue:
            self._policy.discipline.on_empty(self._states.discipline)
        self._full_drain.tick(now, bool(queue))
        return out

    def _dispatch_queued(
        self, now: float, out: list[Ticket | Decision], deferred: list[QueuedEntry]
    ) -> None:
        """Queued requests out (to ``out``) while capacity allows, in fairness's order;
        those that may not go now are set aside in ``deferred``."""
        queue = self._queue
        blocked: set[str] = set()
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
            entry = self.runs.precedence(entry, deferred)
            if allow is not None and not allow(entry):
                deferred.append(entry)  # over its share with headroom low; others may go
                continue
            req = entry.request
            if room is True or req.session_id or place.local(req):
                backend = None if req.model in blocked else place.pick(req)
            elif place.prefill is None or place.prefill_admits(room, req):
                backend = room  # what place.pick picks for it
            else:
                backend = place.pick(req)  # another backend may hold less un-prefilled work
            if backend is None:
                if not place.prefill_refused(req):
                    blocked.add(req.model)
                elif place.refuses_alike(req) and queue.none_smaller(req):
                    blocked.add(req.model)  # every request of the model queued is refused too
                deferred.append(entry)  # else a shorter prompt may still fit
                continue
            if self._drop_at_dequeue(entry, now):
                out.append(self._leave_queue(entry, entry_reason=Reason.OVERLOADED, now=now))
                continue
            out.append(self._dispatch(entry, backend, now, queue.remove(entry)))
            spare = room_spare or backend is not room

    def _drop_at_dequeue(self, entry: QueuedEntry, now: float) -> bool:
        sojourn = now - entry.enqueued_at
        backlog = len(self._queue) - 1
        return self._policy.discipline.should_drop(self._states.discipline, sojourn, now, backlog)

    def _expire(self, now: float) -> Iterator[Decision]:
        for entry in self._queue.expired(now):
            self._policy.fairness.discard(self._states.fairness, entry)
            yield self._leave_queue(entry, entry_reason=entry.expiry_reason, now=now)

    def _leave_queue(self, entry: QueuedEntry, *, entry_reason: Reason, now: float) -> Decision:
        """A queued request ends without service: REJECT with a computed Retry-After."""
        names = self._queue.remove(entry)
        req = entry.request
        self._gates.finish(req, now, None, served=False, names=names)
        if req.run is not None:
            self.runs.left(req.request_id, now)
        return self.refuse(req, entry_reason, None, now, shadowed=entry.shadowed)

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
            self._policy,
            req,
            entry.kind,
            reason,
            degradation=entry.degradation,
            shadowed=entry.shadowed,
            backend=backend.name,
            flow=entry.flow,
        )
        ticket = Ticket(req.request_id, backend.name, decision, now, req)
        counts = self._policy.cache.fairness_counts
        estimate = req.estimate
        if counts is QuotaCounts.COMPUTED_TOKENS:  # its cached share where it goes now
            estimate = self._with_cached_estimate(req, backend).estimate
            if estimate is not req.estimate:
                self._fair_estimates[req.request_id] = estimate
        total = req.estimate.total
        self._place.took(backend.name, req, total)  # (its prompt is cached there after it)
        self._charged += total
        self._in_flight_computed += req.estimate.computed_total
        self._policy.fairness.charge(self._states.fairness, req, counted(counts, estimate))
        self._in_flight[req.request_id] = gate_names
        self._drain.tick(now, True)
        if req.run is not None:
            self.runs.dispatched(req, now)
        return ticket

    def release(self, ticket: Ticket, ending: Ending) -> None:
        """Idempotent: frees the slot, corrects the charge with ``ending.usage``, feeds learners."""
        gate_names = self._in_flight.pop(ticket.request_id, None)
        if gate_names is None:
            return
        now = self._clock()
        req, outcome, usage = ticket.request, ending.outcome, ending.usage
        total = req.estimate.total
        load = self._place.gave_back(ticket.backend, req, total, outcome is Outcome.COMPLETED)
        self._released += total
        self._in_flight_computed -= req.estimate.computed_total
        charged = self._fair_estimates.pop(ticket.request_id, req.estimate)
        if usage is not None:
            counts = self._policy.cache.fairness_counts
            computed = computed_usage(charged, usage)  # counted_usage in computed tokens
            used = computed if counts is QuotaCounts.COMPUTED_TOKENS else usage.total
            spent = used - counted(counts, charged)
            self._policy.fairness.charge(self._states.fairness, req, spent)
            self._drain.add(now, computed)
            if self._queue:
                self._full_drain.add(now, computed)
        latency_s = ending.latency_s
        if outcome is Outcome.COMPLETED and latency_s is not None:
            self._exec.add(total, latency_s)
        self._gates.finish(req, now, usage, served=True, names=gate_names)
        if req.run is not None:
            self.runs.released(req, outcome, usage, now)
        if self._limit_learns:
            backend = self._place.view.get(ticket.backend)
            self._policy.limit.on_sample(self._states.limit, backend, load, ending)
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
            return self.runs.cancel_held(request_id)
        self._policy.fairness.discard(self._states.fairness, entry)
        names = self._queue.remove(entry)
        now = self._clock()
        self._gates.finish(entry.request, now, None, served=False, names=names)
        if entry.request.run is not None:
            self.runs.left(request_id, now)
        return True

    # -- what the run coordinator asks back (RunHost) --------------------------------------

    def runs_params(self) -> RunsParams:
        return self._policy.runs

    def delayed(self, entry: QueuedEntry, position: int) -> Decision:
        return make_decision(
            self._policy,
            entry.request,
            DecisionKind.DELAY,
            Reason.QUEUED_FOR_CAPACITY,
            queue_position=position,
            degradation=entry.degradation,
            shadowed=entry.shadowed,
            flow=entry.flow,
        )

    def drain_rate(self, saturated: bool, now: float) -> float | None:
        return (self._full_drain if saturated else self._drain).rate(now)

    def queued(self, request_id: str) -> QueuedEntry | None:
        return self._queue.get(request_id)

    def enqueue_copy(self, entry: QueuedEntry, names: tuple[str, ...], now: float) -> QueuedEntry:
        copy = self._alive_copy(entry)
        self._queue.add(copy, names)
        self._policy.fairness.push(self._states.fairness, copy, now)
        return copy

    def take_copy(self, entry: QueuedEntry) -> QueuedEntry:
        self._policy.fairness.discard(self._states.fairness, entry)
        # ``entry`` leaves the fairness structures as if popped: it is marked dead (so no
        # copy of it there can come out again) and a live copy takes its place in the queue.
        taken = self._alive_copy(entry)
        self._queue.add(taken, self._queue.remove(entry))
        return taken

    def put_back(self, entry: QueuedEntry) -> None:
        self._policy.fairness.push_back(self._states.fairness, entry)

    def unqueue(self, entry: QueuedEntry) -> tuple[str, ...]:
        self._policy.fairness.discard(self._states.fairness, entry)
        return self._queue.remove(entry)

    def unserved(self, req: RequestInfo, now: float, gate_names: tuple[str, ...]) -> None:
        self._gates.finish(req, now, None, served=False, names=gate_names)

    def _alive_copy(self, entry: QueuedEntry) -> QueuedEntry:
        """A live copy of a queued entry that moves from one structure to another; the
        original is dead, so the items of it left behind are dropped as they surface. A
        new sequence number: heap items of the two never tie (entries do not compare)."""
        self._seq += 1
        return QueuedEntry(
            entry.request,
            entry.kind,
            entry.degradation,
            entry.shadowed,
            entry.enqueued_at,
            entry.expires_at,
            entry.expiry_reason,
            self._seq,
            entry.flow,
        )

    # -- helpers ---------------------------------------------------------------------------

    def _observe(self, fleet: BackendsSnapshot) -> float:
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

    def refuse(
        self,
        req: RequestInfo,
        reason: Reason,
        seconds: float | None,
        now: float,
        shadowed: tuple[str, ...] = (),
    ) -> Decision:
        """A REJECT of ``req`` (``seconds`` None: the Retry-After of the queued work's drain,
        and of the returns already promised, at the measured rate); also what the run
        coordinator asks for (``RunHost``). A refusal for the queue's capacity (OVERLOADED,
        QUEUE_FULL) with a measured rate is a promise of its tokens of the queue; every
        refusal is an appointment: booked until its client returns."""
        holds = seconds is None and reason in _PROMISED_REASONS
        if seconds is None:
            work = float(self._queue.computed + req.estimate.computed_total)
            if self._promised:
                work += self._promised.total(now)
            seconds = drain_seconds(work, self._drain.rate(now))
            holds = holds and seconds is not None
        after = self.retry_after(seconds)
        if req.run is not None:
            self.runs.turned_away(req)
        if self._policy.retry_after.promise:
            tokens = float(req.estimate.computed_total) if holds else 0.0
            self._promised.book(req.tenant, now + after, self._lapse_at(now, after), tokens)
        return make_decision(
            self._policy, req, DecisionKind.REJECT, reason, retry_after_s=after, shadowed=shadowed
        )

    def _lapse_at(self, now: float, after_s: float) -> float:
        """When a promise told ``after_s`` at ``now`` lapses if its client has not returned."""
        return now + after_s + self._policy.retry_after.grace_s

    def retry_after(self, seconds: float | None) -> float:
        """Seconds to tell a refused client: ``seconds`` within the policy's bounds, spread
        by its jitter (the gateway's own refusals take theirs here too)."""
        return retry_after(seconds, self._policy.retry_after, self._jitter.next())

    def next_wakeup(self) -> float | None:
        """The earliest clock time at which ``poll`` has work without any other event."""
        expiry = self._queue.next_expiry()
        runs = self.runs.next_wakeup()
        if runs is not None and (expiry is None or runs < expiry):
            expiry = runs
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
            queued_computed_tokens=self._queue.computed,
            in_flight_computed_tokens=self._in_flight_computed,
        )
