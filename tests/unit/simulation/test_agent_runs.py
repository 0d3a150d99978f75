"""The agent-run workload generator and the run metrics, with exact amounts."""

from __future__ import annotations

import random

import pytest

from emulator.profile import LengthComponent, LengthMixture, Profile
from simulation.agent_runs import RunPlan, RunWorkload, arrivals, capacity_runs_per_s
from simulation.engine_adapter import service_rate_bound_tps
from simulation.run_metrics import RunRecord, summarise_run_records


def fixed(tokens: int) -> LengthMixture:
    return LengthMixture(
        components=(LengthComponent(weight=1.0, min_tokens=tokens, max_tokens=tokens),)
    )


def test_a_run_is_a_plan_then_its_turns_and_a_fanned_turn_has_every_branch() -> None:
    w = RunWorkload(fixed(10), turns_min=3, turns_max=3, branch_prob=1.0, branches=4)
    plan = w.draw(7, 12.5, random.Random(1))
    assert (plan.index, plan.arrival) == (7, 12.5)
    assert plan.steps == ((10,), (10, 10, 10, 10), (10, 10, 10, 10), (10, 10, 10, 10))
    assert len(plan.think_s) == 3  # between the four steps, none after the last
    assert (plan.calls, plan.branches, plan.tokens(5)) == (13, 4, 13 * 15)


def test_without_fan_out_every_step_is_one_call() -> None:
    w = RunWorkload(fixed(3), turns_min=1, turns_max=5, branch_prob=0.0, branches=4)
    plans = [w.draw(i, 0.0, random.Random(i)) for i in range(50)]
    assert all(p.branches == 1 for p in plans)
    assert {len(p.steps) for p in plans} == {2, 3, 4, 5, 6}  # the plan + 1..5 turns


def test_mean_calls_counts_the_plan_the_turns_and_the_expected_fan_out() -> None:
    w = RunWorkload(fixed(3), turns_min=2, turns_max=4, branch_prob=0.5, branches=3)
    assert w.mean_calls == 1 + 3 * (1 + 0.5 * 2)


def test_the_same_seed_draws_the_same_runs_at_any_rate() -> None:
    w = RunWorkload(fixed(5), branch_prob=0.5)
    slow, fast = arrivals(w, 0.1, 500.0, seed=3), arrivals(w, 0.3, 500.0, seed=3)
    assert arrivals(w, 0.1, 500.0, seed=3) == slow
    assert len(fast) > len(slow)
    assert [p.steps for p in fast[: len(slow)]] == [p.steps for p in slow]
    assert all(0.0 < p.arrival < 500.0 for p in fast)


def test_capacity_is_the_decode_bound_over_a_mean_runs_tokens(profile: Profile) -> None:
    w = RunWorkload(fixed(100), turns_min=1, turns_max=1, branch_prob=0.0)
    tokens_per_s = service_rate_bound_tps(profile) * profile.output_lengths.mean
    assert capacity_runs_per_s(profile, w) == pytest.approx(tokens_per_s / 200.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"turns_min": 0},
        {"turns_min": 3, "turns_max": 2},
        {"branch_prob": 1.5},
        {"branches": 0},
        {"hints": ("calls", "colour")},
    ],
)
def test_a_bad_workload_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RunWorkload(fixed(1), **bad)  # type: ignore[arg-type]


def test_run_metrics_on_a_tiny_case() -> None:
    records = [
        RunRecord(0, 5.0, 3, first_token=6.0, ended=40.0, completed=True, spent_tokens=300),
        RunRecord(1, 12.0, 3, first_token=20.0, ended=30.0, completed=True, spent_tokens=200),
        RunRecord(2, 15.0, 4, first_token=17.0, ended=135.0, spent_tokens=120, refusals=2),
        RunRecord(3, 18.0, 2, ended=40.0, refusals=5),  # refused until it gave up
        RunRecord(4, 99.0, 2, first_token=100.0, ended=101.0, completed=True, spent_tokens=9),
    ]
    s = summarise_run_records(records, 10.0, 30.0)  # runs 1, 2, 3 arrived inside
    assert (s.arrived, s.completed, s.never_started, s.refusals) == (3, 1, 1, 7)
    assert s.completed_rps == 1 / 20.0
    assert (s.p50_latency_s, s.p99_latency_s) == (18.0, 18.0)
    assert (s.wasted_tokens, s.wasted_share) == (120, 120 / 320)
    assert s.p99_first_call_wait_s == 8.0


def test_latency_percentiles_take_completed_runs_only() -> None:
    records = [
        RunRecord(i, 0.0, 1, first_token=1.0, ended=float(10 + i), completed=i % 2 == 0)
        for i in range(10)
    ]
    s = summarise_run_records(records, 0.0, 100.0)
    assert (s.completed, s.p50_latency_s, s.p99_latency_s) == (5, 14.0, 18.0)
    assert s.wasted_tokens == 0 and s.p99_first_call_wait_s == 1.0


def test_a_one_call_run_counts_one_call_and_one_branch() -> None:
    plan = RunPlan(0, 0.0, ((4,),), ())
    assert (plan.calls, plan.branches, plan.tokens(0)) == (1, 1, 4)
