"""The run book: open agent runs, their reservations, and where each of their calls is.

State only (the scheduler owns it; ``RunsParams`` are passed in). A run opens with its
first call, which is its admission: it reserves the run's expected work (its hints, else
what its flow's completed runs took, else ``default_calls`` x the first call's estimate).
Its later calls draw on that reservation; while one fits what is left, it is a
*continuation* and goes ahead of its tenant's other queued calls (``first_continuation``).
Calls beyond a run's fan-out ceiling wait in the run's own queue (``held``) until one of
its calls leaves. A run ends once: explicitly (``end``), at its deadline, or idle for
``idle_timeout_s`` (``due``); its reservation is released then and its id remembered, so
late calls are refused, except that of a run that ended idle without the gateway having
turned a call of it away: only its timer said it was over (an agent whose tool ran long),
and the late call opens it again (``reopen``). Every amount is in estimated tokens, like
the scheduler's charges.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict

from policies.cache_estimate import computed_usage
from policies.contracts import QueuedEntry
from policies.runs.learn import RunFlow, RunLearner
from policies.runs.run import Reservation, Run, RunEnd, RunEnded, RunStats
from policies.runs.runs_params import RunsParams
from policies.types import Outcome, Reason, RequestInfo, Usage

Key = tuple[str, str]
"""tenant, run id: a run is visible to its own tenant only."""

_TOMBSTONE_REASON = {RunEnd.COMPLETED: Reason.RUN_ENDED, RunEnd.CANCELLED: Reason.RUN_CANCELLED}


class RunBook:
    def __init__(self) -> None:
        self.runs: dict[Key, Run] = {}
        self._of_tenant: dict[str, dict[str, Run]] = {}
        self._by_request: dict[str, Run] = {}
        self._ended: OrderedDict[Key, Reason] = OrderedDict()
        self._reopenable: set[Key] = set()
        """Of the ended runs remembered, those a late call opens again (``reopen``)."""
        self._continuations: dict[str, dict[str, QueuedEntry]] = {}
        self._due: list[tuple[float, int, Key]] = []
        self._seq = 0
        self.promised = 0
        """Reserved tokens not yet drawn, summed over the open runs."""
        self.learner = RunLearner()
        self._ends: list[RunEnded] = []
        self.started: dict[str, int] = {}
        self.ended: dict[tuple[str, RunEnd], int] = {}
        self.wasted: dict[str, int] = {}
        """Tokens spent by runs that did not complete, per tenant (cumulative)."""

    def __bool__(self) -> bool:
        return bool(self.runs or self._by_request)

    @property
    def continuations(self) -> bool:
        """Whether any queued call has a run's precedence."""
        return bool(self._continuations)

    def stats(self, held_calls: int) -> RunStats:
        ended = {(t, e.value): n for (t, e), n in self.ended.items()}
        return RunStats(
            dict(self.started),
            ended,
            dict(self.wasted),
            len(self.runs),
            self.promised,
            held_calls,
            self.learner.error(),
        )

    def of(self, request_id: str) -> Run | None:
        """The run of a queued, held or in-flight call."""
        return self._by_request.get(request_id)

    def find(self, tenant: str, run_id: str) -> Run | None:
        return self.runs.get((tenant, run_id))

    def refusal(self, tenant: str, run_id: str) -> Reason | None:
        """Why a call of an ended run is refused; None when the run has not ended."""
        return self._ended.get((tenant, run_id))

    def reopen(self, tenant: str, run_id: str) -> bool:
        """Forget a run that ended idle while its calls were being served, so that its late
        call opens it again (a new reservation, counted as a new run). False, and nothing
        forgotten, for a run its client or its deadline ended, or one the gateway shed (a
        call of it refused or expired in the queue since its last dispatch: under
        overload a late call of such a run is work that cannot finish, and its 409 is what
        sheds it; docs/runs.md, "The end of a run")."""
        key = (tenant, run_id)
        if key not in self._reopenable:
            return False
        self._reopenable.discard(key)
        del self._ended[key]
        return True

    def turned_away(self, tenant: str, run_id: str) -> None:
        """A call of the run was refused: an idle end of it is final."""
        run = self.runs.get((tenant, run_id))
        if run is not None:
            run.turned_away = True

    # -- admission -----------------------------------------------------------------------

    def plan(self, params: RunsParams, req: RequestInfo) -> Reservation:
        """What a run opened by ``req`` would reserve (no side effect)."""
        hints = req.run
        assert hints is not None
        own = req.estimate.computed_total
        typical = self.learner.typical(_flow(req), params.learned_quantile)
        if hints.tokens is not None or hints.calls is not None:
            calls = hints.calls if hints.calls is not None else params.default_calls
            tokens = hints.tokens if hints.tokens is not None else calls * own
            source = "hints"
        elif typical is not None:
            calls, tokens, source = typical.calls, typical.tokens, "learned"
        else:
            calls, tokens, source = params.default_calls, params.default_calls * own, "default"
        branches = hints.branches
        if branches is None:
            learned = typical.branches if typical is not None else None
            branches = learned if params.learned_ceiling and learned else params.default_branches
        return Reservation(max(tokens, own), max(calls, 1), branches, source)

    def promise_wait(
        self,
        params: RunsParams,
        plan: Reservation,
        rate: float | None,
        now: float,
        deadline: float | None,
    ) -> float | None:
        """Seconds until the work promised to open runs, plus ``plan``, would drain within
        the horizon (before ``deadline`` if sooner); None when it already does, or when
        nothing bounds it (no horizon, or no drain rate measured yet)."""
        horizon = params.promise_horizon_s
        if len(self.runs) >= params.max_runs:
            return params.idle_timeout_s
        if horizon is None or rate is None or rate <= 0:
            return None
        if deadline is not None:
            horizon = min(horizon, deadline - now)
        needed = (self.promised + plan.tokens) / rate
        return None if needed <= horizon else needed - max(horizon, 0.0)

    def open(self, req: RequestInfo, plan: Reservation, now: float) -> Run:
        hints = req.run
        assert hints is not None
        run = Run(req.tenant, hints.run_id, _flow(req), now, hints.deadline, plan, req.request_id)
        self.runs[run.key] = run
        self._of_tenant.setdefault(run.tenant, {})[run.run_id] = run
        self.promised += run.outstanding
        self.started[run.tenant] = self.started.get(run.tenant, 0) + 1
        if run.deadline is not None:
            self._push_due(run.deadline, run.key)
        return run

    # -- where a run's calls are ----------------------------------------------------------

    def enqueued(self, run: Run, entry: QueuedEntry) -> None:
        """``entry`` joined the gateway queue; it goes first within its tenant if it is a
        continuation that fits the reservation."""
        rid = entry.request.request_id
        run.queued.add(rid)
        self._by_request[rid] = run
        run.last_active = max(run.last_active, entry.enqueued_at)
        if rid != run.opening and run.within(entry.request.estimate.computed_total):
            self._continuations.setdefault(run.tenant, {})[rid] = entry

    def held(self, run: Run, request_id: str, now: float) -> None:
        """A call beyond the run's fan-out ceiling waits in the run's own queue."""
        run.held.append(request_id)
        self._by_request[request_id] = run
        run.last_active = max(run.last_active, now)

    def dispatched(self, req: RequestInfo, now: float) -> None:
        run = self._by_request.get(req.request_id)
        if run is None:
            run = self.runs.get((req.tenant, req.run.run_id)) if req.run is not None else None
            if run is None:
                return
            self._by_request[req.request_id] = run
        rid = req.request_id
        run.queued.discard(rid)
        self._drop_continuation(run.tenant, rid)
        run.in_flight.add(rid)
        run.turned_away = False
        run.peak = max(run.peak, len(run.in_flight))
        run.calls += 1
        self._draw(run, req.estimate.computed_total)
        run.last_active = max(run.last_active, now)

    def left(self, params: RunsParams, request_id: str, now: float) -> str | None:
        """A queued or held call left without being served (expired, dropped, cancelled).
        Returns the held call of its run that may now go to the gateway queue, if any."""
        run = self._by_request.pop(request_id, None)
        if run is None:
            return None
        run.queued.discard(request_id)
        run.turned_away = True
        self._drop_continuation(run.tenant, request_id)
        if request_id in run.held:
            run.held.remove(request_id)
        return self._after_leaving(params, run, now)

    def released(
        self,
        params: RunsParams,
        req: RequestInfo,
        outcome: Outcome,
        usage: Usage | None,
        now: float,
    ) -> str | None:
        """A dispatched call ended. ``usage``: its actual tokens, if reported. Returns the
        held call of its run that may now go to the gateway queue, if any."""
        run = self._by_request.pop(req.request_id, None)
        if run is None:
            return None
        run.in_flight.discard(req.request_id)
        estimate = req.estimate.computed_total
        spent = req.estimate.total if usage is None else usage.total
        computed = estimate if usage is None else computed_usage(req.estimate, usage)
        run.spent += spent
        run.computed += computed
        if run.ended is not None:
            if run.ended is not RunEnd.COMPLETED:
                self.wasted[run.tenant] = self.wasted.get(run.tenant, 0) + spent
            return None
        if usage is not None:
            self._draw(run, computed - estimate)
        run.last_outcome = outcome
        run.last_active = max(run.last_active, now)
        return self._after_leaving(params, run, now)

    def promoted(self, request_id: str, entry: QueuedEntry) -> None:
        """A held call (``next`` of ``left``/``released``) went to the gateway queue."""
        run = self._by_request[request_id]
        if run.held and run.held[0] == request_id:
            run.held.popleft()
        else:
            run.held.remove(request_id)
        self.enqueued(run, entry)

    def replaced(self, entry: QueuedEntry) -> None:
        """A queued continuation's entry was replaced by ``entry`` (a live copy)."""
        req = entry.request
        waiting = self._continuations.get(req.tenant)
        if waiting is not None and req.request_id in waiting:
            waiting[req.request_id] = entry

    def first_continuation(
        self, tenant: str, model: str, skip: list[QueuedEntry]
    ) -> QueuedEntry | None:
        """The tenant's oldest queued continuation call for ``model``, if any, other than
        those in ``skip`` (taken out of the fairness order already)."""
        waiting = self._continuations.get(tenant)
        if not waiting:
            return None
        for entry in waiting.values():
            if entry.request.model == model and not any(entry is s for s in skip):
                return entry
        return None

    def behind_pace(self, tenant: str, now: float) -> bool:
        """Whether ``tenant``'s started runs (their first call dispatched), together, have
        drawn less of their reservations than the share of their time to the deadline gone
        asks; True while one of them has no deadline (nothing says it may wait)."""
        drawn = asked = 0.0
        for run in self._of_tenant.get(tenant, {}).values():
            if run.opening in run.queued:
                continue  # not started
            pace = _pace(run, now)
            if pace is None:
                return True
            drawn += pace[0]
            asked += pace[1]
        return drawn < asked

    def run_behind_pace(self, tenant: str, run_id: str, now: float) -> bool:
        """Whether the run has drawn less of its reservation than the share of its time to
        the deadline gone asks; True for a run not open or not started (its first call),
        and for one without a deadline (nothing says it may wait)."""
        run = self.runs.get((tenant, run_id))
        if run is None or run.opening in run.queued:
            return True
        pace = _pace(run, now)
        return pace is None or pace[0] < pace[1]

    def has_precedence(self, request_id: str, tenant: str) -> bool:
        waiting = self._continuations.get(tenant)
        return waiting is not None and request_id in waiting

    # -- the end of a run -----------------------------------------------------------------

    def close(self, params: RunsParams, run: Run, now: float) -> RunEnded | None:
        """The client says the run is done: it ends (completed) once nothing of it is queued
        or in flight; until then new calls of it are still taken."""
        run.closing = True
        if run.pending:
            return None
        return self.end(params, run, RunEnd.COMPLETED, now)

    def end(
        self,
        params: RunsParams,
        run: Run,
        end: RunEnd,
        now: float,
        reason: Reason | None = None,
        *,
        idle: bool = False,
    ) -> RunEnded:
        """End ``run`` (once): its reservation is released and its id remembered. Its
        queued and held calls are the caller's to refuse (``run.queued``, ``run.held``
        still name them); those in flight are named in ``cut``. ``idle``: it ended because
        nothing of it happened for ``idle_timeout_s``; a late call opens it again unless
        the gateway had turned a call of it away (``reopen``)."""
        del self.runs[run.key]
        of_tenant = self._of_tenant[run.tenant]
        del of_tenant[run.run_id]
        if not of_tenant:
            del self._of_tenant[run.tenant]
        run.ended = end
        self.promised -= run.outstanding
        reason = reason or _TOMBSTONE_REASON.get(end, Reason.RUN_ENDED)
        self._ended[run.key] = reason
        self._ended.move_to_end(run.key)
        if idle and not run.turned_away:
            self._reopenable.add(run.key)
        else:
            self._reopenable.discard(run.key)
        while len(self._ended) > params.ended_kept:
            self._reopenable.discard(self._ended.popitem(last=False)[0])
        tenant = run.tenant
        self.ended[(tenant, end)] = self.ended.get((tenant, end), 0) + 1
        for rid in run.queued:
            self._drop_continuation(tenant, rid)
        if end is RunEnd.COMPLETED:
            self.learner.observe(
                run.flow,
                params.learned_runs,
                run.calls,
                run.computed,
                run.peak,
                run.reservation.tokens,
            )
        else:
            self.wasted[tenant] = self.wasted.get(tenant, 0) + run.spent
        ended_at = run.last_active if end is RunEnd.COMPLETED else now
        done = RunEnded(
            tenant,
            run.run_id,
            end,
            reason,
            run.started_at,
            ended_at,
            run.calls,
            run.spent,
            run.reservation.tokens,
            tuple(sorted(run.in_flight)),
        )
        self._ends.append(done)
        return done

    def forget_calls(self, run: Run) -> tuple[list[str], list[str]]:
        """The queued and held calls of an ended run, taken out of the book (the caller
        refuses them)."""
        queued, held = sorted(run.queued), list(run.held)
        for rid in (*queued, *held):
            self._by_request.pop(rid, None)
        run.queued.clear()
        run.held.clear()
        return queued, held

    def due(self, params: RunsParams, now: float) -> list[tuple[Run, RunEnd, Reason]]:
        """Runs whose deadline passed or that stayed idle too long, with how they end:
        abandoned when work of theirs was pending (or their last call failed), else
        completed. Each is returned once; the caller ends it."""
        out: list[tuple[Run, RunEnd, Reason]] = []
        heap = self._due
        while heap and heap[0][0] <= now:
            _, _, key = heapq.heappop(heap)
            run = self.runs.get(key)
            if run is None or any(r is run for r, _, _ in out):
                continue
            at = self._due_at(params, run)
            if at is None:
                continue
            if at > now:
                self._push_due(at, key)
                continue
            out.append((run, *_ending(run, now)))
        return out

    def next_due(self) -> float | None:
        heap = self._due
        while heap and heap[0][2] not in self.runs:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def take_ends(self) -> list[RunEnded]:
        ends, self._ends = self._ends, []
        return ends

    # -- helpers --------------------------------------------------------------------------

    def _after_leaving(self, params: RunsParams, run: Run, now: float) -> str | None:
        if run.held and run.room():
            return run.held[0]
        if run.pending:
            return None
        if run.closing:
            self.end(params, run, RunEnd.COMPLETED, now)
        else:
            self._push_due(now + params.idle_timeout_s, run.key)
        return None

    def _draw(self, run: Run, tokens: int) -> None:
        before = run.outstanding
        run.drawn += tokens
        self.promised += run.outstanding - before

    def _drop_continuation(self, tenant: str, request_id: str) -> None:
        waiting = self._continuations.get(tenant)
        if waiting is not None and waiting.pop(request_id, None) is not None and not waiting:
            del self._continuations[tenant]

    def _due_at(self, params: RunsParams, run: Run) -> float | None:
        times = [] if run.deadline is None else [run.deadline]
        if not run.pending:
            times.append(run.last_active + params.idle_timeout_s)
        return min(times) if times else None

    def _push_due(self, at: float, key: Key) -> None:
        self._seq += 1
        heapq.heappush(self._due, (at, self._seq, key))
        if len(self._due) > 4 * len(self.runs) + 64:
            live: dict[Key, float] = {}
            for a, _, k in self._due:
                if k in self.runs and a < live.get(k, float("inf")):
                    live[k] = a  # the earliest: one due early is pushed again when popped
            self._due = [(a, i, k) for i, (k, a) in enumerate(live.items())]
            heapq.heapify(self._due)


def _flow(req: RequestInfo) -> RunFlow:
    return (req.tenant, req.workload_class, req.model)


def _ending(run: Run, now: float) -> tuple[RunEnd, Reason]:
    """How a run that is due ends: at its deadline with work pending, abandoned; idle
    after a call that completed, completed (also when the gateway shed it since: its flow
    learns from it as from any run that stopped calling); otherwise abandoned."""
    if run.deadline is not None and run.deadline <= now and run.pending:
        return RunEnd.ABANDONED, Reason.RUN_DEADLINE_EXPIRED
    if run.last_outcome is Outcome.COMPLETED and not run.pending:
        return RunEnd.COMPLETED, Reason.RUN_ENDED
    return RunEnd.ABANDONED, Reason.RUN_ENDED


def _pace(run: Run, now: float) -> tuple[float, float] | None:
    """A started run's tokens drawn, and those its pace asks by ``now`` (its reservation
    times the share of its time to the deadline gone); None without a deadline ahead of
    its start."""
    if run.deadline is None or run.deadline <= run.started_at:
        return None
    gone = (now - run.started_at) / (run.deadline - run.started_at)
    return run.drawn, gone * run.reservation.tokens
