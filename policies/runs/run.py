"""One agent run's state as the run book keeps it, and the values it hands out."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from policies.runs.learn import RunFlow
from policies.types import Outcome, Reason


class RunEnd(str, enum.Enum):  # noqa: UP042
    """How a run ended. A metric label: small and closed."""

    COMPLETED = "completed"
    ABANDONED = "abandoned"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Reservation:
    """What a run reserves at its admission: tokens and calls, and its fan-out ceiling
    (None: none). ``source`` says where the numbers came from: hints, learned, default."""

    tokens: int
    calls: int
    branches: int | None
    source: str


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run that ended. ``cut`` holds the request ids of its calls still in flight, which
    the gateway cuts upstream (none for a completed run); ``spent_tokens`` is what its
    released calls used so far (the wasted work when it did not complete)."""

    tenant: str
    run_id: str
    end: RunEnd
    reason: Reason
    started_at: float
    ended_at: float
    calls: int
    spent_tokens: int
    reserved_tokens: int
    cut: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunStats:
    """Counts for metrics: cumulative ``started``/``ended``/``wasted_tokens`` per tenant
    (``ended`` by tenant and ``RunEnd`` value), and what is open now: runs, their
    reserved tokens not yet drawn, calls waiting for a branch; ``reservation_error`` is
    the learner's mean relative error of token reservations (None before any)."""

    started: dict[str, int]
    ended: dict[tuple[str, str], int]
    wasted_tokens: dict[str, int]
    open_runs: int
    promised_tokens: int
    held_calls: int
    reservation_error: float | None


class Run:
    """An open run: its reservation, what it drew, and its calls by where they are."""

    __slots__ = (
        "branches",
        "calls",
        "closing",
        "computed",
        "deadline",
        "drawn",
        "ended",
        "flow",
        "held",
        "in_flight",
        "last_active",
        "last_outcome",
        "opening",
        "peak",
        "queued",
        "reservation",
        "run_id",
        "spent",
        "started_at",
        "tenant",
        "turned_away",
    )

    def __init__(
        self,
        tenant: str,
        run_id: str,
        flow: RunFlow,
        started_at: float,
        deadline: float | None,
        reservation: Reservation,
        opening: str,
    ) -> None:
        self.tenant = tenant
        self.run_id = run_id
        self.flow = flow
        self.started_at = started_at
        self.deadline = deadline
        self.reservation = reservation
        self.branches = reservation.branches
        self.opening = opening
        """The request id of the call that opened the run (it has no precedence)."""
        self.drawn = 0
        """Estimated computed tokens (``WorkEstimate.computed_total``: the uncached prompt and
        the output) of its dispatched calls, corrected with what they computed at release."""
        self.calls = 0
        self.spent = 0
        """Tokens its released calls used (their usage; the estimate when none came back)."""
        self.computed = 0
        """Of those, the tokens the engine computed (``computed_usage``): what its flow's
        later runs learn to reserve."""
        self.peak = 0
        self.in_flight: set[str] = set()
        self.queued: set[str] = set()
        self.held: deque[str] = deque()
        self.last_active = started_at
        self.last_outcome: Outcome | None = None
        self.closing = False
        self.turned_away = False
        """A call of it was refused, or left the gateway queue unserved, since its last
        dispatch: the gateway shed it, and an idle end is then final (``RunBook.reopen``)."""
        self.ended: RunEnd | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.run_id)

    @property
    def occupied(self) -> int:
        """Calls that count against the fan-out ceiling: in flight or in the gateway queue."""
        return len(self.in_flight) + len(self.queued)

    @property
    def pending(self) -> bool:
        return bool(self.in_flight or self.queued or self.held)

    @property
    def outstanding(self) -> int:
        """Reserved tokens not yet drawn."""
        return max(0, self.reservation.tokens - self.drawn)

    def room(self) -> bool:
        """Whether one more call may go to the gateway queue or a backend now."""
        return self.branches is None or self.occupied < self.branches

    def within(self, tokens: int) -> bool:
        """Whether a call of ``tokens`` estimated tokens fits what is left reserved."""
        res = self.reservation
        return self.calls < res.calls and self.drawn + tokens <= res.tokens
