"""Live against simulated: the metrics compared, their ratio, and the 15 % line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simulation.matrix.agreement import Agreement, against_alone, compare, summary, write_csv
from simulation.matrix.measure import Measured


def _row(live: float | None, simulated: float | None) -> Agreement:
    return Agreement("c", "default", "m", live, simulated)


def test_the_ratio_is_live_over_simulated() -> None:
    assert _row(3.0, 2.0).ratio == pytest.approx(1.5)
    assert _row(0.0, 0.0).ratio == 1.0
    assert _row(1.0, 0.0).ratio is None
    assert _row(None, 2.0).ratio is None


@pytest.mark.parametrize(
    ("live", "agrees"),
    [(1.15, True), (0.85, True), (1.0, True), (1.151, False), (0.849, False)],
)
def test_agreement_is_within_15_percent_either_way(live: float, agrees: bool) -> None:
    assert _row(live, 1.0).agrees is agrees


def test_no_ratio_means_no_verdict() -> None:
    assert _row(None, 1.0).agrees is None


def _measured(goodput: float, tenants: dict[str, tuple[float, float]], **kw: int) -> Measured:
    return Measured(goodput, goodput / 100, dict(tenants), **kw)


def test_compare_reports_throughput_each_tenants_ttft_and_share() -> None:
    live = _measured(200.0, {"victim": (0.5, 10.0), "noisy": (2.0, 30.0)})
    sim = _measured(100.0, {"victim": (1.0, 20.0), "noisy": (2.0, 20.0)})
    rows = {r.metric: r for r in compare("cell", "default", live, [sim])}
    assert set(rows) == {
        "goodput_tps",
        "completed_per_s",
        "ttft_p99_s[noisy]",
        "ttft_p99_s[victim]",
        "share[noisy]",
        "share[victim]",
    }
    assert rows["goodput_tps"].ratio == pytest.approx(2.0)
    assert rows["ttft_p99_s[victim]"].ratio == pytest.approx(0.5)
    assert rows["ttft_p99_s[noisy]"].agrees is True
    assert rows["share[victim]"].live == pytest.approx(0.25)
    assert rows["share[victim]"].simulated == pytest.approx(0.5)


def test_against_alone_divides_each_side_by_its_own_run_alone() -> None:
    """A slowness both runs share falls out: live is 1.5x the simulator's median seed in
    the cell and alone alike, so its ratio to alone is the simulator's."""
    live = (_measured(1.0, {"victim": (0.12, 1.0)}), _measured(1.0, {"victim": (0.06, 1.0)}))
    seeds = [
        (_measured(1.0, {"victim": (0.08, 1.0)}), _measured(1.0, {"victim": (0.04, 1.0)})),
        (_measured(1.0, {"victim": (0.09, 1.0)}), _measured(1.0, {"victim": (0.03, 1.0)})),
        (_measured(1.0, {"victim": (0.07, 1.0)}), _measured(1.0, {"victim": (0.035, 1.0)})),
    ]
    row = against_alone("cell", "default", "victim", live, seeds)
    assert row is not None and row.metric == "ttft_vs_alone[victim]"
    assert row.live == pytest.approx(2.0)
    assert row.simulated == pytest.approx(2.0)  # the median of 2.0, 3.0 and 2.0
    assert (row.sim_low, row.sim_high) == (pytest.approx(2.0), pytest.approx(3.0))
    assert row.agrees is True
    absolute = {r.metric: r for r in compare("cell", "default", live[0], [p[0] for p in seeds])}
    assert absolute["ttft_p99_s[victim]"].agrees is False  # 0.12 against 0.08


def test_against_alone_has_no_row_without_a_value_alone() -> None:
    run = _measured(1.0, {"victim": (0.1, 1.0)})
    empty = _measured(1.0, {})
    assert against_alone("c", "default", "victim", (run, empty), [(run, empty)]) is None


def test_one_tenant_has_no_share_and_retry_after_only_with_returns() -> None:
    live = _measured(100.0, {"agents": (1.0, 5.0)})
    sim = _measured(100.0, {"agents": (1.0, 5.0)}, ra_returns=4, ra_admitted=3)
    metrics = {r.metric: r for r in compare("cell", "default", live, [sim])}
    assert not any(m.startswith("share") for m in metrics)
    assert metrics["ra_accuracy"].simulated == pytest.approx(0.75)
    assert metrics["ra_accuracy"].live is None and metrics["ra_accuracy"].agrees is None
    quiet = compare("cell", "default", live, [_measured(100.0, {"agents": (1.0, 5.0)})])
    assert "ra_accuracy" not in {r.metric for r in quiet}


def test_a_tenant_missing_on_one_side_has_no_ratio() -> None:
    live = _measured(100.0, {"victim": (1.0, 5.0)})
    sim = _measured(100.0, {"victim": (1.0, 5.0), "noisy": (3.0, 5.0)})
    rows = {r.metric: r for r in compare("cell", "default", live, [sim])}
    assert rows["ttft_p99_s[noisy]"].live is None
    assert rows["ttft_p99_s[noisy]"].agrees is None


def test_the_csv_and_summary_flag_what_is_outside(tmp_path: Path) -> None:
    rows = [_row(1.0, 1.0), _row(2.0, 1.0), _row(None, 1.0)]
    write_csv(rows, tmp_path / "a.csv")
    with (tmp_path / "a.csv").open() as f:
        read = list(csv.DictReader(f))
    assert [r["agrees"] for r in read] == ["yes", "NO", ""]
    assert read[1]["ratio"] == "2"
    lines = summary(rows)
    assert lines[2].endswith("OUTSIDE") and lines[3].endswith("n/a")
    assert lines[-1].startswith("1 of 2 metrics within 15%")


def test_the_simulated_value_is_the_seeds_median_with_their_range() -> None:
    live = _measured(130.0, {"victim": (1.0, 5.0)})
    seeds = [
        _measured(g, {"victim": (t, 5.0)}) for g, t in ((100.0, 0.5), (110.0, 2.0), (90.0, 1.1))
    ]
    rows = {r.metric: r for r in compare("cell", "default", live, seeds)}
    goodput = rows["goodput_tps"]
    assert (goodput.simulated, goodput.sim_low, goodput.sim_high) == (100.0, 90.0, 110.0)
    assert goodput.agrees is False and goodput.in_seed_range is False
    ttft = rows["ttft_p99_s[victim]"]
    assert ttft.simulated == 1.1 and ttft.agrees is True and ttft.in_seed_range is True


def test_outside_15_percent_but_inside_the_seeds_is_told_apart(tmp_path: Path) -> None:
    inside_seeds = Agreement("c", "default", "m", 2.0, 1.0, 0.5, 2.5)
    beyond = Agreement("c", "default", "m", 3.0, 1.0, 0.5, 2.5)
    lines = summary([inside_seeds, beyond])
    assert lines[1].endswith("OUTSIDE") and lines[2].endswith("OUTSIDE, beyond seeds")
    assert "0 of 2 metrics within 15%" in lines[-1] and "1 within 15% or the seeds" in lines[-1]
    write_csv([inside_seeds, beyond], tmp_path / "a.csv")
    with (tmp_path / "a.csv").open() as f:
        assert [r["in_seed_range"] for r in csv.DictReader(f)] == ["yes", "NO"]
