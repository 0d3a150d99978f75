"""Values the scheduler hands out: ``Ticket`` (a dispatched request) and ``SchedulerStats``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from policies.native.by_fields import ByFields
from policies.native.read_only import read_only
from policies.policy_set import PolicySet
from policies.types import (
    NO_DEGRADATION,
    Decision,
    DecisionKind,
    Degradation,
    FlowKey,
    Reason,
    RequestInfo,
)

TICKET_FIELDS = ("request_id", "backend", "decision", "dispatched_at", "request")
"""``Ticket``'s fields, in the order of its parameters."""


class Ticket(ByFields):
    """A dispatched request. ``request`` carries any degraded model/max_tokens already
    applied (see ``decision.degradation``); ``dispatched_at`` is clock seconds.

    Read-only, built once per dispatch: a plain class that mypyc builds natively (see
    ``policies/native/read_only.py``); equality, hashing and ``repr`` go by its fields, in order."""

    __slots__ = TICKET_FIELDS
    FIELDS = TICKET_FIELDS

    def __init__(
        self,
        request_id: str,
        backend: str,
        decision: Decision,
        dispatched_at: float,
        request: RequestInfo,
    ) -> None:
        self.request_id: Final = request_id
        self.backend: Final = backend
        self.decision: Final = decision
        self.dispatched_at: Final = dispatched_at
        self.request: Final = request

    def fields(self) -> tuple[object, ...]:
        """Every field's value, in the order of ``TICKET_FIELDS``."""
        return (self.request_id, self.backend, self.decision, self.dispatched_at, self.request)


read_only(Ticket)


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
    """Tokens the engines computed per second of busy time (output and uncached prompt)."""
    charged_tokens: int
    released_tokens: int
    queued_computed_tokens: int = 0
    """Of ``queued_tokens``, those the engines are expected to compute (the uncached
    prompt and the output): the work ``drain_tokens_per_s`` drains."""
    in_flight_computed_tokens: int = 0
    """The same of ``in_flight_tokens``."""


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
