"""What the core says about one run when asked (``RunCoordinator.state``): values only;
the gateway renders them (``GET /v1/runs/{id}``). No prompt, no output."""

from __future__ import annotations

from dataclasses import dataclass

from policies.runs.run import Reservation, Run
from policies.types import Reason


@dataclass(frozen=True, slots=True)
class OpenRunState:
    """An open run: ``closing`` once its client said it is done (it ends with its last
    call). Seconds are relative to the moment of asking; tokens are estimated tokens."""

    run_id: str
    closing: bool
    age_s: float
    deadline_in_s: float | None
    reserved: Reservation
    drawn_tokens: int
    spent_tokens: int
    calls: int
    in_flight: int
    queued: int
    waiting_for_branch: int
    peak_parallel: int


@dataclass(frozen=True, slots=True)
class EndedRunState:
    """A run that ended recently: why a late call of it is refused."""

    run_id: str
    reason: Reason


RunState = OpenRunState | EndedRunState


def open_state(run: Run, now: float) -> OpenRunState:
    return OpenRunState(
        run.run_id,
        run.closing,
        now - run.started_at,
        None if run.deadline is None else run.deadline - now,
        run.reservation,
        run.drawn,
        run.spent,
        run.calls,
        len(run.in_flight),
        len(run.queued),
        len(run.held),
        run.peak,
    )
