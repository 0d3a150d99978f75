"""The frontier's judgement of noisy cells, on the shipped profiles' step time models: a
missed victim goal is held against a policy only where some policy could meet it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from emulator.profile import load_profile
from simulation.matrix import frontier
from simulation.matrix.guard import (
    OUTSIDE_FRONTIER,
    THROUGHPUT_FLOOR,
    VICTIM_CEILING,
    CellRow,
    TenantRow,
    frontier_gap,
    goals_missed,
    victim_frontier,
    victim_reachable,
)


def noisy_row(
    profile: str,
    clients: int,
    *,
    backends: int = 1,
    workload: str = "noisy-1500",
    victim_share: float = 0.5,
    noisy_share: float = 1.0,
) -> CellRow:
    """A noisy cell whose victim's TTFT p99 is 4x its value alone (the goal missed)."""
    tenants = {
        "victim": TenantRow(0.4, 0.1, 0.1, 0.1, victim_share * 100, 100.0, clients=2),
        "noisy": TenantRow(2.0, 1.0, 0.9, 0.9, noisy_share * 1000, 1000.0, clients=clients),
    }
    return CellRow(workload, profile, 2.0, backends, "p", 1.0, 1.0, tenants, noisy=True)


def assert_reached_by(table: list[frontier.Row], row: CellRow) -> None:
    """A weaker model, ``table``, would call the victim goal of ``row`` within reach."""
    noisy = row.tenants["noisy"]
    free = frontier.unlimited(table, clients=noisy.clients, backends=row.backends)
    best = frontier.best_share(table, THROUGHPUT_FLOOR * free.noisy_share)
    assert best is not None and best >= 1.0 / VICTIM_CEILING


def assert_excused(row: CellRow) -> None:
    assert victim_reachable(row) is False
    assert goals_missed(row, row) == [OUTSIDE_FRONTIER]


def test_a_missed_victim_goal_within_reach_is_held_against_the_policy() -> None:
    row = noisy_row("rx9070xt", 16, workload="noisy-short-stream")
    assert victim_reachable(row) is True
    assert goals_missed(row, row) == ["victim"]


def test_a_victim_goal_no_policy_can_reach_is_excused() -> None:
    row = noisy_row("mi300x", 256)
    assert_excused(row)
    # From the profile directly: on one engine the noisy tenant's tokens/s grow with the
    # sequences it runs, so the fewest that keep the do-no-harm floor are the best a policy
    # can do for the victim, and even then the victim's step is past the ceiling.
    p, shape = load_profile("mi300x"), frontier.Shape()

    def tps(k: int) -> float:
        return k / frontier.step_s(p, shape, 2, k)

    free = tps(256)
    fewest = next(k for k in range(257) if tps(k) >= THROUGHPUT_FLOOR * free)
    slowdown = frontier.step_s(p, shape, 2, fewest) / frontier.step_s(p, shape, 2, 0)
    assert slowdown > VICTIM_CEILING


def test_a_miss_where_the_default_met_the_goal_is_held_whatever_the_model_says() -> None:
    """The default meeting the goal in the cell shows it reachable at the default's
    goodput: a preset that misses it there is not excused by the frontier's model."""
    missed = noisy_row("mi300x", 256)  # 4x alone, out of reach on the model
    assert victim_reachable(missed) is False
    met = replace(missed, policy="default", tenants={**missed.tenants})
    met.tenants["victim"] = replace(missed.tenants["victim"], ttft_p99_s=0.3)  # 3x alone
    assert goals_missed(met, met) == []
    assert goals_missed(missed, met) == ["victim"]
    assert goals_missed(missed, missed) == [OUTSIDE_FRONTIER]  # nobody met it: excused


def test_a_second_backend_brings_the_goal_within_reach() -> None:
    """The noisy tenant's sequences can run on the victim-free backend."""
    assert victim_reachable(noisy_row("mi300x", 64, workload="noisy-3000")) is False
    assert victim_reachable(noisy_row("mi300x", 64, workload="noisy-3000", backends=2)) is True


def test_the_flood_s_prefill_steps_put_the_victim_s_tail_out_of_reach() -> None:
    """On rx9070xt a 1,500-token prompt holds the engine for 0.32 s: the mean frontier
    reaches the goal, but the victim's p99 lands in those steps, whatever the batch."""
    row = noisy_row("rx9070xt", 16)
    table = victim_frontier(row)
    assert table is not None
    assert_reached_by(table, row)
    assert_excused(row)


