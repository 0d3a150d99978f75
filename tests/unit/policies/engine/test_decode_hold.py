"""The decode hold: while the engines step slower than ``decode_slowdown_max`` times their
lightest recent batch, a tenant holding its weighted share of the tokens in flight adds no
sequence, so another tenant's decode gets back within the factor."""

from __future__ import annotations

from policies.engine.headroom import decode_allows
from policies.engine.scheduler import Ticket
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

HOLD = {"headroom": {"decode_slowdown_max": 1.5, "reserve_fraction": 0.0}}  # the hold alone


def _allows(
    slowdown: float | None,
    tokens: int,
    mine: int,
    *,
    n: int = 3,
    slots: float | None = 8,
    weight: float = 1,
    active: float = 2,
    most: float | None = 1.5,
) -> bool:
    return decode_allows(most, slowdown, tokens, mine, n, slots, weight, active)


def test_within_the_factor_or_unknown_nobody_is_held() -> None:
    assert _allows(1.4, 1000, 900)
    assert _allows(None, 1000, 900)
    assert _allows(9.0, 1000, 900, most=None)


def test_over_the_factor_the_tenant_holding_its_token_share_is_held() -> None:
    assert not _allows(1.6, 1000, 500)
    assert _allows(1.6, 1000, 499)
    assert _allows(1.6, 1000, 700, weight=3, active=4)  # a heavier weight, a larger share


def test_a_tenant_alone_is_never_held() -> None:
    assert _allows(5.0, 1000, 1000, active=1)


def test_a_tenant_alone_in_the_batch_is_held_at_its_share_of_the_slots() -> None:
    # another tenant is active with nothing in flight (its turns in between, or a mean
    # still showing a flood already gone): up to the tenant's share of the slots
    assert _allows(5.0, 164, 164, n=2)
    assert not _allows(5.0, 6000, 6000, n=4)
    assert _allows(5.0, 6000, 6000, n=4, slots=None)


def _slowed(clock: ManualClock, slowdown: float, **kw: object):  # type: ignore[no-untyped-def]
    return fleet(clock, backend(max_num_seqs=8, itl_s=0.003 * slowdown, itl_floor_s=0.003, **kw))


def _burst(s, clock, f, n: int) -> list[object]:  # type: ignore[no-untyped-def]
    return [s.submit(request(clock, tenant="hog", prompt=1500, output=256), f) for _ in range(n)]


def test_slowed_engine_keeps_the_long_sequences_out_and_lets_the_short_turn_in() -> None:
    clock = ManualClock()
    s = scheduler(clock, HOLD)
    slowed = _slowed(clock, 2.0)
    first = s.submit(request(clock, tenant="quiet", prompt=50, output=32), slowed)
    hog = _burst(s, clock, slowed, 6)
    assert isinstance(first, Ticket)
    # the hog's first long request is under its share of the tokens; the rest wait
    assert sum(isinstance(h, Ticket) for h in hog) == 1
    assert s.poll(slowed) == []
    turn = s.submit(request(clock, tenant="quiet", prompt=50, output=32), slowed)
    (out,) = [turn] if isinstance(turn, Ticket) else s.poll(slowed)
    assert isinstance(out, Ticket) and out.request.tenant == "quiet"
    # the engine is back within the factor: the batch fills again
    recovered = s.poll(_slowed(clock, 1.2))
    assert [t.request.tenant for t in recovered if isinstance(t, Ticket)] == ["hog"] * 5


def test_without_the_hold_the_slowed_engine_takes_the_whole_burst() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    slowed = _slowed(clock, 2.0)
    s.submit(request(clock, tenant="quiet", prompt=50, output=32), slowed)
    assert sum(isinstance(h, Ticket) for h in _burst(s, clock, slowed, 6)) == 6


def test_a_tenant_alone_runs_its_whole_burst_on_a_slowed_engine() -> None:
    clock = ManualClock()
    s = scheduler(clock, HOLD)
    assert sum(isinstance(h, Ticket) for h in _burst(s, clock, _slowed(clock, 3.0), 6)) == 6


def test_no_floor_yet_no_hold() -> None:
    clock = ManualClock()
    s = scheduler(clock, HOLD)
    unknown = fleet(clock, backend(max_num_seqs=8, itl_s=0.009))
    s.submit(request(clock, tenant="quiet", prompt=50, output=32), unknown)
    assert sum(isinstance(h, Ticket) for h in _burst(s, clock, unknown, 6)) == 6


def test_the_quiet_tenant_alone_in_the_batch_is_not_held_when_the_flood_has_gone() -> None:
    from policies.types import Ending, Outcome

    clock = ManualClock()
    s = scheduler(clock, HOLD)
    slowed = _slowed(clock, 3.0)  # the engine's mean still shows the flood
    (gone,) = _burst(s, clock, slowed, 1)
    assert isinstance(gone, Ticket)
    s.release(gone, Ending(Outcome.COMPLETED))  # the hog is still active, with nothing in flight
    turns = [
        s.submit(request(clock, tenant="quiet", prompt=50, output=32), slowed) for _ in range(3)
    ]
    assert all(isinstance(t, Ticket) for t in turns)


def test_the_flood_refills_only_its_slot_share_while_the_quiet_tenant_is_between_turns() -> None:
    from policies.types import Ending, Outcome

    clock = ManualClock()
    s = scheduler(clock, HOLD)
    slowed = _slowed(clock, 3.0)
    turn = s.submit(request(clock, tenant="quiet", prompt=50, output=32), slowed)
    assert isinstance(turn, Ticket)
    s.release(turn, Ending(Outcome.COMPLETED))  # the quiet tenant is between turns, still active
    assert sum(isinstance(h, Ticket) for h in _burst(s, clock, slowed, 6)) == 4  # 8 x 1/2


def test_at_exactly_the_factor_nobody_is_held() -> None:
    assert _allows(1.5, 1000, 900)


def test_a_tenant_alone_is_not_held_even_with_every_slot() -> None:
    assert _allows(5.0, 8000, 8000, n=8, active=1)
