"""The discrete-event loop: closed-loop agents, one admission policy, one engine, one clock.

Events sit on a heap ordered by (time, sequence). After every event the loop *pumps*:
it polls the admission policy with a fresh fleet snapshot, hands dispatched turns to the
engine, schedules retries for deferred ones, starts an engine step if the engine is idle,
and arms a wake-up for the policy's ``next_wakeup``. The run stops admitting *new* turns
at ``duration_s`` and then drains, so every turn ends (completed) before ``run`` returns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from policies.backends import BackendsSnapshot
from simulation.event_queue import EventQueue
from simulation.metrics import TurnRecord
from simulation.ports import (
    AdmissionAnswer,
    AdmissionPort,
    Attempt,
    Deferred,
    Dispatched,
    EnginePort,
    EngineRequest,
    EngineStep,
    Queued,
    VirtualClock,
)
from simulation.stepping import EngineEvents
from simulation.workload import AgentWorkload

DRAIN_LIMIT_S = 3600.0
"""A drain that takes longer than this means a turn is stuck: the run fails loudly."""


class _Kind(Enum):
    THINK_END = 0
    RETRY = 1
    STEP_END = 2
    WAKEUP = 3


@dataclass(slots=True)
class _Event:
    kind: _Kind
    agent: int = -1
    step: EngineStep | None = None


class Prompts(Protocol):
    """Where each agent's next prompt comes from (default: the workload's fixed size)."""

    def prompt(self, agent: int) -> tuple[int, tuple[bytes, ...]]:
        """(prompt tokens, their chained block hashes) of the agent's next turn."""
        ...

    def answered(self, agent: int, output_tokens: int) -> None:
        """The agent's turn came back with this many tokens."""
        ...


class FixedPrompts:
    """Every turn carries ``tokens`` prompt tokens that share nothing with any other."""

    def __init__(self, tokens: int) -> None:
        self._tokens = tokens

    def prompt(self, agent: int) -> tuple[int, tuple[bytes, ...]]:
        return self._tokens, ()

    def answered(self, agent: int, output_tokens: int) -> None:
        pass


class StuckSimulation(RuntimeError):
    """The drain did not finish: some turn never ended."""


