"""The decision core as a regular install compiles it, against the same code interpreted,
side by side.

    python -m bench.compiled_core [--rounds 3] [--keep DIR] [-- decision_bench args]

Builds the wheel ``pip install .`` builds (``scripts/build_core.py``: mypyc compiles the
decision modules of ``policies/``, see setup.py; ~90 s of gcc on one core) from a copy of
this checkout, installs it into a scratch directory, then runs ``bench/decision_bench.py``
alternately on this checkout's sources (interpreted) and on the built package (compiled),
``--rounds`` times each. Each run reports which core it imported, and a run on the wrong one
stops the benchmark. Prints the CPU p50/p99 of each call and the compiled/interpreted ratio
of every round's pair. Run on a quiet machine; the pairs are the measurement, not the
absolutes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts.build_core import build

ROOT = Path(__file__).resolve().parents[1]
CALLS = ("submit (queued)", "poll (dispatch 1)", "release", "ref: fixed work")
_LINE = re.compile(r"^(?P<name>.+?)\s+wall .*\| cpu p50\s+(?P<p50>[\d.]+) p99\s+(?P<p99>[\d.]+)")
_CORE = re.compile(r"^decision core: (?P<core>\w+)", re.M)


def run_bench(path: Path, core: str, args: list[str]) -> dict[str, tuple[float, float]]:
    """decision_bench with ``path`` ahead of everything else on ``sys.path``; it must report
    the ``core`` expected there."""
    env = {**os.environ, "PYTHONPATH": str(path), "PYTHONSAFEPATH": "1"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "decision_bench.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = _CORE.search(out)
    if found is None or found["core"] != core:
        sys.exit(f"decision_bench ran on a core other than {core} (from {path}):\n{out}")
    rows: dict[str, tuple[float, float]] = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if m and m["name"].strip() in CALLS:
            rows[m["name"].strip()] = (float(m["p50"]), float(m["p99"]))
    missing = set(CALLS) - set(rows)
    if missing:
        sys.exit(f"decision_bench printed no {sorted(missing)} (from {path}):\n{out}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", type=Path, help="build here and keep it (default: a temp dir)")
    p.add_argument("bench_args", nargs="*", help="passed to decision_bench.py (after --)")
    args = p.parse_args(argv)
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="sluicegate-mypyc-"))
    try:
        site = build(scratch)
        pairs = []
        for r in range(args.rounds):  # alternate, so both see the same machine moments
            pure = run_bench(ROOT, "interpreted", args.bench_args)
            comp = run_bench(site, "compiled", args.bench_args)
            pairs.append((pure, comp))
            print(
                f"round {r + 1}: "
                + ", ".join(
                    f"{c.split()[0]} p50 {pure[c][0]:.1f}->{comp[c][0]:.1f} "
                    f"p99 {pure[c][1]:.1f}->{comp[c][1]:.1f}"
                    for c in CALLS
                ),
                flush=True,
            )
        print(
            f"\nCPU µs per call, medians of {args.rounds} rounds (interpreted -> compiled), "
            "and the median of each round's compiled/interpreted ratio:"
        )
        for c in CALLS:
            med = [statistics.median(pr[i][c][k] for pr in pairs) for i in (0, 1) for k in (0, 1)]
            r50 = statistics.median(pr[1][c][0] / pr[0][c][0] for pr in pairs)
            r99 = statistics.median(pr[1][c][1] / pr[0][c][1] for pr in pairs)
            print(
                f"  {c:<18} p50 {med[0]:6.1f} -> {med[2]:6.1f} ({r50:.2f})   "
                f"p99 {med[1]:6.1f} -> {med[3]:6.1f} ({r99:.2f})"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
