"""The error of learned run reservations in the agent-run case (docs/runs.md).

Runs the simulator's agent runs (``sluicegate simulate-runs``'s workload flags) under the
``agent-runs`` preset at 1x and 2x the capacity and prints the run book's
``reservation_error``: the mean over the last completed runs of ``|reserved - used| / used``,
the figure ``sluicegate_run_reservation_error`` exports. With ``--hints deadline`` the
clients send no calls/tokens hints, so every reservation after a flow's first runs is learnt.

    python bench/runs_reservation_error.py --hints deadline --duration 900 --seeds 1,2
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulator.profile import load_profile
from simulation import run_cli
from simulation.agent_runs import arrivals, capacity_runs_per_s
from simulation.ports import VirtualClock
from simulation.run_core import CuttableBackend, RunSimulation


def main(argv: list[str]) -> int:
    args = run_cli.parser().parse_args(argv)
    profile = load_profile(args.profile)
    workload = run_cli.workload_of(args, profile)
    _, policy = run_cli.resolve_policy("agent-runs")
    capacity = capacity_runs_per_s(profile, workload)
    for load in (1.0, 2.0):
        for seed in args.seeds:
            plans = arrivals(workload, load * capacity, args.duration, seed)
            sim = RunSimulation(
                plans=plans,
                workload=workload,
                policy=policy,
                backend=CuttableBackend(profile, model=run_cli.MODEL),
                clock=VirtualClock(),
                seed=seed,
                model=run_cli.MODEL,
            )
            sim.run()
            error = sim.scheduler.runs.stats().reservation_error
            print(f"hints {args.hints}; load {load}x; seed {seed}: reservation error {error}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
