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
from simulation.lengths import resolve_lengths
from simulation.results import Row, format_table, write_csv
from simulation.run import Candidate, RunSpec, sweep
from simulation.workload import AgentWorkload, BackoffPolicy


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate simulate", description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="rx9070xt", help="emulator profile name or YAML path")
    p.add_argument(
        "--policies", default=None, help="comma-separated catalogue names or preset YAML paths"
    )
    p.add_argument("--agents", type=_ints, default=None, help="N values (default 8,...,24)")
    p.add_argument("--duration", type=float, default=3600.0, help="simulated seconds per run")
    p.add_argument("--warmup", type=float, default=300.0, help="unmeasured seconds at the start")
    p.add_argument("--seeds", type=_ints, default=[1], help="seeds pooled per row, e.g. 1,2,3")
    p.add_argument(
        "--lengths",
        default="profile",
        help="turn lengths: profile, lognormal-S (profile's mean, shape S) or a "
        "YAML file with components (see simulation/lengths.py)",
    )
    p.add_argument("--think", type=float, default=4.5, help="mean think time (s), exponential")
    p.add_argument("--prompt-tokens", type=int, default=64, help="prefill per turn (tokens)")
    p.add_argument("--backoff-base", type=float, default=6.0, help="first backoff (s)")
    p.add_argument("--backoff-growth", type=float, default=2.0, help="backoff factor per deferral")
    p.add_argument("--backoff-cap", type=float, default=120.0, help="longest backoff (s)")
    p.add_argument("--backoff-jitter", type=float, default=0.0, help="jitter fraction in [0,1]")
    p.add_argument(
        "--ignore-retry-after",
        action="store_true",
        help="agents back off by their own schedule only",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench/seed000/sim"),
        help="output prefix: writes PREFIX.csv and PREFIX.png",
    )
    p.add_argument("--no-chart", action="store_true")
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
    backoff = BackoffPolicy(
        base_s=args.backoff_base,
        growth=args.backoff_growth,
        cap_s=args.backoff_cap,
        jitter=args.backoff_jitter,
        honour_retry_after=not args.ignore_retry_after,
    )
    try:
        lengths = resolve_lengths(args.lengths, profile.output_lengths)
        candidates = _candidates(args.policies, args.frontier)
    except ValueError as exc:
        print(f"sluicegate simulate: {exc}", file=sys.stderr)
        return 2
    workload = AgentWorkload(lengths, args.think, args.prompt_tokens, backoff=backoff)
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
