"""Values that cross the boundary between the gateway shell and the decision core.

All of them are frozen: a decision, once made, is a fact to be recorded, not state.
Enum values double as low-cardinality Prometheus label values.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from policies.native.by_fields import ByFields
from policies.native.quick_init import quick_init
from policies.native.read_only import read_only

Clock = Callable[[], float]
"""Monotonic seconds. The gateway passes ``time.monotonic``; the simulator a virtual clock."""


class DecisionKind(str, enum.Enum):  # noqa: UP042
    ADMIT = "admit"
    DELAY = "delay"
    DEGRADE = "degrade"
    REJECT = "reject"


class Reason(str, enum.Enum):  # noqa: UP042
    """Why a decision was made. Small and closed on purpose: it is a metric label."""

    CAPACITY_AVAILABLE = "capacity_available"
    QUEUED_FOR_CAPACITY = "queued_for_capacity"
    DEGRADED_UNDER_LOAD = "degraded_under_load"
    QUEUE_FULL = "queue_full"
    OVERLOADED = "overloaded"
    DEADLINE_INFEASIBLE = "deadline_infeasible"
    DEADLINE_EXPIRED = "deadline_expired"
    TENANT_QUOTA = "tenant_quota_exceeded"
    TENANT_CONCURRENCY = "tenant_concurrency_exceeded"
    RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"
    CLASS_SHED = "class_shed"
    NO_HEALTHY_BACKEND = "no_healthy_backend"
    RUN_RESERVATIONS_FULL = "run_reservations_full"
    """A new agent run: the fleet cannot drain the work already promised to runs in time."""
    RUN_CANCELLED = "run_cancelled"
    RUN_DEADLINE_EXPIRED = "run_deadline_expired"
    RUN_ENDED = "run_ended"
    """A call of an agent run that has already ended (completed, or abandoned)."""


class Outcome(str, enum.Enum):  # noqa: UP042
    """The one terminal outcome every request ends in."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    FAILED = "failed"


@quick_init
@dataclass(frozen=True, slots=True)
class FlowKey:
    """tenant + workload class + model + deadline bucket (see ``deadline_bucket``)."""

    tenant: str
    workload_class: str
    model: str
    deadline_bucket: str

    def __str__(self) -> str:
        return self.named(self.tenant)

    def named(self, tenant: str) -> str:
        """The key as text with ``tenant`` in its tenant's place (e.g. its metric label)."""
        return f"{tenant}/{self.workload_class}/{self.model}/{self.deadline_bucket}"


def deadline_bucket(deadline_s: float | None) -> str:
    """Coarse, bounded bucket of a relative deadline, so flow keys stay low-cardinality."""
    if deadline_s is None:
        return "none"
    for limit, name in ((1.0, "le1s"), (10.0, "le10s"), (60.0, "le60s"), (600.0, "le10m")):
        if deadline_s <= limit:
            return name
    return "gt10m"


@quick_init
@dataclass(frozen=True, slots=True)
class WorkEstimate:
    """Token cost estimated before any backend work. ``total`` is what fair share charges.

    A request may fan out (``n``, ``best_of``, a list of prompts): ``prompt_tokens`` sums its
    prompts, ``output_tokens`` sums the ``sequences`` it generates."""

    prompt_tokens: int
    output_tokens: int
    sequences: int = 1
    cached_prompt_tokens: int = 0
    """Of ``prompt_tokens``, those the backend's prefix cache is expected to serve (the
    longest prefix the gateway sent there, else its measured hit rate:
    ``policies/cache_estimate.py``); 0 when unknown."""

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def computed_total(self) -> int:
        """What the engine is expected to compute: uncached prompt tokens and the output."""
        return self.prompt_tokens - self.cached_prompt_tokens + self.output_tokens


@quick_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Actual token usage reported by the backend at completion (may be partial)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None
    """Prompt tokens the prefix cache served, where the engine reports them (vLLM's
    ``usage.prompt_tokens_details.cached_tokens``, with ``--enable-prompt-tokens-details``)."""

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@quick_init
@dataclass(frozen=True, slots=True)
class Ending:
    """How a dispatched request ended, as its release tells the scheduler: the ``outcome``,
    the ``usage`` the backend reported (None: none), and its times measured from dispatch in
    clock seconds: ``ttft_s`` to the first token, ``latency_s`` to the end (None: not timed)."""

    outcome: Outcome
    usage: Usage | None = None
    ttft_s: float | None = None
    latency_s: float | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class RunHints:
    """The agent run a call belongs to, and what its client says of the run (docs/runs.md).

    ``run_id`` is the client's, scoped by tenant. ``deadline`` is absolute clock seconds,
    fixed by the run's first call; ``calls``/``tokens`` the run's expected totals and
    ``branches`` its most parallel calls; None: not said (learned per flow instead)."""

    run_id: str
    deadline: float | None = None
    calls: int | None = None
    tokens: int | None = None
    branches: int | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class PromptBlocks:
    """A prompt as chained block hashes, never its text: what the scheduler's model of each
    backend's prefix cache (``policies/engine/prefix_model.py``) matches and records.

    ``hashes[i]`` names the prompt's whole prefix up to the end of block ``i`` (each hash is
    chained to the one before), so two prompts share hashes exactly as far as they share
    their beginning; a partial last block has none. ``tokens_per_block`` is the estimate's
    prompt tokens per block (the gateway hashes fixed character chunks and divides by the
    measured characters per token; the simulator hashes the engine's own token blocks)."""

    hashes: tuple[int, ...]
    tokens_per_block: float


