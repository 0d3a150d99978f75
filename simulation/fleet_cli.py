"""``sluicegate simulate --replicas N``: fleet mode's fair share on a virtual clock, swept over
the fairness sync interval (``simulation/fleet.py``).

Example (the table in docs/fleet.md)::

    sluicegate simulate --replicas 3 --sync-intervals off,0.05,0.1,0.25,0.5,1,2,5 \\
        --redis-latency-ms 0.5,5 --duration 600 --seeds 1,2,3
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Callable

from emulator.profile import load_profile
from simulation.fleet import FleetResult, FleetSpec, simulate_fleet


def _floats(text: str) -> list[float | None]:
    return [None if x == "off" else float(x) for x in text.split(",") if x]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="N > 0: simulate N gateway replicas sharing state (fleet mode)",
    )
    p.add_argument(
        "--sync-intervals",
        type=_floats,
        default=[None, 0.1, 1.0],
        help="fleet mode: fairness sync intervals in s, 'off' for none",
    )
    p.add_argument(
        "--redis-latency-ms", type=_floats, default=[0.5], help="fleet mode: Redis round trip in ms"
    )
    p.add_argument(
        "--peer-sync-ms",
        type=_floats,
        default=[100.0],
        help="fleet mode: in-flight exchange intervals in ms",
    )
    p.add_argument(
        "--allowance", type=float, default=1000.0, help="fleet mode: fair_share_allowance_tokens"
    )


def main_fleet(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    profile = load_profile(args.profile)
    warmup = min(args.warmup, args.duration / 5)
    out(
        f"{args.replicas} replicas, {profile.name}: solo through replica 0, spread through "
        f"all; {args.duration:.0f} s simulated ({warmup:.0f} s warm-up), seeds {args.seeds}"
    )
    out(
        "peer ms | sync s | Redis ms | solo share (min..max) | fairness error | max gap "
        "tokens | tokens/s | rate x interval | held over max_num_seqs"
    )
    grid = itertools.product(args.peer_sync_ms, args.redis_latency_ms, args.sync_intervals)
    for peer, latency, interval in grid:
        runs = [
            simulate_fleet(
                FleetSpec(
                    profile,
                    replicas=args.replicas,
                    fair_share_s=interval,
                    redis_latency_s=(latency or 0.0) / 1000,
                    allowance=args.allowance,
                    peer_sync_s=(peer or 100.0) / 1000,
                    duration_s=args.duration,
                    warmup_s=warmup,
                    seed=seed,
                )
            )
            for seed in args.seeds
        ]
        out(f"{peer or 100:g} | " + _row(interval, latency, runs))
    return 0


def _row(interval: float | None, latency: float | None, runs: list[FleetResult]) -> str:
    shares = [r.solo_share for r in runs]
    rate = statistics.mean(r.tokens_per_s for r in runs)
    label = "off" if interval is None else f"{interval:g}"
    per_interval = "-" if interval is None else f"{rate * interval:.0f}"
    return (
        f"{label} | {latency or 0:g} | {statistics.mean(shares):.3f} ({min(shares):.3f}.."
        f"{max(shares):.3f}) | {max(r.fairness_error for r in runs):.1%} | "
        f"{max(r.max_gap for r in runs)} | {rate:.0f} | {per_interval} | "
        f"{statistics.mean(r.mean_over_seqs for r in runs):.2f}"
    )
