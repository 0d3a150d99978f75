"""Values the scheduler hands out: ``Ticket`` (a dispatched request) and ``SchedulerStats``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.quick_init import quick_init
from policies.registry import PolicySet
from policies.types import (
    NO_DEGRADATION,
    Decision,
    DecisionKind,
    Degradation,
    FlowKey,
    Reason,
    RequestInfo,
)


@quick_init
@dataclass(frozen=True, slots=True)
class Ticket:
    """A dispatched request. ``request`` carries any degraded model/max_tokens already
    applied (see ``decision.degradation``); ``dispatched_at`` is clock seconds."""

    request_id: str
    backend: str
    decision: Decision
    dispatched_at: float
    request: RequestInfo


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """A point-in-time view for metrics. Tokens are estimated tokens; ages in seconds.

    ``charged_tokens``/``released_tokens`` are cumulative estimates taken at dispatch and
    given back at release: equal whenever nothing is in flight.
    """

    queued: int
    queued_tokens: int
    oldest_age_s: float | None
    in_flight: int
    in_flight_tokens: int
    in_flight_by_backend: Mapping[str, int]
    limits: Mapping[str, float | None]
    deficits: Mapping[str, float]
    saturation: float
    active_steps: tuple[str, ...]
    drain_tokens_per_s: float | None
    charged_tokens: int
    released_tokens: int


def make_decision(
    policy: PolicySet,
    req: RequestInfo,
    kind: DecisionKind,
    reason: Reason,
    *,
    retry_after_s: float | None = None,
    queue_position: int | None = None,
    degradation: Degradation | None = None,
    shadowed: tuple[str, ...] = (),
    backend: str | None = None,
    flow: FlowKey | None = None,
) -> Decision:
    """``flow``: ``req.flow`` when the caller already has it (it is built otherwise)."""
    estimate = req.estimate
    return Decision(  # by position, in field order (half the cost of keywords, once per call)
        kind,  # decision
        reason,
        req.request_id,
        req.tenant,
        req.flow if flow is None else flow,
        estimate,
        policy.name,
        policy.version,
        estimate.total if kind is not DecisionKind.REJECT else 0,  # reservation_tokens
        retry_after_s,
        queue_position,
        degradation or NO_DEGRADATION,
        backend,
        shadowed,
    )
