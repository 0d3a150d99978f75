"""Envoy + Sluicegate's Endpoint Picker, side by side with Sluicegate's own proxy, Envoy
alone and direct, in front of ``bench.hotpath``'s fake backend, driven by its wrk.

    python -m bench.epp.run                  # 2 rounds x 4 s per cell, writes bench/epp/RESULTS.md
    python -m bench.epp.run --quick          # 1 round x 2 s per cell, prints only

wrk and the fake backend on core 0; every process of a setup (Envoy, the picker, the proxy)
on core 1. Each process's CPU time is read per cell, so the table gives the CPU per request
of Envoy and of the picker separately. Any failed request fails the run.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.epp.setups import EnvoyAlone, EnvoyEpp, EnvoyEppBaseline, EnvoyNullEpp
from bench.hotpath import machine
from bench.hotpath.cpu import group_cpu_s
from bench.hotpath.loadgen import CellResult
from bench.hotpath.payloads import STREAM_TOKENS
from bench.hotpath.procs import Proc, fake_backend, wait_http
from bench.hotpath.run import cell_args, cell_line, load, measured, publish, rotated_cells
from bench.hotpath.setups import Direct, Setup, Sluicegate
from scripts.vllm.serve import free_port

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SETUPS = {
    "sluicegate": Sluicegate,
    "envoy": EnvoyAlone,
    "envoy-epp": EnvoyEpp,
    "envoy-epp-duplex": EnvoyEpp,
    "envoy-epp-min": EnvoyEpp,
    "envoy-epp-asyncio": EnvoyEpp,
    "envoy-epp-base": EnvoyEppBaseline,
    "envoy-null-epp": EnvoyNullEpp,
    "envoy-null-epp-sync": EnvoyNullEpp,
    "envoy-null-epp-min": EnvoyNullEpp,
    "envoy-null-epp-uvloop": EnvoyNullEpp,
}


@dataclass(frozen=True)
class Sample:
    result: CellResult
    cpu_s: dict[str, float]
    """CPU seconds of each process of the setup during the cell."""


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conns", default="1,64,256")
    p.add_argument("--setups", default="sluicegate,envoy,envoy-epp")
    p.add_argument("--modes", default="non-stream,stream")
    return cell_args(p, argv, rounds=2, duration_s=4.0, results=RESULTS)


def start_all(args: argparse.Namespace, workdir: Path) -> tuple[Proc, list[Setup]]:
    backend, port = fake_backend(workdir)
    backend.start()
    wait_http(backend, "127.0.0.1", port)
    setups: list[Setup] = [Direct(port, workdir)]
    try:
        for name in args.setups:
            setup = SETUPS[name](name, port, free_port(), workdir, "1")
            setups.append(setup)
            setup.start()
    except BaseException:  # what started is stopped: no proxy outlives a failed start
        for setup in setups:
            setup.stop()
        backend.stop()
        raise
    return backend, setups


def measure(
    args: argparse.Namespace, setups: Sequence[Setup]
) -> dict[tuple[str, str, int], list[Sample]]:
    samples: dict[tuple[str, str, int], list[Sample]] = defaultdict(list)
    for rnd, mode, conns, setup in rotated_cells(args, setups):
        before = {p.name: group_cpu_s([p.pid]) for p in setup.procs}
        result = load(args, setup, mode, conns)
        cpu = {p.name: group_cpu_s([p.pid]) - before[p.name] for p in setup.procs}
        samples[(setup.name, mode, conns)].append(Sample(result, cpu))
        print(cell_line(rnd, setup, mode, conns, result), flush=True)
    return samples


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _cpu_us(samples: Sequence[Sample]) -> dict[str, float]:
    names = samples[0].cpu_s.keys()
    return {
        n: _median([1e6 * s.cpu_s[n] / s.result.good for s in samples if s.result.good])
        for n in names
    }


def table(
    samples: dict[tuple[str, str, int], list[Sample]],
    names: Sequence[str],
    args: argparse.Namespace,
) -> list[str]:
    lines: list[str] = []
    for mode in args.modes:
        unit = "streams/s (chunks/s)" if mode == "stream" else "req/s"
        extra = f", {STREAM_TOKENS} chunks per stream" if mode == "stream" else ""
        lines += [
            f"### {mode}{extra}",
            "",
            f"| setup | C | {unit} | vs direct | p50 ms | +p50 ms | p99 ms | +p99 ms "
            "| CPU µs/req by process | failed |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for c in args.conns:
            direct = samples.get(("direct", mode, c))
            for name in names:
                got = samples.get((name, mode, c))
                if got:
                    lines.append(_row(name, c, got, direct, mode))
        lines.append("")
    return lines


def _row(name: str, c: int, got: list[Sample], direct: list[Sample] | None, mode: str) -> str:
    rate = _median([s.result.rate for s in got])
    p50, p99 = _median([s.result.p50_ms for s in got]), _median([s.result.p99_ms for s in got])
    shown = f"{rate:,.0f}"
    if mode == "stream":
        shown += f" ({_median([s.result.tokens_per_s for s in got]):,.0f})"
    d_rate = _median([s.result.rate for s in direct]) if direct else 0.0
    d50 = _median([s.result.p50_ms for s in direct]) if direct else 0.0
    d99 = _median([s.result.p99_ms for s in direct]) if direct else 0.0
    ratio = f"{rate / d_rate:.2f}" if d_rate else "-"
    added = "" if name == "direct" else f"{p50 - d50:+.2f} | "
    added99 = "" if name == "direct" else f"{p99 - d99:+.2f}"
    cpu = ", ".join(f"{n}: {v:,.0f}" for n, v in _cpu_us(got).items())
    failed = sum(s.result.failed for s in got)
    if name == "direct":
        return f"| direct | {c} | {shown} | {ratio} | {p50:.2f} |  | {p99:.2f} |  | - | {failed} |"
    return (
        f"| {name} | {c} | {shown} | {ratio} | {p50:.2f} | {added}{p99:.2f} | {added99} "
        f"| {cpu} | {failed} |"
    )


def per_core_lines(
    samples: dict[tuple[str, str, int], list[Sample]], args: argparse.Namespace
) -> list[str]:
    """Requests per second of Sluicegate-side CPU: each setup's picker process (the real
    one, or the null picker) against the proxy."""
    lines: list[str] = []
    for mode in args.modes:
        for c in args.conns:
            proxy = samples.get(("sluicegate", mode, c))
            if not proxy:
                continue
            proxy_us = _cpu_us(proxy)["sluicegate"]
            for name in args.setups:
                got = samples.get((name, mode, c))
                picker = f"{name}-picker"
                if not got or picker not in got[0].cpu_s:
                    continue
                epp_us = _cpu_us(got)[picker]
                lines.append(
                    f"- {mode}, C={c}, {name}: proxy {proxy_us:,.0f} µs/req "
                    f"({1e6 / proxy_us:,.0f} req per CPU-second), picker "
                    f"{epp_us:,.0f} µs/req ({1e6 / epp_us:,.0f}): "
                    f"**{proxy_us / epp_us:.2f}x** (goal >= 2x)"
                )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    command = "python -m bench.epp.run " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="sluicegate-epp-bench-") as tmp:
        backend, setups = start_all(args, Path(tmp))
        versions, samples = measured(backend, setups, args.modes, lambda: measure(args, setups))
    names = [s.name for s in setups]
    failed = sum(s.result.failed for got in samples.values() for s in got)
    text = "\n".join(
        [
            "# Envoy + Sluicegate EPP: side by side",
            "",
            f"Command: `{command}` ({(time.time() - started) / 60:.1f} min). {args.rounds} "
            f"round(s) x {args.duration:g} s per cell; medians over rounds; setups rotated per "
            "cell. wrk and the fake backend on core 0; Envoy, the picker and the proxy on core 1.",
            "",
            f"**Failed requests: {failed}**",
            "",
            "## Results",
            "",
            *table(samples, names, args),
            "## Requests per CPU-second of Sluicegate (picker vs proxy)",
            "",
            *per_core_lines(samples, args),
            "",
            "## Machine and versions",
            "",
            *machine.describe(versions),
            "",
        ]
    )
    publish(text, args.output)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
