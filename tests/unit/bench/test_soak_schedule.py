"""The soak ends by its deadline (``bench/soak/schedule.py``): rounds are planned against
the clock, the last one shortened or left out so that its longest drain and quiet point
still fit, and the clients' requests left open past the drain bound are cancelled."""

from __future__ import annotations

import asyncio

from bench.soak.schedule import Schedule, drained

MINUTE = 60.0


def _plan(duration_s: float, tail_s: float = 8.0) -> Schedule:
    return Schedule(duration_s, round_s=MINUTE, drain_s=10.0, settle_s=30.0, tail_s=tail_s)


def _run(plan: Schedule, drain: float, settle: float, tail: float) -> tuple[int, float]:
    """Walk the plan on a virtual clock from 0: each round's traffic, then a drain, a
    settle and a quiet point's tail of the given lengths. (rounds, when the soak ended)"""
    now, rounds = 0.0, 0
    while (until := plan.next_round(now)) is not None:
        rounds += 1
        now = until + drain + settle
        now += tail
        plan.quiet_point_tail(tail)
    return rounds, now


def test_a_two_hour_soak_with_seven_second_quiet_points_ends_by_its_deadline() -> None:
    rounds, ended = _run(_plan(120 * MINUTE), drain=0.2, settle=0.3, tail=7.0)
    # a round and its quiet point take 67.5 s: 106 fit before the last 48 s reserved (a
    # round per minute of the duration, 120, would end at 135 min)
    assert ended <= 120 * MINUTE
    assert rounds == 106


def test_the_soak_ends_by_its_deadline_even_when_every_drain_and_settle_take_their_bound() -> None:
    plan = _plan(30 * MINUTE)
    rounds, ended = _run(plan, drain=plan.drain_s, settle=plan.settle_s, tail=7.0)
    assert ended <= 30 * MINUTE
    assert rounds == 17, "16 full rounds, then one of the 40 s that fit"


def test_a_quiet_point_longer_than_the_first_guess_is_reserved_for_the_last_round() -> None:
    rounds, ended = _run(_plan(20 * MINUTE, tail_s=1.0), drain=0.0, settle=30.0, tail=25.0)
    assert ended <= 20 * MINUTE
    assert rounds == 10


def test_the_last_round_is_shortened_to_what_fits() -> None:
    plan = _plan(10 * MINUTE)
    fits = 10 * MINUTE - 10.0 - 30.0 - 8.0
    assert plan.next_round(fits - 45.0) == fits
    assert plan.next_round(fits - MINUTE) == fits
    assert plan.next_round(fits - 2 * MINUTE) == fits - MINUTE


def test_no_round_starts_when_less_than_half_a_round_fits() -> None:
    plan = _plan(10 * MINUTE)
    fits = 10 * MINUTE - 10.0 - 30.0 - 8.0
    assert plan.next_round(fits - 30.0) == fits
    assert plan.next_round(fits - 29.0) is None


async def test_a_client_still_open_at_the_drain_bound_is_cancelled() -> None:
    never = asyncio.Event()
    open_client = asyncio.create_task(never.wait())
    finished = asyncio.create_task(asyncio.sleep(0))
    await finished
    cancelled = await drained([open_client, finished], until=100.0, clock=lambda: 100.5)  # type: ignore[list-item]
    assert cancelled == 1
    assert open_client.cancelled()
    assert not finished.cancelled()


async def test_clients_that_end_within_the_drain_bound_are_waited_for() -> None:
    answer = asyncio.Event()
    ended: list[str] = []

    async def client() -> None:
        await answer.wait()
        ended.append("answered")

    task = asyncio.create_task(client())
    asyncio.get_running_loop().call_soon(answer.set)
    assert await drained([task], until=100.0, clock=lambda: 0.0) == 0
    assert ended == ["answered"]
