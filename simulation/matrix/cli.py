"""``sluicegate evaluate``: the default policy and every shipped preset over the scenario
matrix (workload x engine profile x load x backends) in the simulator; writes a CSV, a
heat map and a summary (docs/evaluate.md).

Example::

    sluicegate evaluate --out bench/evaluate/matrix          # the whole matrix, 2 workers
    sluicegate evaluate --slice ci --out /tmp/slice          # the fixed slice CI runs
"""

from __future__ import annotations

import argparse
import sys
import time

from simulation.chart import INSTALL_HINT, chart_available
from simulation.flags import choice_flag
from simulation.matrix.cells import CI_SLICE, Cell, full_matrix
from simulation.matrix.evaluate import chosen_policies, evaluate
from simulation.matrix.report import draw, summary, write_csv
from simulation.output_flags import add_output_flags


def _names(text: str | None) -> set[str] | None:
    return None if text is None else {x for x in text.split(",") if x}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate evaluate", description=__doc__.split("\n")[0])
    choice_flag(p, "--slice", ("full", "ci"), "the whole matrix, or the fixed slice CI runs")
    p.add_argument("--workloads", default=None, help="comma-separated workload filter")
    p.add_argument("--profiles", default=None, help="comma-separated profile filter")
    p.add_argument("--loads", default=None, help="comma-separated load filter, e.g. 1,2")
    p.add_argument("--backends", default=None, help="comma-separated backends filter")
    p.add_argument(
        "--policies",
        default=None,
        help="comma-separated: shipped presets' names, or YAML files' paths to judge beside "
        "them as candidates (default kept)",
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    add_output_flags(p, "bench/evaluate/matrix", "PREFIX.csv, PREFIX.png, PREFIX.txt")
    return p


def _select(cells: list[Cell], args: argparse.Namespace) -> list[Cell]:
    w, p = _names(args.workloads), _names(args.profiles)
    loads = None if args.loads is None else {float(x) for x in args.loads.split(",")}
    backends = None if args.backends is None else {int(x) for x in args.backends.split(",")}
    return [
        c
        for c in cells
        if (w is None or c.workload in w)
        and (p is None or c.profile in p)
        and (loads is None or c.load in loads)
        and (backends is None or c.backends in backends)
    ]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cells = _select(list(CI_SLICE) if args.slice == "ci" else full_matrix(), args)
    try:
        policies = chosen_policies(_names(args.policies))
    except ValueError as e:
        print(f"sluicegate evaluate: {e}", file=sys.stderr)
        return 2
    if not cells:
        print("sluicegate evaluate: no cell matches", file=sys.stderr)
        return 2
    if not args.no_chart and not chart_available():
        print(
            f"sluicegate evaluate: no heat map without matplotlib: {INSTALL_HINT}, or pass "
            "--no-chart",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    print(f"{len(cells)} cells x {len(policies)} policies on {args.workers} workers", flush=True)

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {message}", flush=True)

    rows = evaluate(cells, policies, workers=args.workers, progress=say)
    write_csv(rows, args.out.with_suffix(".csv"))
    lines = summary(rows)
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"wrote {args.out.with_suffix('.csv')}")
    if not args.no_chart:
        draw(rows, args.out.with_suffix(".png"))
        print(f"wrote {args.out.with_suffix('.png')}")
    return 0
