"""Medians, ratios against direct, the hot-path targets, and the Markdown of RESULTS.md."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.hotpath.loadgen import CellResult
from bench.hotpath.payloads import STREAM_TOKENS

MODES = ("non-stream", "stream")


@dataclass(frozen=True)
class Sample:
    """One cell of one round: the wrk verdict plus the proxy's CPU seconds during it."""

    result: CellResult
    proxy_cpu_s: float

    @property
    def cpu_us_per_request(self) -> float:
        return 1e6 * self.proxy_cpu_s / self.result.good if self.result.good else float("nan")


@dataclass(frozen=True)
class Cell:
    """Medians over the rounds of one (setup, mode, C)."""

    setup: str
    mode: str
    conns: int
    rate: float
    tokens_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_us: float
    failed: int
    rounds: int

    @classmethod
    def of(cls, setup: str, mode: str, conns: int, samples: Sequence[Sample]) -> Cell:
        results = [s.result for s in samples]
        return cls(
            setup,
            mode,
            conns,
            rate=statistics.median(r.rate for r in results),
            tokens_per_s=statistics.median(r.tokens_per_s for r in results),
            p50_ms=statistics.median(r.p50_ms for r in results),
            p99_ms=statistics.median(r.p99_ms for r in results),
            cpu_us=statistics.median(s.cpu_us_per_request for s in samples),
            failed=sum(r.failed for r in results),
            rounds=len(results),
        )


Table = dict[tuple[str, str, int], Cell]


def markdown_tables(table: Table, setups: Sequence[str], conns: Sequence[int]) -> str:
    out: list[str] = []
    for mode in MODES:
        if not any(k[1] == mode for k in table):
            continue
        unit = "streams/s (chunks/s)" if mode == "stream" else "req/s"
        out += [
            f"### {mode}"
            + (
                f", {STREAM_TOKENS} chunks per stream"
                if mode == "stream"
                else ", 16 tokens per answer"
            ),
            "",
        ]
        out.append(
            f"| setup | C | {unit} | vs direct | p50 ms | +p50 ms | p99 ms "
            "| proxy CPU µs/req | failed |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in conns:
            direct = table.get(("direct", mode, c))
            for name in setups:
                cell = table.get((name, mode, c))
                if cell is not None:
                    out.append(_row(cell, direct))
        out.append("")
    return "\n".join(out)


def _row(cell: Cell, direct: Cell | None) -> str:
    if cell.rate == 0:
        return (
            f"| {cell.setup} | {cell.conns} | 0 (none completed within the cell) | 0 | - | - "
            f"| - | - | {cell.failed} |"
        )
    rate = f"{cell.rate:,.0f}"
    if cell.mode == "stream":
        rate += f" ({cell.tokens_per_s:,.0f})"
    ratio = f"{cell.rate / direct.rate:.2f}" if direct and direct.rate else "-"
    added = f"{cell.p50_ms - direct.p50_ms:+.2f}" if direct and cell.setup != "direct" else ""
    cpu = "" if cell.setup == "direct" or cell.cpu_us != cell.cpu_us else f"{cell.cpu_us:,.0f}"
    return (
        f"| {cell.setup} | {cell.conns} | {rate} | {ratio} | {cell.p50_ms:.2f} | {added} "
        f"| {cell.p99_ms:.2f} | {cpu} | {cell.failed} |"
    )


def target_lines(table: Table, gateway: str = "sluicegate") -> list[str]:
    """The issue's targets for one gateway process on one core, each met or not."""

    def get(mode: str, c: int) -> Cell | None:
        return table.get((gateway, mode, c))

    lines: list[str] = []
    ns64, ns256 = get("non-stream", 64), get("non-stream", 256)
    if ns64 is not None:
        lines.append(_target("non-stream req/s at C=64", ns64.rate, ">=", 3000))
    if ns64 is not None and ns256 is not None and ns64.rate:
        lines.append(_target("C=256 rate / C=64 rate", ns256.rate / ns64.rate, ">=", 0.9))
    ns1, direct1 = get("non-stream", 1), table.get(("direct", "non-stream", 1))
    if ns1 is not None and direct1 is not None:
        lines.append(_target("added p50 at C=1 (ms)", ns1.p50_ms - direct1.p50_ms, "<=", 1.0))
    s64 = get("stream", 64)
    if s64 is not None:
        lines.append(_target("relayed chunks/s at C=64", s64.tokens_per_s, ">=", 40000))
    return lines


def _target(what: str, value: float, op: str, goal: float) -> str:
    met = value >= goal if op == ">=" else value <= goal
    return f"- {what}: **{value:,.2f}** (target {op} {goal:,g}): {'met' if met else 'NOT met'}"