class Simulation:
    """One run: ``n_agents`` agents against ``admission`` in front of ``engine``."""

    def __init__(
        self,
        *,
        n_agents: int,
        workload: AgentWorkload,
        admission: AdmissionPort,
        engine: EnginePort,
        clock: VirtualClock,
        duration_s: float,
        seed: int,
        prompts: Prompts | None = None,
    ) -> None:
        """``prompts``: e.g. ``simulation.conversations.ConversationPrompts`` (growing
        contexts the engine's prefix cache serves); default ``workload.prompt_tokens``."""
        self._workload, self._admission, self._engine = workload, admission, engine
        self._prompts: Prompts = prompts or FixedPrompts(workload.prompt_tokens)
        self._clock, self._duration = clock, duration_s
        self._rng = random.Random(seed)
        self._events: EventQueue[_Event] = EventQueue()
        self._open: dict[int, TurnRecord] = {}
        self._by_request: dict[str, int] = {}
        self._attempt_submit: dict[str, float] = {}
        self._served: dict[str, int] = {}
        self._engine_events = EngineEvents(
            self._events,
            engine,
            clock,
            step_end=lambda step: _Event(_Kind.STEP_END, step=step),
            wakeup=lambda: _Event(_Kind.WAKEUP),
        )
        self.records: list[TurnRecord] = []
        for agent in range(n_agents):
            self._push(workload.think_s(self._rng), _Kind.THINK_END, agent=agent)

    def run(self) -> list[TurnRecord]:
        """Run to the end of the drain; returns every turn, all of them finished."""
        while self._events:
            if not self._open and self._clock.now >= self._duration:
                break  # drained: what is left are idle agents and stale wake-ups
            at, event = self._events.pop()
            if at > self._duration + DRAIN_LIMIT_S:
                raise StuckSimulation(f"{len(self._open)} turns still open at {at:.0f}s")
            self._clock.now = max(self._clock.now, at)
            self._handle(event)
        if self._open:
            raise StuckSimulation(f"{len(self._open)} turns never ended")
        return self.records

    def _push(
        self, at: float, kind: _Kind, *, agent: int = -1, step: EngineStep | None = None
    ) -> None:
        self._events.push(at, _Event(kind, agent, step))

    def _handle(self, event: _Event) -> None:
        now = self._clock.now
        if event.kind is _Kind.THINK_END:
            if now < self._duration:
                tokens = self._workload.output_tokens(self._rng)
                self._open[event.agent] = TurnRecord(event.agent, tokens, first_submit=now)
                self._submit(event.agent)
        elif event.kind is _Kind.RETRY:
            self._submit(event.agent)
        elif event.kind is _Kind.STEP_END:
            assert event.step is not None
            self._engine_events.ended()
            self._finish_step(event.step)
            if not event.step.changed:
                self._engine_events.kick()  # a plain decode step: skip the policy pump
                return
        # WAKEUP: nothing to do beyond the pump that follows every event.
        self._pump()

    def _submit(self, agent: int) -> None:
        record = self._open[agent]
        now = self._clock.now
        request_id = f"a{agent}-t{len(self.records)}-r{len(record.attempts)}"
        record.attempts.append(now)
        self._by_request[request_id] = agent
        self._attempt_submit[request_id] = now
        prompt_tokens = self._prompts.prompt(agent)[0]
        retry = len(record.attempts) > 1
        attempt = Attempt(request_id, f"agent-{agent}", prompt_tokens, record.output_tokens, retry)
        verdict = self._admission.submit(attempt, self._snapshot())
        self._apply(verdict)

    def _apply(self, verdict: AdmissionAnswer) -> None:
        rid = verdict.request_id
        agent = self._by_request[rid]
        record = self._open[agent]
        if isinstance(verdict, Dispatched):
            record.accepted_submit = self._attempt_submit.pop(rid)
            tokens = record.output_tokens  # like the gateway: a degrade caps max_tokens
            if verdict.max_tokens is not None:
                tokens = min(tokens, verdict.max_tokens)
            self._served[rid] = tokens
            prompt, hashes = self._prompts.prompt(agent)
            self._engine.add(EngineRequest(rid, prompt, tokens, hashes), self._clock.now)
        elif isinstance(verdict, Deferred):
            record.deferrals.append(self._attempt_submit.pop(rid))
            del self._by_request[rid]
            backoff = self._workload.backoff.delay(
                len(record.deferrals) - 1, verdict.retry_after_s, self._rng
            )
            self._push(self._clock.now + backoff, _Kind.RETRY, agent=agent)
        else:
            assert isinstance(verdict, Queued)

    def _finish_step(self, step: EngineStep) -> None:
        now = self._clock.now
        for rid in step.first_token:
            self._open[self._by_request[rid]].decode_start = now
            self._admission.first_token(rid)
        for rid in step.finished:
            agent = self._by_request.pop(rid)
            record = self._open.pop(agent)
            if record.decode_start is None:  # one-token turns start and end in one step
                record.decode_start = now
            record.finished = now
            self.records.append(record)
            usage = (self._prompts.prompt(agent)[0], self._served.pop(rid))
            self._admission.release(rid, usage, record.decode_start, now)
            self._prompts.answered(agent, usage[1])
            self._push(now + self._workload.think_s(self._rng), _Kind.THINK_END, agent=agent)

    def _pump(self) -> None:
        for verdict in self._admission.poll(self._snapshot()):
            self._apply(verdict)
        self._engine_events.kick()
        self._engine_events.arm(self._admission.next_wakeup())

    def _snapshot(self) -> BackendsSnapshot:
        now = self._clock.now
        return BackendsSnapshot(at=now, backends=(self._engine.view(now),))
