"""``sluicegate simulate-runs``: agent runs at multiples of the fleet's capacity, each
policy side by side on the very same runs (docs/runs.md, "The measured case").

Example::

    sluicegate simulate-runs --loads 1,1.5,2 \\
        --policies default,agent-swarm,seed000-best,agent-runs --out bench/runs/sim
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from emulator.profile import Profile, load_profile
from simulation.agent_runs import RUN_HINTS, RunWorkload, arrivals, capacity_runs_per_s
from simulation.csv_records import write_records
from simulation.flags import field_defaults, number_flag
from simulation.lengths import resolve_lengths
from simulation.policy_file import read_policy_file
from simulation.ports import VirtualClock
from simulation.run_core import CuttableBackend, RunSimulation
from simulation.run_metrics import RunRecord, RunSummary, summarise_run_records
from simulation.workload import BackoffPolicy

PRESET_DIRS = (Path(__file__).parents[1] / "presets", Path.cwd() / "presets")
"""Where shipped presets live: beside the package (a checkout), else in the working directory
(an installed package, such as the compiled core, run from a checkout)."""
MODEL = "sim-model"


@dataclass(frozen=True, slots=True)
class RunRow:
    """One (policy, load) of the measured case, seeds pooled."""

    source: str
    policy: str
    load: float
    rate_rps: float
    summary: RunSummary

    def flat(self) -> dict[str, Any]:
        """The row as one CSV record: its own fields, then the summary's."""
        own = {"source": self.source, "policy": self.policy, "load": self.load}
        return {**own, "rate_rps": self.rate_rps, **asdict(self.summary)}


def shipped_preset_names() -> list[str]:
    """Every shipped preset's name, from the first of ``PRESET_DIRS`` that holds any."""
    for d in PRESET_DIRS:
        names = sorted(p.stem for p in d.glob("*.yaml"))
        if names:
            return names
    return []


def resolve_policy(name: str) -> tuple[str, dict[str, Any]]:
    """``default`` (every default), a shipped preset's name, or a YAML file's path."""
    if name == "default":
        return name, {"name": "default"}
    shipped = [d / f"{name}.yaml" for d in PRESET_DIRS]
    path = next((p for p in shipped if p.exists()), Path(name))
    if not path.exists():
        raise ValueError(f"unknown policy {name!r}: not default, a preset, nor a file")
    return read_policy_file(path)


def simulate_runs(
    profile: Profile,
    workload: RunWorkload,
    policy: dict[str, Any],
    rate: float,
    duration_s: float,
    seed: int,
) -> list[RunRecord]:
    """One run of the case: Poisson runs at ``rate`` for ``duration_s``, all ended."""
    clock = VirtualClock()
    sim = RunSimulation(
        plans=arrivals(workload, rate, duration_s, seed),
        workload=workload,
        policy=policy,
        backend=CuttableBackend(profile, model=MODEL),
        clock=clock,
        seed=seed,
        model=MODEL,
    )
    return sim.run()


def measure(
    profile: Profile,
    workload: RunWorkload,
    policies: list[tuple[str, dict[str, Any]]],
    loads: list[float],
    *,
    duration_s: float,
    warmup_s: float,
    seeds: list[int],
    progress: Callable[[str], None] | None = None,
) -> list[RunRow]:
    """Every policy at every load (runs/s = load x capacity), seeds pooled per row."""
    capacity = capacity_runs_per_s(profile, workload)
    rows = []
    for load in loads:
        for label, policy in policies:
            records: list[RunRecord] = []
            for seed in seeds:
                shifted = simulate_runs(
                    profile, workload, policy, load * capacity, duration_s, seed
                )
                records += shifted
            window = (duration_s - warmup_s) * len(seeds)
            summary = summarise_run_records(records, warmup_s, duration_s)
            summary = _per_window(summary, window)
            rows.append(RunRow("simulate", label, load, load * capacity, summary))
            if progress is not None:
                progress(describe(rows[-1]))
    return rows


def _per_window(s: RunSummary, seconds: float) -> RunSummary:
    """Seeds pooled: completed runs over all the seeds' windows."""
    values = asdict(s)
    values["completed_rps"] = s.completed / seconds if seconds else 0.0
    return RunSummary(**values)


def describe(row: RunRow) -> str:
    s = row.summary
    return (
        f"{row.policy:<14} {row.load:4.2g}x  runs/s {s.completed_rps:.4f}  "
        f"latency p50 {s.p50_latency_s:5.1f}s p99 {s.p99_latency_s:5.1f}s  "
        f"wasted {s.wasted_tokens:8d} ({s.wasted_share:4.0%})  "
        f"first-call p99 {s.p99_first_call_wait_s:5.1f}s  never {s.never_started}"
    )


