"""Headroom's exact amounts: the running sum of active weights as tenants come, come back
with another weight and leave the window (at its very edge), and the slot rule at each of
its boundaries (the reserve, rounded up; the share, weights below 1)."""

from __future__ import annotations

from policies.engine.headroom import ActiveTenants, may_take_slot
from policies.engine.headroom_params import HeadroomParams

OFF = HeadroomParams(reserve_fraction=0.0)
RESERVE_3_OF_8 = HeadroomParams(reserve_fraction=0.3)  # ceil(2.4) = 3 slots of 8


def test_active_weights_sum_and_a_comeback_replaces_the_weight() -> None:
    active = ActiveTenants()
    assert active.total_weight == 0.0 and active.weight("a") is None
    active.touch("a", 0.5, now=0.0)
    active.touch("b", 1.5, now=4.0)
    assert active.total_weight == 2.0
    active.touch("a", 0.75, now=6.0)
    assert active.total_weight == 2.25
    assert (active.weight("a"), active.weight("b"), active.weight("c")) == (0.75, 1.5, None)


def test_tenants_leave_the_window_only_once_their_last_touch_is_older_than_it() -> None:
    active = ActiveTenants()
    active.touch("a", 0.5, now=0.0)
    active.touch("b", 1.5, now=4.0)
    active.touch("a", 0.75, now=6.0)
    active.expire(now=10.0, window_s=10.0)  # a's first touch is exactly at the edge: stays
    assert active.total_weight == 2.25
    active.expire(now=10.5, window_s=10.0)  # a's first touch left; a was back at 6
    assert (active.weight("a"), active.total_weight) == (0.75, 2.25)
    active.expire(now=16.0, window_s=10.0)  # b left; a's touch at 6 is at the edge
    assert (active.weight("a"), active.weight("b"), active.total_weight) == (0.75, None, 0.75)
    active.expire(now=16.5, window_s=10.0)
    assert (active.weight("a"), active.total_weight) == (None, 0.0)
    active.touch("c", 0.25, now=17.0)
    assert active.total_weight == 0.25


def test_no_reserve_no_slot_count_or_no_active_weight_lets_anyone_take_the_last_slot() -> None:
    assert may_take_slot(OFF, 4, 4, 4, 1.0, 2.0)  # 4 of 4 taken by a tenant with half the weight
    assert may_take_slot(RESERVE_3_OF_8, 4, 4, 4, 1.0, 0.0)
    assert may_take_slot(RESERVE_3_OF_8, None, 4, 4, 1.0, 2.0)


def test_the_reserve_is_rounded_up_and_starts_when_fewer_would_stay_free() -> None:
    # 8 - 4 - 1 = 3 stay free: not yet in the reserve, even for a tenant far past its share
    assert may_take_slot(RESERVE_3_OF_8, 8, 4, 4, tenant_weight=0.5, active_weight=2.0)
    # 8 - 5 - 1 = 2 would stay free: only a tenant under its share (8 x 0.5 / 2 = 2) plus
    # the reserve (3) may
    assert not may_take_slot(RESERVE_3_OF_8, 8, 5, 5, tenant_weight=0.5, active_weight=2.0)
    assert may_take_slot(RESERVE_3_OF_8, 8, 5, 4, tenant_weight=0.5, active_weight=2.0)


def test_the_share_is_the_limit_times_the_weight_over_the_active_weights() -> None:
    # alone with a weight of 0.5 of an active 1.0: a share of 4 of the 8, 7 with the reserve
    assert not may_take_slot(RESERVE_3_OF_8, 8, 7, 7, tenant_weight=0.5, active_weight=1.0)
    assert may_take_slot(RESERVE_3_OF_8, 8, 7, 6, tenant_weight=0.5, active_weight=1.0)
    # 3 of 6 active: a share of 4 (with the weights multiplied it would be 144)
    assert not may_take_slot(RESERVE_3_OF_8, 8, 7, 7, tenant_weight=3.0, active_weight=6.0)


EIGHTH = HeadroomParams(reserve_fraction=0.125)  # 1 slot of 8


def test_a_tenant_just_over_its_share_among_alike_tenants_takes_the_last_slot() -> None:
    """Three tenants of one weight, 7 of 8 slots taken (3, 2, 2): the one holding 3 is over
    its share of 2.67 but not past it by the reserve (3.67), so it takes the 8th slot rather
    than leave it idle for the others; holding 4 it crowds them out and may not."""
    assert may_take_slot(EIGHTH, 8, 7, 3, tenant_weight=1.0, active_weight=3.0)
    assert not may_take_slot(EIGHTH, 8, 7, 4, tenant_weight=1.0, active_weight=3.0)


def test_a_flood_beside_a_tenant_holding_two_never_takes_the_last_slot() -> None:
    """Two tenants of one weight on 8 slots: with 7 taken the flood holds at least 5, its
    share (4) plus the reserve (1), while the other holds 2 or fewer."""
    for flood in (5, 6, 7):
        assert not may_take_slot(EIGHTH, 8, 7, flood, tenant_weight=1.0, active_weight=2.0)
    assert may_take_slot(EIGHTH, 8, 7, 2, tenant_weight=1.0, active_weight=2.0)


def test_on_four_slots_the_reserve_leaves_the_other_tenant_one_slot() -> None:
    """The price of the rule on a small engine: 4 slots, 1 reserved, two tenants of one
    weight. A tenant holding 2 (its share) may take a 4th slot beside the other's 1 (2 is
    under 2 + 1), so the other's second request waits for a slot to end."""
    assert may_take_slot(EIGHTH, 4, 3, 2, tenant_weight=1.0, active_weight=2.0)
    assert not may_take_slot(EIGHTH, 4, 3, 3, tenant_weight=1.0, active_weight=2.0)
