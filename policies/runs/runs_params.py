"""Parameters of the run book (``policy.runs``), apart from it for mypyc (see
``policies/params.py``). On by default: a call without run headers meets none of it;
``enabled: false`` makes run headers change nothing."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from policies.params import Params


class RunsParams(Params):
    enabled: bool = True
    """Admit agent runs: reservations, precedence of started runs, fan-out ceilings."""
    precedence: Literal["always", "behind_pace"] = "behind_pace"
    """When a started run's calls go ahead of their tenant's other queued calls.
    ``behind_pace``: while the tenant's started runs, together, are behind the pace their
    deadlines ask (they have drawn less of their reserved tokens than the share of their
    time to the deadline that is gone, summed over the runs), and always while one of them
    has no deadline. ``always``: whenever one is queued (a new run's first call then takes
    all the queueing, and near the engines' capacity waits out its queue bound)."""
    idle_timeout_s: float = Field(default=60.0, gt=0)
    """A run with nothing queued or in flight for this long has ended."""
    promise_horizon_s: float | None = Field(default=None, gt=0)
    """A new run is admitted only if the work promised to admitted runs, its own included,
    drains within this many seconds at the measured drain rate (or before the run's
    deadline, if sooner); else its first call is refused with Retry-After. None: no such
    check (runs still get precedence and ceilings)."""
    promise_rate: Literal["busy", "saturated"] = "busy"
    """The drain rate the promise divides by. ``busy``: tokens completed per second while
    anything is in flight; below saturation that is the demand, not the capacity, and by
    Little's law promised / rate stays near a run's remaining time at any load, so a
    horizon short enough to bind under overload also refuses runs on a quiet fleet.
    ``saturated``: tokens completed per second while the gateway queue is not empty (the
    fleet is full), i.e. its capacity; before any such time has been measured in the
    window, the promise refuses nothing."""
    default_calls: int = Field(default=4, ge=1)
    """Calls reserved for a run without hints whose flow has no completed run yet; the
    reservation is this many times its first call's estimated tokens."""
    default_branches: int | None = Field(default=None, ge=1)
    """Fan-out ceiling of a run without ``X-Agent-Run-Branches``; None: no ceiling."""
    learned_ceiling: bool = False
    """Without a branches hint, cap a run's parallel calls at its flow's learned fan-out
    (the quantile below) instead of ``default_branches``."""
    learned_quantile: float = Field(default=0.9, gt=0, le=1)
    """Quantile of completed runs' calls, tokens and fan-out that a run of the flow reserves."""
    learned_runs: int = Field(default=64, ge=1)
    """Completed runs kept per flow for that quantile (the newest)."""
    max_runs: int = Field(default=100_000, ge=1)
    """Open runs at most; a new run beyond them is refused (run_reservations_full)."""
    ended_kept: int = Field(default=10_000, ge=1)
    """Ended run ids remembered (newest first), so a late call of one is refused."""
