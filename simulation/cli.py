"""``sluicegate simulate``: the reference sweep (docs/seed-table.md) on a virtual clock,
same scheduler, same engine.

Example (the seed table)::

    sluicegate simulate --agents 8,12,16,20,24 --policies unbounded,fixed-cap-12,codel-8s \\
        --duration 3600 --seeds 1,2 --out bench/seed000/sim
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emulator.profile import Profile, load_profile
from simulation.catalog import FRONTIER, resolve
from simulation.chart import ChartUnavailable, draw, draw_frontier
from simulation.engine_adapter import knee_agents
from simulation.fleet_cli import add_arguments, main_fleet
from simulation.output_flags import add_output_flags
from simulation.results import Row, format_table, write_csv
from simulation.run import Candidate, RunSpec, sweep
from simulation.workload import AgentWorkload
from simulation.workload_flags import add_agent_workload_flags, agent_workload_of


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate simulate", description=__doc__.split("\n")[0])
    add_agent_workload_flags(p)
    p.add_argument(
        "--policies", default=None, help="comma-separated catalogue names or preset YAML paths"
    )
    p.add_argument("--agents", type=_ints, default=None, help="N values (default 8,...,24)")
    p.add_argument("--duration", type=float, default=3600.0, help="simulated seconds per run")
    p.add_argument("--warmup", type=float, default=300.0, help="unmeasured seconds at the start")
    p.add_argument("--seeds", type=_ints, default=[1], help="seeds pooled per row, e.g. 1,2,3")
    add_output_flags(p, "bench/seed000/sim", "writes PREFIX.csv and PREFIX.png")
    p.add_argument(
        "--max-tokens-hint",
        action="store_true",
        help="turns carry max_tokens = their length, as swarm sends them",
    )
    p.add_argument(
        "--frontier",
        action="store_true",
        help="run the beyond-the-seed candidates (each with its agent behaviour); "
        "--policies then filters them by name, --agents defaults to 24",
    )
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.replicas > 0:
        return main_fleet(args)
    profile = load_profile(args.profile)
    try:
        workload = agent_workload_of(args, profile)
        candidates = _candidates(args.policies, args.frontier)
    except ValueError as exc:
        print(f"sluicegate simulate: {exc}", file=sys.stderr)
        return 2
    agents = args.agents or ([24] if args.frontier else [8, 12, 16, 20, 24])
    base = RunSpec(
        profile,
        workload,
        {},
        0,
        args.duration,
        args.warmup,
        args.seeds[0],
        max_tokens_hint=args.max_tokens_hint,
    )
    rows = sweep(base, candidates, agents, args.seeds, progress=print)
    write_csv(rows, args.out.with_suffix(".csv"))
    print(format_table(rows))
    print(f"wrote {args.out.with_suffix('.csv')}")
    if not args.no_chart:
        try:
            _chart(rows, args.out.with_suffix(".png"), profile, workload, args.frontier)
            print(f"wrote {args.out.with_suffix('.png')}")
        except ChartUnavailable as exc:
            print(f"no chart: {exc}", file=sys.stderr)
    return 0


def _candidates(names: str | None, frontier: bool) -> list[Candidate]:
    if frontier:
        chosen = list(FRONTIER) if names is None else names.split(",")
        unknown = [n for n in chosen if n not in FRONTIER]
        if unknown:
            raise ValueError(f"unknown candidates {unknown}; known: {', '.join(FRONTIER)}")
        return [(n, *FRONTIER[n]) for n in chosen]
    chosen = (names or "unbounded,fixed-cap-12,codel-8s").split(",")
    return [(*resolve(n), None) for n in chosen if n]


def _chart(
    rows: list[Row], path: Path, profile: Profile, workload: AgentWorkload, frontier: bool
) -> None:
    if frontier:
        draw_frontier(
            rows,
            path,
            title=f"N={rows[0].n_agents} agents on {profile.name}: "
            "queue wait vs agent-felt wait (simulated)",
        )
        return
    knee = knee_agents(profile, workload.think_mean_s)
    title = f"p99 queue wait vs agents, {profile.name} (simulated; dotted: goodput)"
    draw(rows, path, knee_n=knee, title=title)
