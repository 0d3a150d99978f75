"""One cell under one policy, measured: the guard metrics of Must-haves 1 and 6.

- *goodput*: prompt + output tokens of the work completed, per second of window (a
  request whose first attempt fell in the window and finished; a run that arrived in the
  window and completed).
- *completed*: those requests (or runs) per second of window.
- *TTFT p99 per tenant*: from a request's (or a run's call's) first attempt to its first
  token, every refusal and wait included; a request its client gave up counts its time
  until then.
- *share per tenant*: its part of the tokens served in the window.
- *Retry-After accuracy*: of the first returns after a refusal that came back when the
  Retry-After said, the share admitted. *Probe*: how many of the 100 simultaneous
  requests were refused, and how many distinct Retry-After values they got.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emulator.profile import load_profile
from simulation.agent_runs import RunWorkload
from simulation.matrix.capacity import measure_capacity
from simulation.matrix.cells import Cell
from simulation.matrix.loop import CellRun, MatrixSimulation, Request, Return
from simulation.matrix.runs_pool import PooledRunSimulation
from simulation.matrix.traffic import Tenant
from simulation.matrix.workloads import WORKLOADS, Capacity
from simulation.metrics import percentile
from simulation.run_metrics import RunRecord


@dataclass(slots=True)
class Measured:
    """One (cell, policy): the guard metrics. ``tenants`` maps a tenant to (TTFT p99 s,
    tokens served per s)."""

    goodput_tps: float
    completed_per_s: float
    tenants: dict[str, tuple[float, float]] = field(default_factory=dict)
    ra_returns: int = 0
    ra_admitted: int = 0
    probe_refused: int = 0
    probe_distinct: int = 0


def capacity_of(cell: Cell) -> Capacity:
    return measure_capacity(
        WORKLOADS[cell.workload], load_profile(cell.profile), cell.backends, cell.duration_s
    )


def cell_tenants(cell: Cell, cap: Capacity, only: str | None = None) -> list[Tenant]:
    """The tenants of a request-level cell at its load; ``only``: that one alone."""
    workload = WORKLOADS[cell.workload]
    assert workload.tenants is not None, f"{cell.workload} is an agent-run workload"
    tenants = workload.tenants(load_profile(cell.profile), cell.load, cap)
    return tenants if only is None else [t for t in tenants if t.name == only]


def run_workload(cell: Cell) -> RunWorkload | None:
    """The runs of an agent-run cell; None for a request-level cell."""
    workload = WORKLOADS[cell.workload]
    return None if workload.runs is None else workload.runs(load_profile(cell.profile))


def run_rate(cell: Cell, cap: Capacity, runs: RunWorkload) -> float:
    """Runs per second at the cell's load."""
    return cell.load * cap.rate_per_s / runs.mean_calls


RUNS_MEASURED = 60
"""The runs a run cell's window holds at 1x load at the least."""


@dataclass(frozen=True, slots=True)
class RunTiming:
    """A run cell's timeline. Runs arrive from 0; those arriving in ``[start, end)`` are
    measured. The window starts one run deadline in (no run still live then arrived before
    the cell's load did) and the arrivals go on for one deadline past its end, so every
    measured run lives its whole life under the cell's load: arrivals that stopped while
    runs were still live would let the backlog drain and the last runs complete."""

    start: float
    end: float
    arrivals_until: float


def run_timing(cell: Cell, cap: Capacity, runs: RunWorkload) -> RunTiming:
    at_1x = cap.rate_per_s / runs.mean_calls
    span = max(cell.duration_s - cell.warmup_s, RUNS_MEASURED / at_1x)
    start = runs.deadline_s
    return RunTiming(start, start + span, start + span + runs.deadline_s)


def window(duration_s: float) -> tuple[float, float]:
    """The measured window of a run of ``duration_s`` of arrivals: the first quarter
    unmeasured."""
    return duration_s / 4, duration_s


