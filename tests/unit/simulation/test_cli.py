from __future__ import annotations

import zlib
from pathlib import Path

from simulation.cli import main
from simulation.results import read_csv
from tests.unit.simulation.timed_argv import timed


def _sweep(agents: str, policies: str, out: Path, duration_s: int, *more: str) -> int:
    """``simulate`` of ``agents`` under each of ``policies`` for ``duration_s`` after a
    10 s warm-up, into ``out``."""
    return main(["--agents", agents, "--policies", policies, *timed(out, duration_s, 10, *more)])


def test_simulate_writes_one_row_per_policy_and_n(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    code = _sweep("4,10", "unbounded", out, 90, "--no-chart")
    assert code == 0
    rows = read_csv(out.with_suffix(".csv"))
    assert [(r.policy, r.n_agents) for r in rows] == [("unbounded", 4), ("unbounded", 10)]
    assert all(r.turns_completed > 0 and r.deferral_share == 0.0 for r in rows)


def test_unknown_policy_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["--policies", "no-such-policy", "--out", str(tmp_path / "x")]) == 2


def test_a_preset_file_runs_unchanged(tmp_path: Path) -> None:
    preset = tmp_path / "never-queue.yaml"
    preset.write_text("policy:\n  name: never-queue\n  queue:\n    max_queued_tokens: 1\n")
    out = tmp_path / "p"
    code = _sweep("16", str(preset), out, 90, "--no-chart")
    assert code == 0
    (row,) = read_csv(out.with_suffix(".csv"))
    assert row.policy == "never-queue" and row.deferral_share > 0.0


def test_chart_is_a_png(tmp_path: Path) -> None:
    import matplotlib  # noqa: F401  # the [sim] extra: a missing chart fails, never skips

    out = tmp_path / "c"
    code = _sweep("4,8", "unbounded", out, 60)
    assert code == 0
    data = out.with_suffix(".png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert zlib.crc32(data[12:29]) == int.from_bytes(data[29:33], "big")  # IHDR chunk intact


def test_frontier_runs_named_candidates_with_their_agents(tmp_path: Path) -> None:
    out = tmp_path / "f"
    names = "unbounded,reservation-4s/exact"
    code = main(
        [
            "--frontier",
            "--policies",
            names,
            "--agents",
            "16",
            *timed(out, 120, 20, "--no-chart"),
        ]
    )
    assert code == 0
    rows = read_csv(out.with_suffix(".csv"))
    assert [r.policy for r in rows] == ["unbounded", "reservation-4s/exact"]
    assert rows[0].deferral_share == 0.0
    # the reservation moves waiting out of the queue: its queue wait is the shorter one
    assert rows[1].p50_queue_wait_s < rows[0].p50_queue_wait_s


def test_unknown_frontier_candidate_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["--frontier", "--policies", "nope", "--out", str(tmp_path / "x")]) == 2
