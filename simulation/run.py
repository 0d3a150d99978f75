"""One simulated run and a sweep over N and policies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from emulator.profile import Profile
from simulation.admission_adapter import SchedulerAdmission
from simulation.core import Simulation
from simulation.engine_adapter import EmulatedBackend
from simulation.metrics import Summary, TurnRecord, Window, summarise, summarise_runs
from simulation.ports import VirtualClock
from simulation.results import Row
from simulation.workload import AgentWorkload, BackoffPolicy

MODEL = "sim-model"


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: ``duration_s`` of arrivals, of which the first ``warmup_s`` are not measured."""

    profile: Profile
    workload: AgentWorkload
    policy: dict[str, Any]
    n_agents: int
    duration_s: float
    warmup_s: float
    seed: int
    max_tokens_hint: bool = False
    """Turns carry max_tokens = their length, as the live swarm sends them (see
    ``SchedulerAdmission``)."""


@dataclass(frozen=True, slots=True)
class RunOutput:
    records: list[TurnRecord]
    summary: Summary
    admission: SchedulerAdmission
    backend: EmulatedBackend


def simulate(spec: RunSpec) -> RunOutput:
    clock = VirtualClock()
    backend = EmulatedBackend(spec.profile, model=MODEL)
    admission = SchedulerAdmission(
        spec.policy,
        clock=clock,
        model=MODEL,
        estimated_output_tokens=round(spec.workload.lengths.mean),
        seed=spec.seed,
        max_tokens_hint=spec.max_tokens_hint,
    )
    sim = Simulation(
        n_agents=spec.n_agents,
        workload=spec.workload,
        admission=admission,
        engine=backend,
        clock=clock,
        duration_s=spec.duration_s,
        seed=spec.seed,
    )
    records = sim.run()
    return RunOutput(
        records, summarise(records, spec.warmup_s, spec.duration_s), admission, backend
    )


Candidate = tuple[str, dict[str, Any], BackoffPolicy | None]
"""(label, ``policy:`` mapping, agent backoff or None for the base workload's)."""


def sweep(
    base: RunSpec,
    candidates: list[Candidate],
    agents: list[int],
    seeds: list[int],
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Every candidate at every N; seeds are pooled into one row per (candidate, N)."""
    rows = []
    for label, policy, backoff in candidates:
        workload = base.workload if backoff is None else replace(base.workload, backoff=backoff)
        for n in agents:
            windows: list[Window] = []
            for seed in seeds:
                spec = replace(base, workload=workload, policy=policy, n_agents=n, seed=seed)
                windows.append((simulate(spec).records, base.warmup_s, base.duration_s))
            row = Row.of("simulate", label, n, seeds[0], summarise_runs(windows))
            rows.append(row)
            if progress is not None:
                progress(describe(row))
    return rows


def describe(row: Row) -> str:
    return (
        f"{row.policy:<16} N={row.n_agents:<3} goodput {row.goodput_tps:.3f}/s  "
        f"p99 wait {row.p99_queue_wait_s:5.1f}s  deferred {row.deferral_share:4.0%}  "
        f"felt p99 {row.p99_felt_wait_s:6.1f}s"
    )