def test_the_tail_wait_is_the_rest_of_the_prefill_step_the_p99_arrival_lands_in() -> None:
    p = load_profile("cpu-tiny")
    shape = frontier.Shape(noisy_prompt=1500, noisy_output=256)
    (step,) = frontier.prefill_steps_s(p, shape)
    assert step == pytest.approx(p.engine.step_time.duration(1500, 0, 0))
    # 4 sequences on 0.01 s steps begin 4 / 0.01 / 256 prompts a second
    starts = 4 / 0.01 / 256
    row = frontier.Row(k=4, step_s=0.01, victim_share=1.0, noisy_share=1.0)
    share = starts * step
    expected = step * (1 - frontier.TAIL / share)
    assert frontier.tail_wait_s(p, shape, row) == pytest.approx(expected, rel=1e-6)
    assert frontier.tail_wait_s(p, shape, frontier.Row(0, 0.01, 1.0, 1.0)) == 0.0
    # so rare that fewer than 1 % of arrivals meet one: no wait in the p99
    rare = frontier.Row(k=1, step_s=100.0, victim_share=1.0, noisy_share=1.0)
    assert frontier.tail_wait_s(p, shape, rare) == 0.0


def test_a_prompt_longer_than_the_engine_s_batch_is_prefilled_in_chunks() -> None:
    p = load_profile("cpu-tiny")
    chunk = p.engine.max_num_batched_tokens
    shape = frontier.Shape(noisy_prompt=chunk + 100)
    steps = frontier.prefill_steps_s(p, shape)
    model = p.engine.step_time
    assert steps == [model.duration(chunk, 0, 0), model.duration(100, 0, 0)]


def test_the_step_wait_is_most_of_a_decode_step_and_then_the_victim_s_own() -> None:
    p = load_profile("mi300x")
    shape = frontier.Shape(noisy_prompt=64, noisy_output=256)
    model = p.engine.step_time
    row = frontier.Row(k=100, step_s=1.0, victim_share=1.0, noisy_share=1.0)
    decode = model.duration(0, 100, 100 * 64)
    own = model.duration(50, 101, 100 * 64 + 50)
    assert frontier.step_wait_s(p, shape, row) == pytest.approx((1 - frontier.TAIL) * decode + own)
    assert frontier.step_wait_s(p, shape, frontier.Row(0, 1.0, 1.0, 1.0)) == 0.0


def test_a_decode_batch_beside_the_victim_puts_its_tail_out_of_reach() -> None:
    """mi300x, short streamed noisy prompts on 2 backends, the victim 32 ms alone: the
    prefill tail lets the goal through, but whichever backend the victim is on decodes so
    many noisy sequences (to keep the flood's throughput) that one step and its own are
    past 3x its time alone."""
    tenants = {
        "victim": TenantRow(0.17, 0.032, 0.01, 0.04, 50.0, 100.0, clients=2),
        "noisy": TenantRow(0.2, 0.5, 0.9, 0.9, 1000.0, 1000.0, clients=400),
    }
    row = CellRow("noisy-short-stream", "mi300x", 2.0, 2, "p", 1.0, 1.0, tenants, noisy=True)
    table = victim_frontier(row)
    assert table is not None
    p, shape = load_profile("mi300x"), frontier.Shape(noisy_prompt=64)
    prefill_only = [
        replace(
            r, victim_share=min(r.victim_share, 0.032 / (0.032 + frontier.tail_wait_s(p, shape, r)))
        )
        for r in table
    ]
    assert_reached_by(prefill_only, row)
    assert_excused(row)


def test_the_tail_caps_a_row_s_victim_share_at_its_ttft_ratio() -> None:
    p, shape = load_profile("rx9070xt"), frontier.Shape()
    table = frontier.rows(p, shape, clients=8)
    alone = 0.05
    for plain, capped in zip(table, frontier.tail_limited(table, p, shape, alone), strict=True):
        wait = frontier.tail_wait_s(p, shape, plain)
        steps = frontier.step_wait_s(p, shape, plain)
        cap = min(alone / (alone + wait), alone / max(alone, steps))
        assert capped.victim_share == pytest.approx(min(plain.victim_share, cap))
        assert (capped.k, capped.noisy_share) == (plain.k, plain.noisy_share)
    assert any(
        c.victim_share < t.victim_share
        for t, c in zip(table, frontier.tail_limited(table, p, shape, alone), strict=True)
    )


def test_the_gap_is_how_far_the_point_lies_below_the_frontier() -> None:
    table = victim_frontier(noisy_row("rx9070xt", 16))
    assert table is not None
    noisy = table[len(table) // 2].noisy_share
    best = frontier.best_share(table, noisy)
    assert best is not None
    on = noisy_row("rx9070xt", 16, noisy_share=noisy, victim_share=best)
    below = noisy_row("rx9070xt", 16, noisy_share=noisy, victim_share=best - 0.25)
    assert frontier_gap(on) == pytest.approx(0.0)
    assert frontier_gap(below) == pytest.approx(0.25)


def test_cells_that_are_not_noisy_are_not_judged_on_the_frontier() -> None:
    row = CellRow("chat", "cpu-tiny", 2.0, 1, "p", 1.0, 1.0, {}, noisy=False)
    assert victim_reachable(row) is None
    assert frontier_gap(row) is None
