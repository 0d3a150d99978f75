"""Agent runs (``simulation.run_core.RunSimulation``) in front of one or more backends,
each stepping on its own, with what the matrix measures besides the runs themselves:
each call's time to first token from its first attempt, each client's first return
after a refusal, and the simultaneous-refusal probe at the end of the arrivals."""

from __future__ import annotations

from typing import Any

from emulator.profile import Profile
from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Ticket
from policies.types import Decision, Outcome
from simulation.agent_runs import RunPlan, RunWorkload, arrivals
from simulation.engine_adapter import KeptViews
from simulation.matrix.loop import MODEL, Return
from simulation.matrix.probe import probe
from simulation.ports import EngineStep, VirtualClock
from simulation.run_core import TENANT, CuttableBackend, RunSimulation, _Event, _Kind, _LiveRun
from simulation.stepping import Stepping, horizon

_Key = tuple[int, int, int]
"""(run, step, branch): one call of a run, whatever attempt carries it."""


class PooledRunSimulation(RunSimulation):
    def __init__(
        self,
        *,
        profile: Profile,
        backends: int,
        workload: RunWorkload,
        policy: dict[str, Any],
        rate: float,
        duration_s: float,
        seed: int,
        measured: tuple[float, float] | None = None,
    ) -> None:
        """Runs arrive over ``[0, duration_s)``. ``measured``: the window of arrivals
        measured, (start, end); the loop ends once those runs have ended, and the probe is
        taken at its end (at the end of the arrivals when None)."""
        self.pool = {
            f"b{i}": CuttableBackend(profile, name=f"b{i}", model=MODEL) for i in range(backends)
        }
        self._names = list(self.pool)
        self._steps = {name: Stepping(b) for name, b in self.pool.items()}
        self._views = KeptViews(self.pool.values())
        self._where: dict[str, str] = {}
        self._first_try: dict[_Key, float] = {}
        self._answered: set[_Key] = set()
        """Calls whose first token came (one time to first token each)."""
        self._call: dict[str, _Key] = {}
        self._refused_at: dict[_Key, tuple[float, float]] = {}
        self._returning: dict[str, Return] = {}
        self._probe_at = duration_s if measured is None else measured[1]
        self._probed = False
        self.ttft: list[tuple[float, float]] = []
        """(the call's first attempt, its time to first token from then)."""
        self.returns: list[Return] = []
        self.probe_retry_after: list[float] = []
        plans = arrivals(workload, rate, duration_s, seed)
        super().__init__(
            plans=plans,
            workload=workload,
            policy=policy,
            backend=self.pool["b0"],
            clock=VirtualClock(),
            seed=seed,
            model=MODEL,
            measured=None if measured is None else _inside(plans, *measured),
        )

    def _handle(self, event: _Event) -> None:
        if event.kind is _Kind.ENGINE:
            self._steps[self._names[event.branch]].ended()
        if not self._probed and self._clock.now >= self._probe_at:
            self._probed = True
            self.probe_retry_after = probe(
                self.scheduler,
                self._snapshot(),
                tenant=TENANT,
                model=MODEL,
                prompt_tokens=self._workload.prompt_tokens,
                output_tokens=round(self._workload.lengths.mean),
                now=self._clock.now,
            )
        super()._handle(event)

    def _submit(self, live: _LiveRun, branch: int) -> None:
        key = (live.plan.index, live.step, branch)
        rid = f"r{live.plan.index}-c{live.sent}"
        now = self._clock.now
        self._first_try.setdefault(key, now)
        self._call[rid] = key
        if (refused := self._refused_at.pop(key, None)) is not None:
            at, retry_after = refused
            ret = Return(now, on_time=abs(now - (at + retry_after)) < 1e-6)
            self.returns.append(ret)
            self._returning[rid] = ret
        super()._submit(live, branch)

    def _refused(self, rid: str, decision: Decision) -> None:
        if (ret := self._returning.pop(rid, None)) is not None:
            ret.admitted = False
        if decision.retry_after_s and (key := self._call.get(rid)) is not None:
            self._refused_at[key] = (self._clock.now, decision.retry_after_s)
        super()._refused(rid, decision)

    def _dispatch(self, ticket: Ticket) -> None:
        rid = ticket.request_id
        if (ret := self._returning.pop(rid, None)) is not None:
            ret.admitted = True
        self._where[rid] = ticket.backend
        super()._dispatch(ticket)

    def _engine_for(self, ticket: Ticket) -> CuttableBackend:
        return self.pool[ticket.backend]

    def _engine_step(self, step: EngineStep) -> None:
        now = self._clock.now
        for rid in step.first_token:
            if rid in self._tickets and (key := self._call.get(rid)) is not None:
                if key in self._answered:
                    continue  # the continuation of an answer cut short
                self._answered.add(key)
                first = self._first_try[key]
                self.ttft.append((first, now - first))
        super()._engine_step(step)

    def _cut(self, rid: str) -> None:
        ticket = self._tickets.pop(rid)
        backend = self.pool[self._where.pop(rid)]
        generated = backend.generated(rid, self._served.pop(rid))
        backend.abort(rid)
        self._release(ticket, Outcome.CANCELLED, generated)
        self._forget(rid)

    def _kick_engine(self) -> None:
        now = self._clock.now
        for i, name in enumerate(self._names):
            if self._steps[name].busy:
                continue
            until = horizon(self._events, self._steps.values())
            if not self._probed:  # it is taken at the first event from its time on
                until = min(until, self._probe_at)
            if (step := self._steps[name].start(now, until)) is not None:
                self._push(step.ends_at, _Kind.ENGINE, branch=i, step=step, seen=step.changed)

    def _snapshot(self) -> BackendsSnapshot:
        return self._views.snapshot(self._clock.now)


def _inside(plans: list[RunPlan], start: float, end: float) -> frozenset[int]:
    return frozenset(p.index for p in plans if start <= p.arrival < end)
