"""The fair-share preset meets a lone tenant's agent runs as the default does.

Its own refusal, queue and degradation settings (a 60 s queue bound, a ladder without the
default's output cap, Retry-After as a promise, a retry budget) completed a third of the
default's runs under sustained overload (docs/runs.md, "fair-share under sustained run
traffic"). ``bench/evaluate/fair-share-before.yaml`` keeps them, so this test fails if they
come back: it also checks that they lose the runs here.
"""

from __future__ import annotations

from pathlib import Path

from simulation.matrix.cells import Cell
from simulation.matrix.evaluate import shipped_policies
from simulation.matrix.measure import capacity_of, run_cell
from simulation.run_cli import resolve_policy

REPO = Path(__file__).resolve().parents[4]
CELL = Cell("runs-short", "cpu-tiny", 2.0, 1)


def test_a_lone_tenants_runs_complete_under_fair_share_as_under_the_default() -> None:
    cap = capacity_of(CELL)
    policies = dict(shipped_policies())
    default = run_cell(CELL, policies["default"], cap)
    fair = run_cell(CELL, policies["fair-share"], cap)
    assert default.completed_per_s > 0
    assert fair.completed_per_s == default.completed_per_s
    assert fair.goodput_tps == default.goodput_tps
    assert fair.tenants["agents"] == default.tenants["agents"]
    # the settings the preset no longer has, judged as they were, with call-level
    # admission (the run book off on both sides): a third of the default's runs (0.33x)
    _, before = resolve_policy(str(REPO / "bench/evaluate/fair-share-before.yaml"))
    call_level = {"runs": {"enabled": False}}
    collapsed = run_cell(CELL, {**before, **call_level}, cap)
    plain = run_cell(CELL, {**policies["default"], **call_level}, cap)
    assert collapsed.completed_per_s < 0.5 * plain.completed_per_s
