"""The matrix's judgement on synthetic rows: do-no-harm, goals, fair shares."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulation.matrix.guard import (
    CellRow,
    TenantRow,
    beaten_by,
    fair_shares,
    goals_missed,
    harms,
)
from simulation.matrix.report import summary


def row(
    policy: str = "default",
    *,
    goodput: float = 100.0,
    completed: float = 10.0,
    victim_ttft: float = 0.1,
    noisy_ttft: float = 1.0,
    **kw: object,
) -> CellRow:
    tenants = {
        "victim": TenantRow(victim_ttft, alone_p99_s=0.05, share=0.1, fair_share=0.1),
        "noisy": TenantRow(noisy_ttft, alone_p99_s=0.5, share=0.9, fair_share=0.9),
    }
    base = CellRow(
        "noisy-1500", "cpu-tiny", 2.0, 1, policy, goodput, completed, tenants, noisy=True
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_preset_equal_to_the_default_does_no_harm() -> None:
    assert harms(row("p"), row()) == []


@pytest.mark.parametrize(
    ("kw", "missed"),
    [
        ({"goodput": 94.0}, ["goodput"]),
        ({"completed": 9.4}, ["completed"]),
        ({"noisy_ttft": 1.11}, ["ttft"]),
        ({"victim_ttft": 0.111}, ["ttft"]),
        ({"goodput": 95.0, "completed": 9.5, "victim_ttft": 0.11}, []),
    ],
)
def test_each_do_no_harm_check_is_missed_past_its_bound(
    kw: dict[str, float], missed: list[str]
) -> None:
    assert harms(row("p", **kw), row()) == missed  # type: ignore[arg-type]


def test_the_victim_goal_is_three_times_its_value_alone() -> None:
    assert goals_missed(row(victim_ttft=0.15), row()) == []
    assert goals_missed(row(victim_ttft=0.151), row()) == ["victim"]


def test_agent_runs_must_complete_one_and_a_half_times_the_default_at_2x() -> None:
    default = row(runs=True, noisy=False)
    assert goals_missed(row("agent-runs", completed=14.9, runs=True, noisy=False), default) == [
        "runs"
    ]
    assert goals_missed(row("agent-runs", completed=15.0, runs=True, noisy=False), default) == []
    at_1x = row("agent-runs", completed=5.0, runs=True, noisy=False, load=1.0)
    assert goals_missed(at_1x, replace(default, load=1.0)) == []


def test_retry_after_accuracy_counts_at_overload_only() -> None:
    assert goals_missed(row(ra_returns=100, ra_admitted=89), row()) == ["retry-after"]
    assert goals_missed(row(ra_returns=100, ra_admitted=90), row()) == []
    assert goals_missed(row(ra_returns=100, ra_admitted=10, load=4.0), row()) == []


def test_two_equal_values_among_the_probes_refusals_are_synchronised() -> None:
    assert goals_missed(row(probe_refused=100, probe_distinct=99), row()) == ["synchronised"]
    assert goals_missed(row(probe_refused=100, probe_distinct=100), row()) == []


def test_fair_shares_give_a_light_tenant_its_demand_and_split_the_rest() -> None:
    demands = {"light": 10.0, "a": 100.0, "b": 100.0}
    shares = fair_shares(demands, dict.fromkeys(demands, 1.0), 110.0)
    assert shares == pytest.approx({"light": 10 / 110, "a": 50 / 110, "b": 50 / 110})


def test_fair_shares_follow_weights_when_everyone_is_backlogged() -> None:
    shares = fair_shares({"a": 100.0, "b": 100.0}, {"a": 3.0, "b": 1.0}, 100.0)
    assert shares == pytest.approx({"a": 0.75, "b": 0.25})


def test_the_default_is_beaten_only_by_a_preset_past_the_margin() -> None:
    better = row("fast", goodput=106.0)
    close = row("close", goodput=105.0, victim_ttft=0.091)
    quieter = row("quiet", victim_ttft=0.09)
    assert beaten_by(row(), [better, close, quieter]) == ["fast", "quiet"]
    assert beaten_by(row(), []) == []


def test_the_summary_counts_the_cells_where_a_preset_beats_the_default() -> None:
    other = replace(row(), workload="chat")
    rows = [row(), row("fast", goodput=200.0), other, replace(other, policy="fast")]
    assert summary(rows)[-1] == (
        "default against the best preset: within the margin in 1/2 cells; beaten in 1, "
        "by workload {'noisy-1500': 1}, by preset {'fast': 1}"
    )
