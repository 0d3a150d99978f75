"""What the client sees: decision disclosure headers, rejections and errors.

Every response carries ``x-request-id``; every response after a decision carries
``x-sluicegate-decision``/``-reason``/``-policy-version``, plus ``-queue-position`` and
``-queue-wait-ms`` when the request waited, ``-degraded`` and ``-shadowed`` when those apply.
A refusal before any decision says ``reject`` with a gateway reason (``invalid_request``,
``unauthenticated``, ``unknown_model``, ``body_too_large``).
"""

from __future__ import annotations

from starlette.responses import JSONResponse, Response

from gateway.admission.flight import Flight
from gateway.context import GatewayContext, Runtime
from gateway.metrics.records import RequestRecord
from gateway.request.errors import (
    RUN_ENDED_REASONS,
    ApiError,
    error_body,
    rejection_body,
    rejection_status,
    retry_after_headers,
)
from policies.types import Decision, Outcome, Reason


def refuse(
    ctx: GatewayContext, err: ApiError, request_id: str, path: str, arrival: float
) -> Response:
    """A refusal before scheduling: counted and recorded, nothing to release."""
    ctx.metrics.refused(err.status)
    record = RequestRecord(request_id, "", "", "", path, False, "", arrival)
    record.status, record.outcome, record.error = err.status, Outcome.REJECTED, err.reason
    ctx.records.emit(record)
    return JSONResponse(
        err.body(), status_code=err.status, headers=refusal_headers(request_id, err.reason)
    )


NOT_SERVED = {
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
}
"""A path the gateway does not serve, a method a path does not take: type and reason."""


def not_served(status: int, request_id: str) -> Response:
    """404 or 405 (``NOT_SERVED``), with the refusal's decision headers."""
    kind, reason = NOT_SERVED[status]
    return JSONResponse(
        error_body(reason, kind), status_code=status, headers=refusal_headers(request_id, reason)
    )


def refusal_headers(request_id: str, reason: str) -> dict[str, str]:
    """A refusal before any decision: ``reject`` with a gateway reason."""
    return {
        "x-request-id": request_id,
        "x-sluicegate-decision": "reject",
        "x-sluicegate-reason": reason,
    }


def headers(flight: Flight) -> dict[str, str]:
    """Decision disclosure on every response (see the README's header reference)."""
    out = {"x-request-id": flight.record.request_id}
    d = flight.decision
    if d is None:
        return out
    out["x-sluicegate-decision"] = d.decision.value
    out["x-sluicegate-reason"] = d.reason.value
    out["x-sluicegate-policy-version"] = d.policy_version
    if flight.queue_position is not None:
        out["x-sluicegate-queue-position"] = str(flight.queue_position)
        out["x-sluicegate-queue-wait-ms"] = str(round((flight.record.queue_wait_s or 0) * 1000))
    steps = d.degradation.steps
    if steps:
        out["x-sluicegate-degraded"] = ",".join(steps)
    if d.shadowed:
        out["x-sluicegate-shadowed"] = ",".join(d.shadowed)
    return out


_OUTCOME_OF = {
    Reason.DEADLINE_EXPIRED: Outcome.EXPIRED,
    Reason.RUN_DEADLINE_EXPIRED: Outcome.EXPIRED,
}


def rejection(flight: Flight, decision: Decision) -> Response:
    status = rejection_status(decision.reason)
    flight.finish(_OUTCOME_OF.get(decision.reason, Outcome.REJECTED), status=status)
    if decision.reason in RUN_ENDED_REASONS:  # retrying cannot help: the run is over
        hdrs = {**headers(flight), "x-should-retry": "false"}
        return JSONResponse(rejection_body(decision), status_code=status, headers=hdrs)
    hdrs = {**headers(flight), **retry_after_headers(decision.retry_after_s)}
    return JSONResponse(rejection_body(decision), status_code=status, headers=hdrs)


def run_ended(flight: Flight, reason: object) -> Response:
    """A call in flight cut because its agent run ended (cancelled, or its deadline)."""
    code = reason.value if isinstance(reason, Reason) else Reason.RUN_ENDED.value
    outcome = Outcome.EXPIRED if reason is Reason.RUN_DEADLINE_EXPIRED else Outcome.CANCELLED
    flight.finish(outcome, status=409, error=f"run {code}")
    body = error_body(f"the agent run ended: {code}", "run_ended", None, code)
    hdrs = {**headers(flight), "x-should-retry": "false"}
    return JSONResponse(body, status_code=409, headers=hdrs)


def exhausted(ctx: GatewayContext, runtime: Runtime, flight: Flight, failure: str) -> Response:
    """Every attempt hit a busy engine (429 overloaded), or a refused connection or a
    backend that went down or silent before answering (503 no healthy backend, retry
    after the next health probe)."""
    if failure == "busy":
        status, reason, retry_after = 429, "overloaded", busy_retry_after(ctx, flight)
        message = "every backend tried reported it is busy"
    else:
        status, reason = 503, "no_healthy_backend"
        retry_after = ctx.scheduler.retry_after(runtime.loaded.config.health.interval_s)
        message = (
            "could not connect to any backend"
            if failure == "connect"
            else "no backend answered in time"
        )
    flight.finish(Outcome.REJECTED, status=status, error=failure)
    hdrs = {**headers(flight), **retry_after_headers(retry_after)}
    hdrs["x-sluicegate-decision"], hdrs["x-sluicegate-reason"] = "reject", reason
    body = error_body(message, "overloaded", None, reason)
    return JSONResponse(body, status_code=status, headers=hdrs)


def busy_retry_after(ctx: GatewayContext, flight: Flight) -> float:
    """Seconds until the work ahead drains at the measured rate (else the time this
    request already spent), within the policy's Retry-After bounds and jitter."""
    stats = ctx.scheduler.stats()
    seconds = ctx.clock() - flight.record.arrival
    if stats.drain_tokens_per_s and flight.request is not None:
        own = flight.request.estimate.computed_total  # the rate counts computed tokens
        ahead = stats.queued_computed_tokens + stats.in_flight_computed_tokens + own
        seconds = ahead / stats.drain_tokens_per_s
    return ctx.scheduler.retry_after(seconds)


class UpstreamAnswer(Response):
    """A non-streamed backend answer relayed as is: ``Response`` with its raw headers built
    directly (the disclosure headers are lowercase ASCII already), the same bytes out."""

    def __init__(self, body: bytes, status_code: int, hdrs: dict[str, str], media_type: str):
        self.status_code = status_code
        self.background = None
        self.body = body
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in hdrs.items()]
        if not (status_code < 200 or status_code in (204, 304)):
            raw.append((b"content-length", b"%d" % len(body)))
        if media_type.startswith("text/") and "charset=" not in media_type.lower():
            media_type += "; charset=" + self.charset
        raw.append((b"content-type", media_type.encode("latin-1")))
        self.raw_headers = raw


def error_response(flight: Flight, status: int, message: str, type_: str) -> Response:
    return JSONResponse(error_body(message, type_), status_code=status, headers=headers(flight))
