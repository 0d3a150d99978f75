"""An agent-run cell measures runs that live their whole life under the cell's load."""

from __future__ import annotations

from emulator.profile import load_profile
from simulation.matrix.cells import Cell
from simulation.matrix.measure import (
    capacity_of,
    measure_runs,
    run_rate,
    run_timing,
    run_workload,
)
from simulation.matrix.runs_pool import PooledRunSimulation

CELL = Cell("runs-short", "cpu-tiny", 2.0, 1)
CALL_LEVEL = {"name": "call-level", "runs": {"enabled": False}}
"""The default with call-level admission, where the window's timing was measured."""


def _simulate(cell: Cell, until: float, window: tuple[float, float]) -> PooledRunSimulation:
    cap = capacity_of(cell)
    runs = run_workload(cell)
    assert runs is not None
    sim = PooledRunSimulation(
        profile=load_profile(cell.profile),
        backends=cell.backends,
        workload=runs,
        policy=CALL_LEVEL,
        rate=run_rate(cell, cap, runs),
        duration_s=until,
        seed=1,
        measured=window,
    )
    sim.run()
    return sim


def test_the_load_is_on_a_deadline_before_the_window_and_after_every_measured_run() -> None:
    cap = capacity_of(CELL)
    runs = run_workload(CELL)
    assert runs is not None
    t = run_timing(CELL, cap, runs)
    sim = _simulate(CELL, t.arrivals_until, (t.start, t.end))
    plans = sim._plans
    measured = [r for r in sim.records if t.start <= r.arrival < t.end]
    assert len(measured) == sum(1 for p in plans if t.start <= p.arrival < t.end) > 0
    # no run live in the window arrived before the load had been on for a deadline ...
    assert t.start >= runs.deadline_s
    # ... and runs kept arriving until every measured run had ended
    assert all(r.ended is not None for r in measured)
    assert max(p.arrival for p in plans) >= max(r.ended for r in measured if r.ended)


def test_stopping_the_arrivals_at_the_window_end_would_let_the_last_runs_complete() -> None:
    """At 2x the steady state completes a fraction of the runs; arrivals that stop at the
    window's end let the backlog drain, and twice as many of the window's runs complete."""
    cap = capacity_of(CELL)
    runs = run_workload(CELL)
    assert runs is not None
    t = run_timing(CELL, cap, runs)

    def completed_fraction(until: float) -> float:
        sim = _simulate(CELL, until, (t.start, t.end))
        m = measure_runs(sim.records, sim.ttft, t.start, t.end)
        arrived = sum(1 for r in sim.records if t.start <= r.arrival < t.end)
        return m.completed_per_s * (t.end - t.start) / arrived

    steady, drained = completed_fraction(t.arrivals_until), completed_fraction(t.end)
    assert steady < 0.5 and drained > 2 * steady  # 0.10 and 0.50 of 119 runs
