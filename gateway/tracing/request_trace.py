"""One request's spans, from the call to its one terminal outcome.

The pipeline (``gateway.request``) tells a ``RequestTrace`` what happens, whatever front
brought the request; the trace turns it into spans::

    chat {model}            SERVER   the call, from its head to its outcome
    ├─ authenticate         INTERNAL authentication, the body read, parsed, estimated
    ├─ decide               INTERNAL one per admission decision (admit/delay/degrade/reject)
    ├─ queue                INTERNAL the wait after a delay: dequeued/expired/dropped/cancelled
    └─ attempt {backend}    CLIENT   one per backend tried; its context goes upstream
       └─ stream            INTERNAL a stream from its first token to its end (decode)

After an asynchronous handoff the call's span ends (202) and an ``async job`` span, its
child, carries the job's decisions and attempts. Nothing here reads a prompt or a reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace import set_span_in_context as in_context

from gateway.metrics.records import CLIENT_CLOSED_REQUEST
from gateway.tracing import attributes as a
from gateway.tracing.naming import operation_of, route_name
from policies.types import Decision, DecisionKind, Outcome, Reason, RequestInfo, Usage

if TYPE_CHECKING:
    from policies.engine.scheduler_types import Ticket

PROVIDER = "vllm"
"""``gen_ai.provider.name``: the backends are vLLM servers (or speak its API)."""


class RequestTrace:
    __slots__ = (
        "attempt",
        "attempts",
        "auth",
        "decide",
        "operation",
        "propagator",
        "queue",
        "recording",
        "root",
        "server",
        "stream",
        "tenant_label",
        "tracer",
    )

    def __init__(self, tracer: Tracer, propagator: TextMapPropagator, server: Span) -> None:
        self.tracer = tracer
        self.propagator = propagator
        self.server = server
        self.recording = server.is_recording()
        """False for a call the sampler left out: its children are its own span (below)."""
        self.root = server
        """The parent of the decisions and attempts: the call, or its async job."""
        self.auth: Span | None = self._child("authenticate", server)
        self.decide: Span | None = None
        self.queue: Span | None = None
        self.attempt: Span | None = None
        self.stream: Span | None = None
        self.attempts = 0
        self.operation = "chat"
        self.tenant_label = ""

    @classmethod
    def begin(
        cls, tracer: Tracer, propagator: TextMapPropagator, parent: Context | None, path: str
    ) -> RequestTrace:
        server = tracer.start_span(
            route_name(path),
            context=parent,
            kind=SpanKind.SERVER,
            attributes={a.HTTP_METHOD: "POST", a.HTTP_ROUTE: path, a.URL_PATH: path},
        )
        return cls(tracer, propagator, server)

    def _child(
        self,
        name: str,
        parent: Span,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, str | int] | None = None,
    ) -> Span:
        """A new span under ``parent``; for a call the sampler left out, the call's own
        non-recording span: nothing is built, and upstream its context says "not sampled"."""
        if not self.recording:
            return self.server
        context = in_context(parent)
        return self.tracer.start_span(name, context=context, kind=kind, attributes=attributes)

    # authenticate, read, prepare

    def prepared(self, request: RequestInfo, path: str, tenant_label: str, run: str | None) -> None:
        """The request is read and estimated: the call's span is named for its operation."""
        operation = self.operation = operation_of(path)
        self.tenant_label = tenant_label
        attrs: dict[str, str | int | bool] = {
            **_genai_attributes(operation, request),
            a.TENANT: tenant_label,
            a.WORKLOAD_CLASS: request.workload_class,
            a.REQUEST_ID: request.request_id,
            a.STREAM: request.stream,
        }
        if run is not None:
            attrs[a.RUN_ID] = run
        self.server.update_name(f"{operation} {request.model}")
        self.server.set_attributes(attrs)
        if self.auth is not None:
            self.auth.set_attributes({a.TENANT: tenant_label, a.REQUEST_MODEL: request.model})
            self.auth.end()
            self.auth = None

    def refused_early(self, status: int, reason: str) -> None:
        """Refused before it was prepared (401, 400, 408, 413...): nothing was taken."""
        if self.auth is not None:
            self.auth.set_status(Status(StatusCode.ERROR, reason))
            self.auth.set_attribute(a.ERROR_TYPE, reason)
            self.auth.end()
            self.auth = None
        self._end_server(status, reason=reason)

    def escaped(self, exc: BaseException) -> None:
        """An error or a cancellation escaped before the request was prepared."""
        if isinstance(exc, asyncio.CancelledError):
            self.refused_early(CLIENT_CLOSED_REQUEST, "cancelled")
        else:
            self.refused_early(500, type(exc).__name__)

    # decide and queue

    def deciding(self) -> None:
        self.decide = self._child("decide", self.root)

    def decided(self, result: Ticket | Decision) -> None:
        """The scheduler's answer (or the shared state's refusal)."""
        span = self.decide or self._child("decide", self.root)
        self.decide = None
        decision = result if isinstance(result, Decision) else result.decision
        span.set_attributes(_decision_attributes(decision, self.tenant_label))
        self._note_decision(decision)
        span.end()

    def queued(self, decision: Decision) -> None:
        self.decided(decision)
        position = decision.queue_position
        attrs = {} if position is None else {a.QUEUE_POSITION: position}
        self.queue = self._child("queue", self.root, attributes=attrs)

    def dequeued(self, result: Ticket | Decision | None, waited_s: float) -> None:
        """The wait ended: ``result`` dispatched it, refused it, or None (the client left)."""
        span, self.queue = self.queue, None
        if span is None:
            return
        if result is None:
            outcome = "cancelled"
        elif isinstance(result, Decision):
            expired = result.reason is Reason.DEADLINE_EXPIRED
            outcome = "expired" if expired else "dropped"
        else:
            outcome = "dequeued"
        span.set_attributes({a.QUEUE_RESULT: outcome, a.QUEUE_WAITED: waited_s})
        if result is not None:
            decision = result if isinstance(result, Decision) else result.decision
            span.set_attributes(_decision_attributes(decision, self.tenant_label))
            self._note_decision(decision)
        span.end()

    def _note_decision(self, decision: Decision) -> None:
        """The call's span keeps the last decision made for it."""
        self.server.set_attributes(
            {
                a.DECISION: decision.decision.value,
                a.REASON: decision.reason.value,
                a.POLICY_VERSION: decision.policy_version,
            }
        )

    # attempts and the stream

    def attempting(self, ticket: Ticket, host: str | None, port: int | None) -> None:
        self.attempts += 1
        attrs: dict[str, str | int] = {
            **_genai_attributes(self.operation, ticket.request),
            a.BACKEND: ticket.backend,
            a.ATTEMPT: self.attempts,
        }
        if host is not None:
            attrs[a.SERVER_ADDRESS] = host
        if port is not None:
            attrs[a.SERVER_PORT] = port
        self.attempt = self._child(f"attempt {ticket.backend}", self.root, SpanKind.CLIENT, attrs)

    def carrier(self) -> dict[str, str]:
        """The headers that carry the attempt's span context upstream (``traceparent``,
        ``tracestate``): the backend's own spans join the trace under the attempt."""
        out: dict[str, str] = {}
        if self.attempt is not None:
            self.propagator.inject(out, context=in_context(self.attempt))
        return out

    def failed(self, kind: str) -> None:
        """The attempt failed before anything reached the client; another may follow."""
        span, self.attempt = self.attempt, None
        if span is None:
            return
        span.set_attributes({a.FAILOVER: kind, a.ERROR_TYPE: kind})
        span.set_status(Status(StatusCode.ERROR, kind))
        span.end()

    def first_token(self, stream: bool, ttft_s: float, since_dispatch_s: float | None) -> None:
        """The first token (a stream's first events, or a whole answer) came back."""
        self.server.set_attribute(a.TTFT, ttft_s)
        if self.attempt is None:
            return
        if since_dispatch_s is not None:
            self.attempt.set_attribute(a.TTFT, since_dispatch_s)
        if stream and self.stream is None:
            self.stream = self._child("stream", self.attempt)

    # the end

    def handed_off(self, job_id: str) -> None:
        """A refused call became an async job (202): the call's span ends; the job's span,
        its child, carries what the job does until the flight finishes."""
        self.server.set_attribute(a.ASYNC_JOB, job_id)
        self._end_server(202)
        self.root = self._child("async job", self.server, attributes={a.ASYNC_JOB: job_id})

    def finish(self, outcome: Outcome, status: int, usage: Usage | None, error: str | None) -> None:
        """The request's one terminal outcome: every open span ends."""
        for span in (self.auth, self.decide, self.queue):
            if span is not None:
                span.end()
        self.auth = self.decide = self.queue = None
        usage_attrs = _usage_attributes(usage)
        if self.stream is not None:
            if usage_attrs:
                self.stream.set_attributes(usage_attrs)
            _end_failed(self.stream, outcome, error)
            self.stream = None
        ended = {**usage_attrs, a.OUTCOME: outcome.value}
        if self.attempt is not None:
            attrs = ended if outcome is Outcome.CANCELLED else {**ended, a.HTTP_STATUS: status}
            self.attempt.set_attributes(attrs)
            _end_failed(self.attempt, outcome, error)
            self.attempt = None
        if self.root is not self.server:  # an async job's end
            self.root.set_attributes(ended)
            _end_failed(self.root, outcome, error)
            return
        self._end_server(status, error=error if status >= 500 else None, attrs=ended)

    def _end_server(
        self,
        status: int,
        *,
        reason: str | None = None,
        error: str | None = None,
        attrs: dict[str, str | int] | None = None,
    ) -> None:
        span = self.server
        ended: dict[str, str | int] = {**(attrs or {}), a.HTTP_STATUS: status}
        if reason is not None:
            ended[a.REASON] = reason
        if status >= 500:  # OTel's HTTP server spans: 4xx is the client's, not an error
            ended[a.ERROR_TYPE] = str(status)
            span.set_status(Status(StatusCode.ERROR, error))
        span.set_attributes(ended)
        span.end()


