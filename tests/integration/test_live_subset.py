"""One cell of the matrix's live subset end to end (``sluicegate evaluate-live``):
``sluicegate emulate`` and ``sluicegate serve`` started as processes on free loopback
ports, the cell's tenants as OpenAI clients (and each alone), the simulator beside it, the
report."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from commands.evaluate_live import main

CELL = "noisy-1500-stream/rx9070xt/2x/1b"
DURATION_S = "24"
"""Emulated seconds of arrivals: 6 wall seconds at the profile's speed."""


def test_a_live_cell_runs_to_the_end_with_one_outcome_per_request_and_reports_its_rows(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "live")
    assert main(["--cells", CELL, "--duration", DURATION_S, "--alone", "--out", out]) == 0

    status = re.search(
        rf"{re.escape(CELL)} default: .* sent (\d+), gateway outcomes (\d+), "
        r"failed attempts (\d+), cut at the drain (\d+)",
        (tmp_path / "live.txt").read_text(),
    )
    assert status is not None
    sent, outcomes, failed, cut = (int(x) for x in status.groups())
    assert sent > 0 and outcomes == sent  # each request ended in exactly one outcome
    assert failed == 0 and cut == 0

    with (tmp_path / "live.csv").open() as f:
        rows = {r["metric"]: r for r in csv.DictReader(f) if r["cell"] == CELL}
    assert {"goodput_tps", "completed_per_s", "ttft_p99_s[victim]", "ttft_p99_s[noisy]"} <= set(
        rows
    )
    alone = ("ttft_vs_alone[victim]", "ttft_vs_alone[noisy]")  # each tenant run alone too
    for name in ("goodput_tps", "completed_per_s", "ttft_p99_s[victim]", *alone):
        assert float(rows[name]["live"]) > 0 and float(rows[name]["simulated"]) > 0, name
        assert rows[name]["agrees"] in ("yes", "NO"), name
