"""The OpenAI error shape, and how a scheduler rejection maps to status, type and headers."""

from __future__ import annotations

import math
from typing import Any

from policies.types import Decision, Reason

_BODY_TYPE: dict[Reason, str] = {
    Reason.TENANT_QUOTA: "rate_limit_exceeded",
    Reason.TENANT_CONCURRENCY: "rate_limit_exceeded",
    Reason.RETRY_BUDGET_EXHAUSTED: "rate_limit_exceeded",
    Reason.DEADLINE_INFEASIBLE: "deadline_infeasible",
    Reason.DEADLINE_EXPIRED: "deadline_expired",
    Reason.RUN_CANCELLED: "run_ended",
    Reason.RUN_DEADLINE_EXPIRED: "run_ended",
    Reason.RUN_ENDED: "run_ended",
}
RUN_ENDED_REASONS = frozenset({Reason.RUN_CANCELLED, Reason.RUN_DEADLINE_EXPIRED, Reason.RUN_ENDED})
"""A call of an agent run that ended: 409, not to be retried (docs/runs.md)."""


class ApiError(Exception):
    """A client-visible error raised before any scheduling; nothing was taken."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        reason: str = "invalid_request",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.reason = reason

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(
    message: str, type_: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def rejection_status(reason: Reason) -> int:
    if reason in RUN_ENDED_REASONS:
        return 409
    return 503 if reason is Reason.NO_HEALTHY_BACKEND else 429


def rejection_type(reason: Reason) -> str:
    return _BODY_TYPE.get(reason, "overloaded")


def retry_after_headers(retry_after_s: float | None) -> dict[str, str]:
    """``Retry-After`` in whole seconds (ceil, RFC 9110) plus the exact ``retry-after-ms``."""
    seconds = max(0.0, retry_after_s if retry_after_s is not None else 1.0)
    return {
        "retry-after": str(max(1, math.ceil(seconds))),
        "retry-after-ms": str(max(1, math.ceil(seconds * 1000))),
    }


def rejection_body(decision: Decision) -> dict[str, Any]:
    message = f"request rejected: {decision.reason.value}"
    if decision.retry_after_s is not None:
        message += f"; retry after {decision.retry_after_s:.3f}s"
    return error_body(message, rejection_type(decision.reason), None, decision.reason.value)
