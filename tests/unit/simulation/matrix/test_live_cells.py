"""The live subset: which matrix cells run over HTTP, and how a name selects them."""

from __future__ import annotations

import pytest

from emulator.profile import load_profile
from simulation.matrix.cells import full_matrix
from simulation.matrix.live_cells import LIVE_SUBSET, select
from simulation.matrix.workloads import WORKLOADS


def test_the_subset_is_at_least_twelve_distinct_cells_of_the_matrix() -> None:
    cells = [lc.cell for lc in LIVE_SUBSET]
    assert len(cells) == len(set(cells)) >= 12
    assert set(cells) <= set(full_matrix())


def test_the_subset_holds_noisy_cells_on_both_profiles_both_run_shapes_and_multi_turn() -> None:
    cells = [lc.cell for lc in LIVE_SUBSET]
    noisy_profiles = {c.profile for c in cells if WORKLOADS[c.workload].noisy}
    assert noisy_profiles == {"cpu-tiny", "rx9070xt"}
    assert {"runs-short", "runs-long", "multi-turn"} <= {c.workload for c in cells}


def test_every_live_cell_runs_its_emulator_at_a_positive_speed_for_whole_seconds() -> None:
    for lc in LIVE_SUBSET:
        assert lc.speed > 0 and lc.duration_s > 0
        assert lc.wall_s == pytest.approx(lc.duration_s / lc.speed)
        load_profile(lc.cell.profile)  # a profile the emulator knows


def test_select_takes_a_cell_key_or_a_workload() -> None:
    assert select(None) == list(LIVE_SUBSET)
    one = select(["noisy-1500/rx9070xt/2x/1b"])
    assert [lc.key for lc in one] == ["noisy-1500/rx9070xt/2x/1b"]
    runs = select(["runs-long"])
    assert {lc.cell.profile for lc in runs} == {"cpu-tiny", "rx9070xt"}
    assert {lc.cell.workload for lc in runs} == {"runs-long"}


def test_select_names_what_is_not_in_the_subset() -> None:
    with pytest.raises(ValueError, match="chat"):
        select(["chat", "runs-long"])
    with pytest.raises(ValueError, match="noisy-1500/mi300x/2x/1b"):
        select(["noisy-1500/mi300x/2x/1b"])