COLUMNS = [
    *(f.name for f in fields(RunRow) if f.name != "summary"),
    *(f.name for f in fields(RunSummary)),
]


def write_rows(rows: list[RunRow], path: Path) -> None:
    write_records(path, COLUMNS, (row.flat() for row in rows))


def format_rows(rows: list[RunRow]) -> str:
    head = (
        "| load | policy | runs/s | latency p50 s | latency p99 s | wasted tokens "
        "| wasted share | first-call wait p99 s | never started |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        s = r.summary
        lines.append(
            f"| {r.load:g}x | {r.policy} | {s.completed_rps:.4f} | {s.p50_latency_s:.1f} | "
            f"{s.p99_latency_s:.1f} | {s.wasted_tokens} | {s.wasted_share:.1%} | "
            f"{s.p99_first_call_wait_s:.1f} | {s.never_started} |"
        )
    return "\n".join(lines)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    """The run workload's flags, shared by ``simulate-runs`` and ``swarm-runs``; their
    defaults are ``RunWorkload``'s."""
    d = field_defaults(RunWorkload)
    p.add_argument("--profile", default="rx9070xt", help="emulator profile name or YAML path")
    p.add_argument(
        "--lengths",
        default="profile",
        help="call output lengths: profile, lognormal-S or a YAML file",
    )
    turns = f"{d['turns_min']}-{d['turns_max']}"
    p.add_argument("--turns", default=turns, help="tool turns after the plan call: MIN-MAX")
    fans_out = "probability that a turn fans out into parallel branches"
    number_flag(p, "--branch-prob", d["branch_prob"], fans_out)
    number_flag(p, "--branches", d["branches"], "parallel calls of a fanned turn")
    number_flag(p, "--think", d["think_mean_s"], "mean think/tool time (s), exp.")
    number_flag(p, "--deadline", d["deadline_s"], "run deadline (s) from arrival")
    dropped = (
        "a run not admitted this long after arrival is dropped by its "
        "client (s); 0: retry until the deadline"
    )
    number_flag(p, "--patience", d["patience_s"], dropped)
    number_flag(p, "--prompt-tokens", d["prompt_tokens"], "prefill per call (tokens)")
    sent = f"run hints sent: any of {','.join(RUN_HINTS)}"
    p.add_argument("--hints", default=",".join(d["hints"]), help=sent)
    number_flag(p, "--backoff-base", d["backoff"].base_s, "first backoff (s)")
    number_flag(p, "--backoff-cap", d["backoff"].cap_s, "longest backoff (s)")


def workload_of(args: argparse.Namespace, profile: Profile) -> RunWorkload:
    low, _, high = args.turns.partition("-")
    return RunWorkload(
        resolve_lengths(args.lengths, profile.output_lengths),
        turns_min=int(low),
        turns_max=int(high or low),
        branch_prob=args.branch_prob,
        branches=args.branches,
        think_mean_s=args.think,
        deadline_s=args.deadline,
        patience_s=args.patience or None,
        prompt_tokens=args.prompt_tokens,
        hints=tuple(h for h in args.hints.split(",") if h),
        backoff=BackoffPolicy(base_s=args.backoff_base, growth=2.0, cap_s=args.backoff_cap),
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate simulate-runs", description=__doc__.split("\n")[0])
    p.add_argument(
        "--loads",
        type=_floats,
        default=[1.0, 1.5, 2.0],
        help="arrival rates as multiples of the fleet's capacity",
    )
    p.add_argument(
        "--policies",
        default="default,agent-swarm,fair-share,seed000-best,agent-runs",
        help="comma-separated: default, preset names or YAML paths",
    )
    p.add_argument("--duration", type=float, default=1800.0, help="seconds of run arrivals")
    p.add_argument("--warmup", type=float, default=300.0, help="unmeasured seconds at the start")
    p.add_argument("--seeds", type=_ints, default=[1], help="seeds pooled per row")
    p.add_argument(
        "--out", type=Path, default=Path("bench/runs/sim"), help="output prefix: writes PREFIX.csv"
    )
    add_workload_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    profile = load_profile(args.profile)
    try:
        workload = workload_of(args, profile)
        policies = [resolve_policy(n) for n in args.policies.split(",") if n]
    except ValueError as exc:
        print(f"sluicegate simulate-runs: {exc}", file=sys.stderr)
        return 2
    capacity = capacity_runs_per_s(profile, workload)
    print(f"capacity {capacity:.4f} runs/s ({workload.mean_calls:.2f} calls per run)")
    rows = measure(
        profile,
        workload,
        policies,
        args.loads,
        duration_s=args.duration,
        warmup_s=args.warmup,
        seeds=args.seeds,
        progress=print,
    )
    write_rows(rows, args.out.with_suffix(".csv"))
    print(format_rows(rows))
    print(f"wrote {args.out.with_suffix('.csv')}")
    return 0
