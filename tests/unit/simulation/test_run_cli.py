"""``sluicegate simulate-runs`` end to end on a short run, and how it names policies."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simulation.run_cli import COLUMNS, main, resolve_policy
from tests.unit.simulation.timed_argv import timed


def test_a_short_case_writes_one_row_per_policy_and_load(tmp_path: Path) -> None:
    out = tmp_path / "case"
    argv = [
        "--loads",
        "0.5,2",
        "--policies",
        "default,agent-runs",
        *timed(out, 120, 20),
    ]
    assert main(argv) == 0
    with out.with_suffix(".csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS
    assert [(r["policy"], float(r["load"])) for r in rows] == [
        ("default", 0.5),
        ("agent-runs", 0.5),
        ("default", 2.0),
        ("agent-runs", 2.0),
    ]
    low, high = float(rows[0]["rate_rps"]), float(rows[2]["rate_rps"])
    assert high == pytest.approx(4 * low)  # rates are multiples of one measured capacity


def test_policies_by_name_preset_or_file(tmp_path: Path) -> None:
    assert resolve_policy("default") == ("default", {"name": "default"})
    name, policy = resolve_policy("agent-runs")
    assert name == "agent-runs" and policy["runs"]["enabled"] is True
    path = tmp_path / "mine.yaml"
    path.write_text("policy:\n  name: mine\n  queue: {max_wait_s: 5}\n")
    assert resolve_policy(str(path)) == ("mine", {"name": "mine", "queue": {"max_wait_s": 5}})
    with pytest.raises(ValueError, match="unknown policy"):
        resolve_policy("no-such-policy")


def test_a_bad_hint_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["--hints", "calls,colour", "--out", str(tmp_path / "x")]) == 2