def _genai_attributes(operation: str, request: RequestInfo) -> dict[str, str | int]:
    """The GenAI request attributes of ``request`` (the call's, or as sent on an attempt)."""
    attrs: dict[str, str | int] = {
        a.OPERATION: operation,
        a.PROVIDER: PROVIDER,
        a.REQUEST_MODEL: request.model,
    }
    if request.max_tokens is not None:
        attrs[a.REQUEST_MAX_TOKENS] = request.max_tokens
    return attrs


def _decision_attributes(decision: Decision, tenant_label: str) -> dict[str, str | int | float]:
    """The decision as attributes; its flow named with the tenant's metric label."""
    estimate, flow = decision.estimate, decision.flow
    attrs: dict[str, str | int | float] = {
        a.DECISION: decision.decision.value,
        a.REASON: decision.reason.value,
        a.POLICY: decision.policy,
        a.POLICY_VERSION: decision.policy_version,
        a.FLOW: flow.named(tenant_label),
        a.ESTIMATE_INPUT: estimate.prompt_tokens,
        a.ESTIMATE_OUTPUT: estimate.output_tokens,
    }
    if decision.backend is not None:
        attrs[a.BACKEND] = decision.backend
    if decision.retry_after_s is not None:
        attrs[a.RETRY_AFTER] = decision.retry_after_s
    if decision.queue_position is not None:
        attrs[a.QUEUE_POSITION] = decision.queue_position
    if decision.decision is DecisionKind.DEGRADE:
        degradation = decision.degradation
        attrs[a.DEGRADED_STEPS] = ",".join(degradation.steps)
        if degradation.model is not None:
            attrs[a.DEGRADED_MODEL] = degradation.model
        if degradation.max_tokens is not None:
            attrs[a.DEGRADED_MAX_TOKENS] = degradation.max_tokens
    if decision.shadowed:
        attrs[a.SHADOWED] = ",".join(decision.shadowed)
    return attrs


def _usage_attributes(usage: Usage | None) -> dict[str, int]:
    if usage is None:
        return {}
    return {a.INPUT_TOKENS: usage.prompt_tokens, a.OUTPUT_TOKENS: usage.completion_tokens}


def _end_failed(span: Span, outcome: Outcome, error: str | None) -> None:
    if outcome is Outcome.FAILED:
        span.set_attribute(a.ERROR_TYPE, error or "failed")
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
