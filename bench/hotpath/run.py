"""The hot path, measured side by side: direct, nginx, LiteLLM and Sluicegate.

    python -m bench.hotpath.run            # 3 rounds x 5 s per cell, writes bench/RESULTS.md
    python -m bench.hotpath.run --quick    # 1 round x 2 s per cell, prints only

One fake backend (``fake_backend.py``) and wrk share core 0; every proxy sits on core 1.
Each cell (setup, mode, C) runs once per round; within a round the setups' order rotates
from cell to cell, so none always runs first or last. The table gives medians over rounds,
ratios against direct, and the proxy's CPU time per request. Any failed request (socket
error, timeout, non-200, wrong token count, stream without [DONE]) fails the run.
Prerequisites: ``apt-get install wrk nginx-light`` and LiteLLM in its own venv
(``setups.LITELLM_VENV``); a missing setup is reported and skipped, never faked.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from bench.hotpath import machine
from bench.hotpath.cpu import group_cpu_s, settle
from bench.hotpath.loadgen import CellResult, run_wrk
from bench.hotpath.procs import Proc, fake_backend, wait_http
from bench.hotpath.report import MODES, Cell, Sample, Table, markdown_tables, target_lines
from bench.hotpath.setups import MODEL, SETUP_CLASSES, Direct, Setup
from scripts.vllm.serve import free_port

RESULTS = Path(__file__).resolve().parents[1] / "RESULTS.md"
ALL_SETUPS = ("direct", "nginx", "litellm", "sluicegate", "naive")
"""``naive`` (FastAPI + httpx) is the issue's calibration row; ``naive-pool`` is the
same pass-through on the gateway's upstream pool (how much of the gain is the client)."""


T = TypeVar("T")


def cell_args(
    p: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    *,
    rounds: int,
    duration_s: float,
    results: Path,
) -> argparse.Namespace:
    """The flags every cell-by-cell benchmark shares, parsed. ``p`` holds its own flags and
    its ``--conns``/``--setups``/``--modes`` defaults; ``rounds`` and ``duration_s`` are a
    full run's (``--quick``: 1 round of 2 s cells, nothing written)."""
    p.add_argument("--quick", action="store_true", help="1 round of 2 s cells, no RESULTS.md")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--duration", type=float, default=None, help="seconds per cell (<= 10)")
    p.add_argument("--output", type=Path, default=None, help=f"default {results} (full runs)")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else rounds)
    args.duration = min(args.duration or (2.0 if args.quick else duration_s), 10.0)
    args.conns = [int(c) for c in args.conns.split(",")]
    args.setups = [s for s in args.setups.split(",") if s]
    args.modes = [m for m in args.modes.split(",") if m]
    if args.output is None and not args.quick:
        args.output = results
    return args


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conns", default="1,16,64,256", help="comma-separated C values")
    p.add_argument("--setups", default=",".join(ALL_SETUPS))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--load-cpus", default="0", help="cores of wrk and the fake backend")
    p.add_argument("--proxy-cpus", default="1", help="core(s) of the proxy under test")
    return cell_args(p, argv, rounds=3, duration_s=5.0, results=RESULTS)


def start_all(args: argparse.Namespace, workdir: Path) -> tuple[Proc, list[Setup], list[str]]:
    backend, port = fake_backend(workdir, args.load_cpus)
    backend.start()
    wait_http(backend, "127.0.0.1", port)
    setups: list[Setup] = [Direct(port, workdir)]
    skipped: list[str] = []
    for name in args.setups:
        if name == "direct":
            continue
        setup = SETUP_CLASSES[name](name, port, free_port(), workdir, args.proxy_cpus)
        try:
            setup.start()
            setups.append(setup)
        except RuntimeError as exc:
            print(f"[skip] {name}: {exc}", file=sys.stderr)
            skipped.append(f"{name}: {str(exc).splitlines()[0]}")
            setup.stop()
    return backend, setups, skipped


def warm_up(setups: Sequence[Setup], modes: Sequence[str]) -> None:
    """A short run per setup and mode: imports, pools and caches before anything counts."""
    for setup in setups:
        for mode in modes:
            run_wrk(
                setup.url,
                conns=16,
                duration_s=1.0,
                stream=mode == "stream",
                keys=setup.keys,
                model=MODEL,
            )


