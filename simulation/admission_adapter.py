"""``policies.engine.scheduler.Scheduler`` behind the simulator's admission port.

The simulator plays the gateway: it builds the ``RequestInfo`` the gateway would build
(estimated, never actual, output tokens), keeps the tickets, and releases each one with
the usage and timings the gateway would report.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.estimate import TokenEstimator
from policies.registry import build_policy
from policies.types import (
    Clock,
    Decision,
    DecisionKind,
    Ending,
    Outcome,
    PromptBlocks,
    RequestInfo,
    Usage,
    WorkEstimate,
)
from simulation.ports import AdmissionAnswer, Attempt, Deferred, Dispatched, Queued

FLOW = "agents"
"""Every agent is one flow at the gateway (one tenant, one class, one model)."""


class SchedulerAdmission:
    """Every simulated turn goes through the production scheduler.

    ``estimated_output_tokens`` is what the gateway would charge before knowing the real
    length (the workload mixture's mean: an agent sends no ``max_tokens``). With
    ``max_tokens_hint`` every turn instead carries ``max_tokens`` = its own length, as the
    live swarm sends it (the emulator needs it for exact lengths), and the estimate is the
    gateway's own ``TokenEstimator``: min(max_tokens, the flow's recent p90 output).
    """

    def __init__(
        self,
        policy: dict[str, Any],
        *,
        clock: Clock,
        model: str,
        estimated_output_tokens: int,
        seed: int,
        max_tokens_hint: bool = False,
        tenant_of: Callable[[str], str] | None = None,
        marks_retries: bool = True,
        blocks_of: Callable[[str], PromptBlocks] | None = None,
    ) -> None:
        """``tenant_of``: the tenant of an agent's session id (default: one tenant).
        ``marks_retries`` False: a resent turn reaches the gateway as a new request, as
        from a client that says nothing of its retries. ``blocks_of``: the gateway's chunk
        hashes of a session's next prompt, sent where the policy keeps a prefix model (as
        the gateway hashes only then)."""
        self.policy_set = build_policy(policy)
        self.scheduler = Scheduler(self.policy_set, clock=clock, rng=random.Random(seed))
        self._clock, self._model = clock, model
        self._estimate = estimated_output_tokens
        self._estimator = TokenEstimator() if max_tokens_hint else None
        self._tickets: dict[str, Ticket] = {}
        self._tenant_of = tenant_of
        self._marks_retries = marks_retries
        self._blocks_of = blocks_of if self.policy_set.models_prefixes else None

    def submit(self, attempt: Attempt, fleet: BackendsSnapshot) -> AdmissionAnswer:
        session = attempt.session
        req = RequestInfo(
            request_id=attempt.request_id,
            tenant=self._tenant_of(session) if self._tenant_of else "agents",
            workload_class="interactive",
            model=self._model,
            estimate=self._work(attempt.prompt_tokens, attempt.output_tokens),
            arrival=self._clock(),
            is_retry=attempt.is_retry and self._marks_retries,
            session_id=session,
            stream=True,
            blocks=self._blocks_of(session) if self._blocks_of else None,
        )
        return self._verdict(self.scheduler.submit(req, fleet))

    def _work(self, prompt_tokens: int, output_tokens: int) -> WorkEstimate:
        if self._estimator is None:
            return WorkEstimate(prompt_tokens, self._estimate)
        out = self._estimator.output_tokens(prompt_tokens, output_tokens, None, FLOW)
        return WorkEstimate(prompt_tokens, out)

    def poll(self, fleet: BackendsSnapshot) -> list[AdmissionAnswer]:
        return [self._verdict(out) for out in self.scheduler.poll(fleet)]

    def first_token(self, request_id: str) -> None:
        self.scheduler.first_token(self._tickets[request_id])

    def release(
        self, request_id: str, usage: tuple[int, int], decode_start: float, finished: float
    ) -> None:
        ticket = self._tickets.pop(request_id)
        done = Usage(prompt_tokens=usage[0], completion_tokens=usage[1])
        if self._estimator is not None:
            self._estimator.observe(self._model, 0, done, flow=FLOW)
        ttft, latency = decode_start - ticket.dispatched_at, finished - ticket.dispatched_at
        self.scheduler.release(ticket, Ending(Outcome.COMPLETED, done, ttft, latency))

    def next_wakeup(self) -> float | None:
        return self.scheduler.next_wakeup()

    def _verdict(self, out: Ticket | Decision) -> AdmissionAnswer:
        if isinstance(out, Ticket):
            self._tickets[out.request_id] = out
            return Dispatched(out.request_id, out.decision.degradation.max_tokens)
        if out.decision is DecisionKind.DELAY:
            return Queued(out.request_id)
        if out.decision is DecisionKind.REJECT:
            return Deferred(out.request_id, out.retry_after_s)
        raise AssertionError(f"unexpected decision {out.decision} outside a ticket")