@quick_init
@dataclass(frozen=True, slots=True)
class RequestInfo:
    """Everything the decision core may know about a request. Never the prompt itself.

    Times are clock seconds (see ``Clock``); ``deadline`` is absolute, or None.
    """

    request_id: str
    tenant: str
    workload_class: str
    model: str
    estimate: WorkEstimate
    arrival: float
    deadline: float | None = None
    priority: int = 0
    weight: float = 1.0
    max_tokens: int | None = None
    is_retry: bool = False
    session_id: str | None = None
    prompt_hash: str = ""
    stream: bool = False
    """The response is streamed: the gateway sees its first token come back."""
    run: RunHints | None = None
    """The agent run this call belongs to (``X-Agent-Run-Id``), or None."""
    blocks: PromptBlocks | None = None
    """The prompt's chained block hashes (None: not hashed; the hit rate estimates instead)."""

    @property
    def flow(self) -> FlowKey:
        return FlowKey(*self.flow_fields())

    def flow_fields(self) -> tuple[str, str, str, str]:
        """``flow``'s fields: tenant, workload class, model, deadline bucket."""
        deadline = self.deadline
        bucket = "none" if deadline is None else deadline_bucket(deadline - self.arrival)
        return (self.tenant, self.workload_class, self.model, bucket)


@quick_init
@dataclass(frozen=True, slots=True)
class Degradation:
    """What a degrade decision changed. ``steps`` names the ladder steps applied."""

    steps: tuple[str, ...] = ()
    max_tokens: int | None = None
    model: str | None = None


NO_DEGRADATION = Degradation()
"""The degradation of a request nothing changed (shared: it is frozen)."""


DECISION_FIELDS = (
    "decision",
    "reason",
    "request_id",
    "tenant",
    "flow",
    "estimate",
    "policy",
    "policy_version",
    "reservation_tokens",
    "retry_after_s",
    "queue_position",
    "degradation",
    "backend",
    "shadowed",
)
"""``Decision``'s fields, in the order of its parameters."""


class Decision(ByFields):
    """The decision object: one per request, read-only, recorded and exposed in headers.

    A plain class rather than a frozen dataclass, so that mypyc builds it natively (see
    ``policies/native/read_only.py``); equality, hashing and ``repr`` go by its fields, in order.
    """

    __slots__ = DECISION_FIELDS
    FIELDS = DECISION_FIELDS

    def __init__(
        self,
        decision: DecisionKind,
        reason: Reason,
        request_id: str,
        tenant: str,
        flow: FlowKey,
        estimate: WorkEstimate,
        policy: str,
        policy_version: str,
        reservation_tokens: int = 0,
        retry_after_s: float | None = None,
        queue_position: int | None = None,
        degradation: Degradation = NO_DEGRADATION,
        backend: str | None = None,
        shadowed: tuple[str, ...] = (),
    ) -> None:
        self.decision: Final = decision
        self.reason: Final = reason
        self.request_id: Final = request_id
        self.tenant: Final = tenant
        self.flow: Final = flow
        self.estimate: Final = estimate
        self.policy: Final = policy
        self.policy_version: Final = policy_version
        self.reservation_tokens: Final = reservation_tokens
        self.retry_after_s: Final = retry_after_s
        self.queue_position: Final = queue_position
        self.degradation: Final = degradation
        self.backend: Final = backend
        self.shadowed: Final = shadowed
        """Gates in shadow mode that would have blocked this request."""

    def fields(self) -> tuple[object, ...]:
        """Every field's value, in the order of ``DECISION_FIELDS``."""
        return (
            self.decision,
            self.reason,
            self.request_id,
            self.tenant,
            self.flow,
            self.estimate,
            self.policy,
            self.policy_version,
            self.reservation_tokens,
            self.retry_after_s,
            self.queue_position,
            self.degradation,
            self.backend,
            self.shadowed,
        )

    @property
    def admitted(self) -> bool:
        return self.decision in (DecisionKind.ADMIT, DecisionKind.DEGRADE)


read_only(Decision)
