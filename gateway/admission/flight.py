"""One request's way through the gateway, ending in exactly one terminal outcome.

``finish`` is idempotent: it releases the ticket (if any), corrects the estimator, counts
metrics and writes the decision record, once. Latencies handed to the scheduler are
measured from dispatch (the backend's share); the record's are measured from arrival.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.context import GatewayContext
from gateway.metrics.records import RequestRecord
from gateway.replicas.contract import Grant
from policies.engine.scheduler_types import Ticket
from policies.estimate import SINGLE, FanOut
from policies.types import Decision, DecisionKind, Ending, Outcome, RequestInfo, Usage

if TYPE_CHECKING:
    from gateway.tracing.request_trace import RequestTrace


class Flight:
    def __init__(
        self, ctx: GatewayContext, record: RequestRecord, request: RequestInfo | None = None
    ) -> None:
        self.ctx = ctx
        self.record = record
        self.request = request
        self.prompt_chars = 0
        self.fan_out: FanOut = SINGLE
        self.ticket: Ticket | None = None
        self.decision: Decision | None = None
        self.queue_position: int | None = None
        self.enqueued_at: float | None = None
        self.first_byte_at: float | None = None
        self.grant: Grant | None = None
        """The tenant's hold on limits shared with other replicas (fleet mode)."""
        self._first_token_of: Ticket | None = None
        self.done = False
        self.trace: RequestTrace | None = None
        """The request's spans when tracing is on (``gateway/tracing``)."""

    def decided(self, decision: Decision) -> None:
        """Every decision object the scheduler hands out for this request is counted."""
        now = self.ctx.clock()
        self.decision = decision
        self.record.decision = decision
        self.ctx.metrics.decision(decision, self.record.workload_class)
        if decision.decision is DecisionKind.DELAY:
            if self.queue_position is None:
                self.queue_position = decision.queue_position
            self.enqueued_at = self.enqueued_at if self.enqueued_at is not None else now
            return
        waited = 0.0 if self.enqueued_at is None else now - self.enqueued_at
        self.record.queue_wait_s = (self.record.queue_wait_s or 0.0) + waited
        if decision.admitted:
            self.ctx.metrics.waited(waited, decision.tenant, self.record.workload_class)
        self.enqueued_at = None

    def dispatched(self, ticket: Ticket) -> None:
        self.ticket = ticket
        self.record.backend = ticket.backend
        self.record.attempts += 1
        self.decided(ticket.decision)

    def first_byte(self) -> None:
        if self.first_byte_at is None:
            self.first_byte_at = self.ctx.clock()
            self.record.ttft_s = self.first_byte_at - self.record.arrival
            if self.trace is not None:
                self._traced_first_byte(self.trace, self.first_byte_at)

    def _traced_first_byte(self, trace: RequestTrace, at: float) -> None:
        ticket, request = self.ticket, self.request
        since_dispatch = None if ticket is None else at - ticket.dispatched_at
        stream = request is not None and request.stream
        trace.first_token(stream, at - self.record.arrival, since_dispatch)

    def first_token(self) -> None:
        """A streamed response's first token was relayed: tell admission once per attempt."""
        self.first_byte()
        ticket = self.ticket
        if ticket is not None and ticket is not self._first_token_of:
            self._first_token_of = ticket
            self.ctx.admission.first_token(ticket)

    def release_attempt(self, outcome: Outcome, usage: Usage | None = None) -> None:
        """Give the current ticket back (idempotent); the request itself goes on."""
        ticket, self.ticket = self.ticket, None
        if ticket is None:
            return
        now = self.ctx.clock()
        ttft = None if self.first_byte_at is None else self.first_byte_at - ticket.dispatched_at
        self.ctx.admission.release(
            ticket, Ending(outcome, usage, ttft_s=ttft, latency_s=now - ticket.dispatched_at)
        )

    def finish(
        self,
        outcome: Outcome,
        *,
        status: int,
        usage: Usage | None = None,
        error: str | None = None,
    ) -> None:
        if self.done:
            return
        self.done = True
        ticket = self.ticket
        work = None if usage is None else self.fan_out.work(usage)  # compares with the estimate
        self.release_attempt(outcome, work)
        if self.grant is not None:
            self.ctx.shared.release(self.grant, usage, served=self.record.attempts > 0)
        now = self.ctx.clock()
        rec = self.record
        rec.outcome, rec.status, rec.usage, rec.error = outcome, status, usage, error
        rec.latency_s = now - rec.arrival
        if work is not None and ticket is not None:
            self._learn(ticket.request, work)
        if self.request is not None and self.request.deadline is not None:
            rec.deadline_met = outcome is Outcome.COMPLETED and now <= self.request.deadline
            self.ctx.metrics.deadline("met" if rec.deadline_met else "missed")
        self.ctx.metrics.outcome(outcome, rec.tenant, rec.workload_class)
        self.ctx.records.emit(rec)
        if self.trace is not None:
            self.trace.finish(outcome, status, usage, error)

    def _learn(self, request: RequestInfo, usage: Usage) -> None:
        self.ctx.metrics.tokens(request.estimate, usage)
        self.ctx.estimator.observe(
            request.model,
            self.prompt_chars,
            usage,
            flow=request.flow,
            expected_output=request.estimate.output_tokens,
            sequences=request.estimate.sequences,
        )