def run_cell(
    cell: Cell,
    policy: dict[str, Any],
    cap: Capacity,
    *,
    only: str | None = None,
    seed: int = 1,
    duration_s: float | None = None,
) -> Measured:
    """``only``: run that tenant alone (its value alone in this cell's shape).
    ``duration_s``: arrivals for that long instead of the cell's profile's duration (an
    agent-run cell then measures the first three quarters' runs to their end, as a live
    run of that length does, instead of its ``run_timing``)."""
    if (runs := run_workload(cell)) is not None:
        return _run_runs(cell, runs, policy, cap, seed, duration_s)
    duration = duration_s if duration_s is not None else cell.duration_s
    sim = MatrixSimulation(
        tenants=cell_tenants(cell, cap, only),
        policy=policy,
        profile=load_profile(cell.profile),
        backends=cell.backends,
        duration_s=duration,
        seed=seed,
    )
    return measure_requests(sim.run(), *window(duration))


def measure_requests(out: CellRun, start: float, end: float) -> Measured:
    """The guard metrics of a request-level run whose records are clock seconds."""
    seconds = end - start
    inside = [r for r in out.requests if start <= r.first_submit < end]
    done = [r for r in inside if r.finished is not None]
    tokens = sum(r.prompt_tokens + r.output_tokens for r in done)
    m = Measured(tokens / seconds, len(done) / seconds)
    for name in sorted({r.tenant for r in out.requests}):
        mine = [r for r in inside if r.tenant == name]
        waits = [_ttft(r) for r in mine]
        served = sum(r.prompt_tokens + r.output_tokens for r in mine if r.finished is not None)
        m.tenants[name] = (percentile(waits, 99.0), served / seconds)
    _accuracy(m, out.returns, out.probe_retry_after, start, end)
    return m


def _ttft(r: Request) -> float:
    end = r.first_token if r.first_token is not None else r.gave_up_at
    assert end is not None, "every request ends: served or given up"
    return end - r.first_submit


def _accuracy(
    m: Measured, returns: list[Return], probe: list[float], start: float, end: float
) -> None:
    judged = [r for r in returns if r.on_time and r.admitted is not None and start <= r.at < end]
    m.ra_returns = len(judged)
    m.ra_admitted = sum(1 for r in judged if r.admitted)
    m.probe_refused, m.probe_distinct = len(probe), len(set(probe))


def _run_runs(
    cell: Cell,
    runs: RunWorkload,
    policy: dict[str, Any],
    cap: Capacity,
    seed: int,
    duration_s: float | None,
) -> Measured:
    if duration_s is None:
        timing = run_timing(cell, cap, runs)
        start, end, until = timing.start, timing.end, timing.arrivals_until
        measured: tuple[float, float] | None = (start, end)
    else:
        (start, end), until, measured = window(duration_s), duration_s, None
    sim = PooledRunSimulation(
        profile=load_profile(cell.profile),
        backends=cell.backends,
        workload=runs,
        policy=policy,
        rate=run_rate(cell, cap, runs),
        duration_s=until,
        seed=seed,
        measured=measured,
    )
    records = sim.run()
    m = measure_runs(records, sim.ttft, start, end)
    _accuracy(m, sim.returns, sim.probe_retry_after, start, end)
    return m


def measure_runs(
    records: list[RunRecord], ttft: list[tuple[float, float]], start: float, end: float
) -> Measured:
    """The guard metrics of agent runs: ``ttft`` holds each call's (first attempt, time
    to its first token from then), clock seconds."""
    seconds = end - start
    done = [r for r in records if start <= r.arrival < end and r.completed]
    served = sum(r.spent_tokens for r in records if start <= r.arrival < end)
    m = Measured(sum(r.spent_tokens for r in done) / seconds, len(done) / seconds)
    waits = [w for at, w in ttft if start <= at < end]
    m.tenants["agents"] = (percentile(waits, 99.0), served / seconds)
    return m
