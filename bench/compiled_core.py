"""The decision core compiled with mypyc against the same code interpreted, side by side.

    python -m bench.compiled_core [--rounds 3] [--keep DIR] [-- decision_bench args]

An experiment, not a build mode: nothing that is installed or tested is compiled. It copies
``policies/``, ``gateway/`` and ``bench/`` into a scratch directory, compiles the decision
modules there with mypyc (``mypy`` from the test extras brings it; ~80 s of gcc on one
core), checks the scheduler really is the compiled one, then runs ``bench/decision_bench.py``
alternately in the source tree (interpreted) and in the copy (compiled), ``--rounds`` times
each, and prints the CPU p50/p99 of each call and the compiled/interpreted ratio of every
round's pair. Run on a quiet machine; the pairs are the measurement, not the absolutes.

Not compiled: ``params.py`` (pydantic inspects validator functions, which a compiled
module does not have as Python functions), ``registry.py`` (config parsing, pydantic),
``builtins.py`` (registration at import), ``quick_init.py`` (it builds ``__init__``s with
``exec``; the classes it decorates stay interpreted classes inside compiled modules, because
mypyc compiles a class with an unknown decorator as a plain Python class).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_COMPILED = {"__init__.py", "params.py", "registry.py", "builtins.py", "quick_init.py"}
CALLS = ("submit (queued)", "poll (dispatch 1)", "release", "ref: fixed work")
_LINE = re.compile(r"^(?P<name>.+?)\s+wall .*\| cpu p50\s+(?P<p50>[\d.]+) p99\s+(?P<p99>[\d.]+)")


def compiled_modules(policies: Path) -> list[str]:
    return sorted(f"policies/{p.name}" for p in policies.glob("*.py") if p.name not in NOT_COMPILED)


def build(scratch: Path) -> None:
    """A fresh copy of the sources in ``scratch`` (an earlier copy and build there are
    replaced, so a kept directory never measures stale code), compiled."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "build")
    for part in ("policies", "gateway", "bench", "build"):
        shutil.rmtree(scratch / part, ignore_errors=True)
    for shared in scratch.glob("*__mypyc*"):  # the previous build's shared library
        shared.unlink()
    for part in ("policies", "gateway", "bench"):
        shutil.copytree(ROOT / part, scratch / part, ignore=ignore)
    modules = compiled_modules(scratch / "policies")
    print(f"compiling {len(modules)} modules with mypyc in {scratch} ...", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "mypyc", *modules], cwd=scratch, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"mypyc failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    where = subprocess.run(
        [sys.executable, "-c", "import policies.scheduler as s; print(s.__file__)"],
        cwd=scratch, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if where.endswith(".py"):
        sys.exit(f"the copy imports the interpreted scheduler ({where}); nothing to compare")


def run_bench(tree: Path, args: list[str]) -> dict[str, tuple[float, float]]:
    out = subprocess.run(
        [sys.executable, "bench/decision_bench.py", *args],
        cwd=tree, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows: dict[str, tuple[float, float]] = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if m and m["name"].strip() in CALLS:
            rows[m["name"].strip()] = (float(m["p50"]), float(m["p99"]))
    missing = set(CALLS) - set(rows)
    if missing:
        sys.exit(f"decision_bench printed no {sorted(missing)} in {tree}:\n{out}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", type=Path, help="build here and keep it (default: a temp dir)")
    p.add_argument("bench_args", nargs="*", help="passed to decision_bench.py (after --)")
    args = p.parse_args(argv)
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="sluicegate-mypyc-"))
    try:
        build(scratch)
        pairs = []
        for r in range(args.rounds):  # alternate, so both see the same machine moments
            pure = run_bench(ROOT, args.bench_args)
            comp = run_bench(scratch, args.bench_args)
            pairs.append((pure, comp))
            print(f"round {r + 1}: " + ", ".join(
                f"{c.split()[0]} p50 {pure[c][0]:.1f}->{comp[c][0]:.1f} "
                f"p99 {pure[c][1]:.1f}->{comp[c][1]:.1f}" for c in CALLS
            ), flush=True)  # fmt: skip
        print(f"\nCPU µs per call, medians of {args.rounds} rounds (interpreted -> compiled), "
              "and the median of each round's compiled/interpreted ratio:")  # fmt: skip
        for c in CALLS:
            med = [statistics.median(pr[i][c][k] for pr in pairs) for i in (0, 1) for k in (0, 1)]
            r50 = statistics.median(pr[1][c][0] / pr[0][c][0] for pr in pairs)
            r99 = statistics.median(pr[1][c][1] / pr[0][c][1] for pr in pairs)
            print(f"  {c:<18} p50 {med[0]:6.1f} -> {med[2]:6.1f} ({r50:.2f})   "
                  f"p99 {med[1]:6.1f} -> {med[3]:6.1f} ({r99:.2f})")  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