def rotated_cells(
    args: argparse.Namespace, setups: Sequence[Setup]
) -> Iterator[tuple[int, str, int, Setup]]:
    """(round, mode, connections, setup) for every cell of every round, the setups' order
    rotated from cell to cell, so none always runs first or last. Before each, every setup
    idle: one still chewing on the requests a previous cell abandoned (LiteLLM at C=256)
    would steal this cell's core."""
    cells = [(m, c) for m in args.modes for c in args.conns]
    for rnd in range(args.rounds):
        for index, (mode, conns) in enumerate(cells):
            shift = (rnd + index) % len(setups)
            for setup in [*setups[shift:], *setups[:shift]]:
                settle([pid for s in setups for pid in s.pids()])
                yield rnd, mode, conns, setup


def load(args: argparse.Namespace, setup: Setup, mode: str, conns: int) -> CellResult:
    """One cell's ``wrk`` run against ``setup``."""
    return run_wrk(
        setup.url,
        conns=conns,
        duration_s=args.duration,
        stream=mode == "stream",
        keys=setup.keys,
        model=MODEL,
    )


def cell_line(rnd: int, setup: Setup, mode: str, conns: int, result: CellResult) -> str:
    """One measured cell, as the run prints it when it ends."""
    return (
        f"round {rnd + 1} {setup.name:<17} {mode:<10} C={conns:<3} "
        f"{result.rate:>9,.0f}/s p50 {result.p50_ms:7.2f} ms failed {result.failed}"
    )


def measure(args: argparse.Namespace, setups: Sequence[Setup]) -> Table:
    samples: dict[tuple[str, str, int], list[Sample]] = defaultdict(list)
    total = args.rounds * len(args.modes) * len(args.conns) * len(setups)
    for done, (rnd, mode, conns, setup) in enumerate(rotated_cells(args, setups), 1):
        groups = setup.pids()
        before = group_cpu_s(groups)
        result = load(args, setup, mode, conns)
        cpu_s = group_cpu_s(groups) - before
        samples[(setup.name, mode, conns)].append(Sample(result, cpu_s))
        print(f"[{done}/{total}] {cell_line(rnd, setup, mode, conns, result)}", flush=True)
    return {key: Cell.of(*key, s) for key, s in samples.items()}


def measured(
    backend: Proc, setups: Sequence[Setup], modes: Sequence[str], measure: Callable[[], T]
) -> tuple[dict[str, str], T]:
    """The setups' versions and what ``measure()`` returns after a warm-up; every setup and
    the backend stopped after, whatever happened."""
    try:
        versions = {s.name: s.version() for s in setups}
        warm_up(setups, modes)
        return versions, measure()
    finally:
        for setup in setups:
            setup.stop()
        backend.stop()


def publish(text: str, output: Path | None) -> None:
    """The report on stdout, and into ``output`` when one is named."""
    print(text)
    if output is not None:
        output.write_text(text)
        print(f"wrote {output}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    command = "python -m bench.hotpath.run " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="sluicegate-hotpath-") as tmp:
        workdir = Path(tmp)
        backend, setups, skipped = start_all(args, workdir)
        versions, table = measured(backend, setups, args.modes, lambda: measure(args, setups))
    names = [s.name for s in setups]
    text = render(args, table, names, versions, skipped, command, time.time() - started)
    publish(text, args.output)
    failed = sum(c.failed for c in table.values())
    return 1 if failed or skipped else 0


def render(
    args: argparse.Namespace,
    table: Table,
    names: Sequence[str],
    versions: dict[str, str],
    skipped: Sequence[str],
    command: str,
    elapsed_s: float,
) -> str:
    failed = sum(c.failed for c in table.values())
    lines = [
        "# Hot path: side by side",
        "",
        f"Command: `{command}` ({elapsed_s / 60:.1f} min). {args.rounds} round(s) x "
        f"{args.duration:g} s per cell; medians over rounds; order of setups rotated per cell.",
        f"wrk and the fake backend on core(s) {args.load_cpus}, the proxy on core(s) "
        f"{args.proxy_cpus}. `vs direct` is the rate ratio; `+p50` the added median latency; "
        "`proxy CPU µs/req` is the proxy's own CPU time per good answer (steadier than rates "
        "on a shared machine).",
        "",
        f"**Failed requests: {failed}**" + (" (the run fails)" if failed else ""),
        "",
    ]
    if skipped:
        lines += ["Skipped setups:", *[f"- {s}" for s in skipped], ""]
    lines += ["## Results", "", markdown_tables(table, names, args.conns)]
    targets = target_lines(table)
    if targets:
        lines += ["## Targets (Sluicegate, one process on one core)", "", *targets, ""]
    lines += ["## Machine and versions", "", *machine.describe(versions), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
