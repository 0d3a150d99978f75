"""The discrete-event loop for agent runs: open-loop run arrivals, the production scheduler
(``policies.engine.scheduler.Scheduler``) as the gateway, the emulator's engine, one clock.

Each call is built as the gateway builds it from the run headers: ``RequestInfo(...,
run=RunHints(...))`` with the estimate of the gateway's ``TokenEstimator`` (the call sends
``max_tokens`` = its length, as the live swarm does). The client side of every run: it
submits a step's calls together, waits for all of them (the join), thinks, goes on; a
refused call is retried after Retry-After (and its own backoff) while the run's deadline
allows, else the run is given up (and, with runs enabled, cancelled at the gateway); at
its deadline a run is abandoned and its calls in flight are cut. With runs enabled the
scheduler also ends runs (deadline), and the calls it names in ``runs.take_ends`` are cut
in the engine and released CANCELLED, as the gateway cuts them upstream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.estimate import TokenEstimator
from policies.registry import build_policy
from policies.types import (
    Decision,
    DecisionKind,
    Ending,
    Outcome,
    Reason,
    RequestInfo,
    RunHints,
    Usage,
    WorkEstimate,
)
from simulation.agent_runs import RunPlan, RunWorkload
from simulation.engine_adapter import EmulatedBackend
from simulation.event_queue import EventQueue
from simulation.ports import EngineRequest, EngineStep, VirtualClock
from simulation.run_metrics import RunRecord
from simulation.stepping import EngineEvents

TENANT = "agents"
FLOW = "agent-runs"
RUN_ENDED = frozenset({Reason.RUN_CANCELLED, Reason.RUN_DEADLINE_EXPIRED, Reason.RUN_ENDED})
"""Refusals that say the run is over at the gateway: its client stops."""


class _Kind(Enum):
    ARRIVE = 0
    STEP = 1
    RETRY = 2
    ENGINE = 3
    WAKEUP = 4
    DEADLINE = 5


@dataclass(slots=True)
class _Event:
    kind: _Kind
    run: int = -1
    branch: int = -1
    step: EngineStep | None = None


@dataclass(slots=True)
class _LiveRun:
    """A run its client is still working on."""

    plan: RunPlan
    record: RunRecord
    deadline: float
    step: int = 0
    pending: set[int] = field(default_factory=set)
    deferrals: dict[int, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    """Request ids of its calls queued or in flight, with their branch."""
    received: dict[int, int] = field(default_factory=dict)
    """Output tokens each branch of the step has had so far from answers the gateway cut
    short (a degrade capped ``max_tokens``): its next call asks for the rest."""
    sent: int = 0


class CuttableBackend(EmulatedBackend):
    """The emulated backend, also telling how far a call in flight got (its tokens when
    cut, as the gateway counts the events relayed of a cut stream)."""

    def generated(self, request_id: str, finished: int) -> int:
        """Output tokens generated so far; ``finished`` when the call already left the
        engine (it finished in the step under way)."""
        generated = self.engine.generated_tokens(request_id)
        return finished if generated is None else generated


class RunSimulation:
    """Agent runs ``plans`` against ``policy`` in front of ``backend``."""

    def __init__(
        self,
        *,
        plans: list[RunPlan],
        workload: RunWorkload,
        policy: dict[str, Any],
        backend: CuttableBackend,
        clock: VirtualClock,
        seed: int,
        model: str = "sim-model",
        measured: frozenset[int] | None = None,
    ) -> None:
        """``measured``: the indices of the runs the caller measures; the loop ends once
        those have ended (every run when None). The runs arriving meanwhile keep the load on
        them; what is still live then is not recorded."""
        policy_set = build_policy(policy)
        self.scheduler = Scheduler(policy_set, clock=clock, rng=random.Random(seed))
        self._runs_on = policy_set.runs.enabled
        self._workload, self._backend, self._clock, self._model = workload, backend, clock, model
        self._rng = random.Random(seed)
        self._estimator = TokenEstimator()
        self._events: EventQueue[_Event] = EventQueue()
        self._live: dict[int, _LiveRun] = {}
        self._owner: dict[str, int] = {}
        self._tickets: dict[str, Ticket] = {}
        self._served: dict[str, int] = {}
        self._asked: dict[str, int] = {}
        """Each call's ``max_tokens`` as the client sent it (a degrade may lower it)."""
        self._engine_events = EngineEvents(
            self._events,
            backend,
            clock,
            step_end=lambda step: _Event(_Kind.ENGINE, step=step),
            wakeup=lambda: _Event(_Kind.WAKEUP),
        )
        self._measured = measured
        self._unended = len(plans) if measured is None else len(measured)
        self._plans = plans
        self.records: list[RunRecord] = []
        for plan in plans:
            self._push(plan.arrival, _Kind.ARRIVE, run=plan.index)

    def run(self) -> list[RunRecord]:
        """Until every measured run has ended (completed, given up or abandoned at its
        deadline)."""
        while self._events and self._unended:
            at, event = self._events.pop()
            self._clock.now = max(self._clock.now, at)
            self._handle(event)
        assert not self._unended, "a run never ended"
        return sorted(self.records, key=lambda r: r.index)

    def _push(
        self,
        at: float,
        kind: _Kind,
        *,
        run: int = -1,
        branch: int = -1,
        step: EngineStep | None = None,
        seen: bool = True,
    ) -> None:
        self._events.push(at, _Event(kind, run, branch, step), seen=seen)

    def _handle(self, event: _Event) -> None:
        live = self._live.get(event.run)
        if event.kind is _Kind.ARRIVE:
            self._arrive(self._plans[event.run])
        elif event.kind is _Kind.STEP and live is not None:
            self._start_step(live)
        elif event.kind is _Kind.RETRY and live is not None:
            self._submit(live, event.branch)
        elif event.kind is _Kind.DEADLINE and live is not None:
            self._give_up(live, at_deadline=True)
        elif event.kind is _Kind.ENGINE:
            assert event.step is not None
            self._engine_events.ended()
            self._engine_step(event.step)
            if not event.step.changed:
                self._kick_engine()
                return
        self._pump()

    # -- the client ----------------------------------------------------------------------

    def _arrive(self, plan: RunPlan) -> None:
        record = RunRecord(plan.index, plan.arrival, plan.calls)
        live = _LiveRun(plan, record, plan.arrival + self._workload.deadline_s)
        self._live[plan.index] = live
        self._push(live.deadline, _Kind.DEADLINE, run=plan.index)
        self._start_step(live)

    def _start_step(self, live: _LiveRun) -> None:
        width = len(live.plan.steps[live.step])
        live.pending = set(range(width))
        live.deferrals = {}
        live.received = {}
        for branch in range(width):
            self._submit(live, branch)

    def _submit(self, live: _LiveRun, branch: int) -> None:
        plan, now = live.plan, self._clock.now
        rid = f"r{plan.index}-c{live.sent}"
        live.sent += 1
        live.calls[rid] = branch
        self._owner[rid] = plan.index
        received = live.received.get(branch, 0)  # continuing an answer cut short
        length = plan.steps[live.step][branch] - received
        prompt = self._workload.prompt_tokens + received
        self._asked[rid] = length
        out = self._estimator.output_tokens(prompt, length, None, FLOW)
        req = RequestInfo(
            request_id=rid,
            tenant=TENANT,
            workload_class="interactive",
            model=self._model,
            estimate=WorkEstimate(prompt, out),
            arrival=now,
            max_tokens=length,
            is_retry=live.deferrals.get(branch, 0) > 0,
            session_id=f"run-{plan.index}-b{branch}",
            stream=True,
            run=self._hints(live),
        )
        self._answer(self.scheduler.submit(req, self._snapshot()))

    def _hints(self, live: _LiveRun) -> RunHints:
        said, plan = self._workload.hints, live.plan
        return RunHints(
            f"run-{plan.index}",
            deadline=live.deadline if "deadline" in said else None,
            calls=plan.calls if "calls" in said else None,
            tokens=plan.tokens(self._workload.prompt_tokens) if "tokens" in said else None,
            branches=plan.branches if "branches" in said else None,
        )

    def _refused(self, rid: str, decision: Decision) -> None:
        live = self._forget(rid)
        if live is None:
            return
        live.record.refusals += 1
        if decision.reason in RUN_ENDED:
            self._give_up(live, at_deadline=False)
            return
        branch = live.calls.pop(rid)
        k = live.deferrals.get(branch, 0)
        live.deferrals[branch] = k + 1
        wait = self._workload.backoff.delay(k, decision.retry_after_s, self._rng)
        last = self._workload.retry_until(live.plan.arrival, live.record.started)
        if self._clock.now + wait >= last:
            self._give_up(live, at_deadline=False)
            return
        self._push(self._clock.now + wait, _Kind.RETRY, run=live.plan.index, branch=branch)

    def _continue(self, rid: str, served: int) -> None:
        """The answer was cut short (``finish_reason: length`` under a degrade's cap): the
        client asks for the rest, its context the longer by what it got, as an agent does
        with a truncated answer. The step is not done until the whole answer is in."""
        live = self._forget(rid)
        if live is None:
            return
        branch = live.calls.pop(rid)
        live.received[branch] = live.received.get(branch, 0) + served
        self._submit(live, branch)

    def _call_done(self, rid: str) -> None:
        live = self._forget(rid)
        if live is None:
            return
        live.pending.discard(live.calls.pop(rid))
        if live.pending:
            return
        if live.step + 1 < len(live.plan.steps):
            think = live.plan.think_s[live.step]
            live.step += 1
            self._push(self._clock.now + think, _Kind.STEP, run=live.plan.index)
            return
        self._end(live, completed=True)
        if self._runs_on:  # the client says it is done (POST /v1/runs/{id}/complete)
            self.scheduler.runs.end(TENANT, f"run-{live.plan.index}", cancel=False)

    def _give_up(self, live: _LiveRun, *, at_deadline: bool) -> None:
        """The client stops the run: its calls in flight are cut, queued ones withdrawn;
        before the deadline it also cancels the run at the gateway (DELETE)."""
        for rid in list(live.calls):
            if rid in self._tickets:
                self._cut(rid)
            elif self.scheduler.cancel(rid):
                self._forget(rid)
        self._end(live, completed=False)
        if self._runs_on and not at_deadline:
            for out in self.scheduler.runs.end(TENANT, f"run-{live.plan.index}") or []:
                self._forget(out.request_id)

    def _end(self, live: _LiveRun, *, completed: bool) -> None:
        live.record.ended = self._clock.now
        live.record.completed = completed
        del self._live[live.plan.index]
        self.records.append(live.record)
        if self._measured is None or live.plan.index in self._measured:
            self._unended -= 1

    def _forget(self, rid: str) -> _LiveRun | None:
        self._asked.pop(rid, None)
        index = self._owner.pop(rid, None)
        return None if index is None else self._live.get(index)

    # -- the gateway and the engine ------------------------------------------------------

    def _answer(self, out: Ticket | Decision) -> None:
        if isinstance(out, Ticket):
            self._dispatch(out)
        elif out.decision is DecisionKind.REJECT:
            self._refused(out.request_id, out)

    def _dispatch(self, ticket: Ticket) -> None:
        rid = ticket.request_id
        req = ticket.request
        assert req.max_tokens is not None
        tokens = req.max_tokens
        if (cap := ticket.decision.degradation.max_tokens) is not None:
            tokens = min(tokens, cap)
        self._tickets[rid] = ticket
        self._served[rid] = tokens
        if (live := self._live.get(self._owner[rid])) is not None:
            live.record.started = True
        sent = EngineRequest(rid, req.estimate.prompt_tokens, tokens)
        self._engine_for(ticket).add(sent, self._clock.now)

    def _engine_for(self, ticket: Ticket) -> CuttableBackend:
        """The engine a dispatched ticket runs on: the one backend here."""
        return self._backend

    def _engine_step(self, step: EngineStep) -> None:
        now = self._clock.now
        for rid in step.first_token:
            if (ticket := self._tickets.get(rid)) is not None:
                self.scheduler.first_token(ticket)
                live = self._live.get(self._owner[rid])
                if live is not None and live.record.first_token is None:
                    live.record.first_token = now
        for rid in step.finished:
            if (ticket := self._tickets.pop(rid, None)) is not None:
                served = self._served.pop(rid)
                self._release(ticket, Outcome.COMPLETED, served)
                if served < self._asked.pop(rid):
                    self._continue(rid, served)
                else:
                    self._call_done(rid)

    def _cut(self, rid: str) -> None:
        """Abort a call in flight in the engine and release it CANCELLED."""
        ticket = self._tickets.pop(rid)
        generated = self._backend.generated(rid, self._served.pop(rid))
        self._backend.abort(rid)
        self._release(ticket, Outcome.CANCELLED, generated)
        self._forget(rid)

    def _release(self, ticket: Ticket, outcome: Outcome, generated: int) -> None:
        now, req = self._clock.now, ticket.request
        usage = Usage(prompt_tokens=req.estimate.prompt_tokens, completion_tokens=generated)
        live = self._live.get(self._owner.get(ticket.request_id, -1))
        if live is not None:
            live.record.spent_tokens += usage.total
        if outcome is Outcome.COMPLETED:
            self._estimator.observe(self._model, 0, usage, flow=FLOW)
        self.scheduler.release(ticket, Ending(outcome, usage, latency_s=now - ticket.dispatched_at))

    def _pump(self) -> None:
        for out in self.scheduler.poll(self._snapshot()):
            self._answer(out)
        for ended in self.scheduler.runs.take_ends():
            for rid in ended.cut:
                index = self._owner.get(rid)
                if rid in self._tickets:
                    self._cut(rid)
                live = None if index is None else self._live.get(index)
                if live is not None:
                    self._give_up(live, at_deadline=True)
        self._kick_engine()
        self._engine_events.arm(self.scheduler.next_wakeup())

    def _kick_engine(self) -> None:
        self._engine_events.kick()

    def _snapshot(self) -> BackendsSnapshot:
        now = self._clock.now
        return BackendsSnapshot(at=now, backends=(self._backend.view(now),))
