"""Placement's exact amounts: the loads and per-tenant counts dispatch and release leave, the
backend a pick lands on (room bounds, sessions, the prefill bound), the pre-check of room,
and the headroom share, on two backends that differ in slots, load and prefill rate, with
tenants of different weights (one below 1)."""

from __future__ import annotations

from typing import Any

from policies.backends import BackendsSnapshot, BackendView
from policies.contracts import BackendLoad
from policies.engine.placement import Placement
from policies.engine.routing import affinity_score
from policies.registry import build_policy
from policies.types import RequestInfo
from tests.unit.policies.helpers import ManualClock, backend, queued_entry, request

FIXED = {"limit": {"type": "fixed", "parameters": {"max_in_flight": 3}}}
SIGNALS = {"limit": {"type": "server_signals"}}
NO_PREFILL = {"prefill_backlog": {"enabled": False}}
QUARTER = {"headroom": {"reserve_fraction": 0.25, "hold_arrivals": True}}


def _placement(clock: ManualClock, raw: dict[str, Any], *views: BackendView) -> Placement:
    policy = build_policy(raw)
    place = Placement(policy, policy.limit.new_state(), clock.now)
    place.observe(BackendsSnapshot(at=clock.now, backends=views), clock.now)
    return place


def _two(**kw_b2: Any) -> tuple[BackendView, BackendView]:
    return backend("b1", max_num_seqs=3), backend("b2", max_num_seqs=5, **kw_b2)


def _a_twice_b_once(
    clock: ManualClock, a2_on: str
) -> tuple[Placement, RequestInfo, RequestInfo, RequestInfo]:
    """On ``_two``: tenant a's first request (120 tokens) taken by b1, its second (30) by
    ``a2_on``, tenant b's (7) by b2."""
    place = _placement(clock, NO_PREFILL, *_two())
    a1, a2, b = request(clock, tenant="a"), request(clock, tenant="a"), request(clock, tenant="b")
    place.took("b1", a1, 120)
    place.took(a2_on, a2, 30)
    place.took("b2", b, 7)
    return place, a1, a2, b


def test_took_and_gave_back_count_requests_tokens_and_tenants_exactly() -> None:
    clock = ManualClock()
    place, a1, a2, b = _a_twice_b_once(clock, a2_on="b1")
    assert place.loads == {"b1": BackendLoad(2, 150), "b2": BackendLoad(1, 7)}
    assert place.tenant_in_flight == {"a": 2, "b": 1}
    left = place.gave_back("b1", a1, 120)
    assert left is place.loads["b1"] and left == BackendLoad(1, 30)
    assert place.tenant_in_flight == {"a": 1, "b": 1}
    place.gave_back("b1", a2, 30)
    assert place.tenant_in_flight == {"b": 1}  # a tenant with none left leaves the map
    assert place.gave_back("b2", b, 7) == BackendLoad(0, 0)
    assert place.tenant_in_flight == {}


def test_limits_reports_each_backends_slots() -> None:
    clock = ManualClock()
    place = _placement(clock, SIGNALS, *_two())
    assert place.limits() == {"b1": 3.0, "b2": 5.0}
    assert _placement(clock, FIXED, *_two()).limits() == {"b1": 3.0, "b2": 3.0}


def test_pick_takes_the_least_loaded_backend_with_room_under_either_kind_of_limit() -> None:
    clock = ManualClock()
    for raw in (SIGNALS | NO_PREFILL, FIXED | NO_PREFILL):
        place = _placement(clock, raw, *_two())
        assert place.pick(request(clock)).name == "b1"  # type: ignore[union-attr]  # tie: name
        place.took("b1", request(clock), 50)
        assert place.pick(request(clock)).name == "b2"  # type: ignore[union-attr]
        place.took("b2", request(clock), 80)
        assert place.pick(request(clock)).name == "b1"  # type: ignore[union-attr]
        assert place.pick(request(clock, model="other")) is None


def test_a_new_snapshot_with_other_backends_replaces_the_memo() -> None:
    clock = ManualClock()
    place = _placement(clock, NO_PREFILL, backend("b1", max_num_seqs=3))
    assert place.pick(request(clock)).name == "b1"  # type: ignore[union-attr]
    clock.advance(1.0)
    place.observe(
        BackendsSnapshot(at=clock.now, backends=(backend("b9", max_num_seqs=2),)), clock.now
    )
    assert place.pick(request(clock)).name == "b9"  # type: ignore[union-attr]
    assert place.limits() == {"b9": 2.0}


def test_room_now_is_the_pick_and_whether_room_remains_after_it() -> None:
    clock = ManualClock()
    place = _placement(clock, NO_PREFILL, backend("b1", max_num_seqs=2))
    best, spare = place.room_now({"m": 4})
    assert isinstance(best, BackendView) and best.name == "b1" and spare is True
    place.took("b1", request(clock), 10)
    best, spare = place.room_now({"m": 1})
    assert isinstance(best, BackendView) and best.name == "b1" and spare is False  # 1 + 1 = 2
    place.took("b1", request(clock), 10)
    assert place.room_now({"m": 1}) == (False, False)
    assert place.room_now({"m": 1, "other": 2}) == (True, True)  # each pick decides
    assert place.room_now({}) == (True, True)


def test_room_now_without_room_bounds_asks_the_limit() -> None:
    clock = ManualClock()
    place = _placement(clock, FIXED | NO_PREFILL, backend("b1"))
    assert place.room_now({"m": 1}) == (True, True)
    for _ in range(3):
        place.took("b1", request(clock), 10)
    assert place.room_now({"m": 1}) == (False, True)


def _prefill_fleet(clock: ManualClock) -> Placement:
    """b1 prefills 1,000 tokens/s and b2 4,000 (the engines' own rates): bounds of 250 and
    1,000 prompt tokens at the default 0.25 s target."""
    return _placement(
        clock,
        SIGNALS,
        backend("b1", max_num_seqs=8, prefill_tokens_per_s=1000.0),
        backend("b2", max_num_seqs=4, prefill_tokens_per_s=4000.0),
    )


def test_a_new_snapshot_gives_the_prefill_bound_each_engines_rate() -> None:
    clock = ManualClock()
    place = _prefill_fleet(clock)
    assert place.prefill is not None
    assert (place.prefill.bound("b1"), place.prefill.bound("b2")) == (250.0, 1000.0)


def test_pick_passes_over_a_backend_whose_prefill_backlog_is_full() -> None:
    clock = ManualClock()
    place = _prefill_fleet(clock)
    assert place.prefill is not None
    place.took("b1", request(clock, prompt=200), 300)  # b1 pending 200 of 250
    place.took("b2", request(clock, prompt=900), 1000)  # b2 pending 900 of 1,000: more tokens
    assert place.prefill.pending_tokens() == {"b1": 200, "b2": 900}
    assert place.pick(request(clock, prompt=40)).name == "b1"  # type: ignore[union-attr]
    assert place.pick(request(clock, prompt=60)).name == "b2"  # type: ignore[union-attr]
    assert place.pick(request(clock, prompt=101)) is None
    assert place.prefill_refused(request(clock, prompt=101))  # room, but not for the prompt
    assert not place.prefill_refused(request(clock, model="other"))


def test_a_session_away_from_a_full_prefill_backlog_goes_to_the_other_backend() -> None:
    clock = ManualClock()
    place = _prefill_fleet(clock)
    place.took("b1", request(clock, prompt=200), 300)  # b1 admits 50 more prompt tokens
    place.took("b2", request(clock, prompt=980), 1000)  # b2 admits 20 more
    homes = {"b1": "", "b2": ""}
    for n in range(40):
        sid = f"s{n}"
        home = place.pick(request(clock, prompt=1, session_id=sid))
        assert home is not None
        homes[home.name] = homes[home.name] or sid
    assert all(homes.values())  # a session with each home
    assert place.pick(request(clock, prompt=40, session_id=homes["b1"])).name == "b1"  # type: ignore[union-attr]
    assert place.pick(request(clock, prompt=40, session_id=homes["b2"])).name == "b1"  # type: ignore[union-attr]
    assert place.pick(request(clock, prompt=60, session_id=homes["b1"])) is None


def test_a_prefill_the_rate_says_has_ended_lets_the_next_prompt_in() -> None:
    clock = ManualClock()
    place = _prefill_fleet(clock)
    assert place.prefill is not None
    place.took("b1", request(clock, prompt=200), 300)  # done at +0.2 s at 1,000 tokens/s
    place.took("b2", request(clock, prompt=900), 1000)  # done at +0.225 s at 4,000 tokens/s
    big = request(clock, prompt=240)
    assert place.pick(big) is None
    clock.advance(0.21)
    place.observe(place.view.fleet, clock.now)
    assert place.pick(big).name == "b1"  # type: ignore[union-attr]
    assert place.prefill.pending_tokens() == {"b1": 0, "b2": 900}


def test_prefill_admits_after_bringing_the_estimate_up_to_now() -> None:
    clock = ManualClock()
    place = _prefill_fleet(clock)
    b1 = place.view.get("b1")
    assert b1 is not None
    place.took("b1", request(clock, prompt=200), 300)
    big = request(clock, prompt=240)
    assert place.prefill_admits(b1, big) is False
    clock.advance(0.21)
    place.observe(place.view.fleet, clock.now)
    assert place.prefill_admits(b1, big) is True
    off = _placement(clock, SIGNALS | NO_PREFILL, backend("b1", max_num_seqs=8))
    assert off.prefill_admits(b1, big) is True and off.prefill_refused(big) is False


def test_release_ends_the_requests_prefill() -> None:
    clock = ManualClock()
    place = _prefill_fleet(clock)
    assert place.prefill is not None
    first, second = request(clock, prompt=200), request(clock, prompt=30)
    place.took("b1", first, 300)
    place.took("b1", second, 40)
    place.gave_back("b1", second, 40)
    assert place.prefill.pending_tokens() == {"b1": 200, "b2": 0}
    place.took("b1", second, 40)
    place.gave_back("b1", second, 40, completed=True)  # finished: all before it prefilled
    assert place.prefill.pending_tokens() == {"b1": 0, "b2": 0}


def test_a_swap_keeps_the_pending_prompts_under_the_new_target() -> None:
    clock = ManualClock()
    place = _prefill_fleet(clock)
    kept = place.prefill
    assert kept is not None
    place.took("b1", request(clock, prompt=200), 300)
    policy = build_policy({"prefill_backlog": {"ttft_target_s": 0.5}})
    place.bind(policy, policy.limit.new_state())
    assert place.prefill is kept and kept.pending_tokens() == {"b1": 200, "b2": 0}
    assert kept.bound("b1") == 500.0
    place.bind(build_policy(NO_PREFILL), None)
    assert place.prefill is None
    assert not place.prefill_refused(request(clock, prompt=10**6))
    place.bind(policy, None)
    assert place.prefill is not None and place.prefill.pending_tokens() == {}


def test_headroom_is_on_only_with_a_reserve() -> None:
    clock = ManualClock()
    assert _placement(clock, QUARTER, *_two()).headroom_on()
    assert _placement(clock, {}, *_two()).headroom_on()  # the default keeps a reserve
    off = {"headroom": {"reserve_fraction": 0.0}}
    assert not _placement(clock, off, *_two()).headroom_on()


def _hog(place: Placement, clock: ManualClock, b1: int, b2: int) -> None:
    for name, n in (("b1", b1), ("b2", b2)):
        for _ in range(n):
            place.took(name, request(clock, tenant="hog"), 10)


def test_headroom_reserves_a_quarter_of_both_backends_slots() -> None:
    """3 + 5 = 8 slots, 2 reserved: with 5 taken anyone may take the 6th; with 6 taken only
    a tenant under its share (8 x its weight / the active weights) plus the 2 may."""
    clock = ManualClock()
    place = _placement(clock, QUARTER | NO_PREFILL, *_two())
    place.active.touch("hog", 1.0, clock.now)
    place.active.touch("other", 1.0, clock.now)
    _hog(place, clock, 1, 4)
    assert place.may_take(request(clock, tenant="hog"))  # 8 - 5 - 1 = 2 >= 2 reserved
    _hog(place, clock, 1, 0)
    hog = request(clock, tenant="hog")
    assert not place.may_take(hog)  # 6: a share of 8 x 1 / 2 (itself and "other") + 2
    assert not place.allow(queued_entry(1, clock.now, 5.0, tenant="hog"))
    assert place.may_take(request(clock, tenant="new"))


def test_headroom_shares_follow_the_weights_seen_and_asked() -> None:
    """Active weights 1.5 + 0.5 (light, asking): light's share is 8 x 0.5 / 2.0 = 2 slots,
    and it may hold up to that plus the 2 reserved."""
    clock = ManualClock()
    place = _placement(clock, QUARTER | NO_PREFILL, *_two())
    place.active.touch("hog", 1.5, clock.now)
    _hog(place, clock, 1, 2)
    light = request(clock, tenant="light", weight=0.5)
    for name in ("b1", "b2", "b2"):
        place.took(name, light, 10)
    assert place.may_take(light)  # 6 of 8 taken, 2 reserved: 3 < 4
    place.took("b2", light, 10)
    assert not place.may_take(light)  # 4 < 4 fails
    place.active.touch("light", 0.5, clock.now)  # now seen: its weight is in the total already
    assert not place.may_take(request(clock, tenant="light", weight=4.0))  # the seen 0.5 counts


def test_headroom_share_of_a_seen_tenant_is_not_counted_twice() -> None:
    """Active weights 1 + 1: a share of 4 of the 8 slots, 6 with the 2 reserved (counted
    twice, 2.67 + 2 = 4.67; the asker alone, 8 + 2)."""
    clock = ManualClock()
    place = _placement(clock, QUARTER | NO_PREFILL, *_two())
    place.active.touch("hog", 1.0, clock.now)
    place.active.touch("a", 1.0, clock.now)
    _hog(place, clock, 0, 1)
    for name in ("b1", "b1", "b2", "b2", "b2"):
        place.took(name, request(clock, tenant="a"), 10)
    assert place.may_take(request(clock, tenant="a"))  # 5 < 6
    place.took("b1", request(clock, tenant="a"), 10)
    assert not place.may_take(request(clock, tenant="a"))  # 6 < 6 fails


def test_headroom_share_of_a_light_newcomer_may_be_below_one_slot() -> None:
    """A newcomer of weight 0.125 beside two tenants of weight 1: a share of 8 x 0.125 /
    2.125 = 0.47 slots, 2.47 with the 2 reserved. Holding 2, it may still take one; holding
    3, it may not."""
    clock = ManualClock()
    place = _placement(clock, QUARTER | NO_PREFILL, *_two())
    place.active.touch("hog", 1.0, clock.now)
    place.active.touch("other", 1.0, clock.now)
    _hog(place, clock, 1, 3)
    light = request(clock, tenant="light", weight=0.125)
    place.took("b1", light, 10)
    place.took("b2", light, 10)
    assert place.may_take(light)
    place.took("b1", light, 10)
    assert not place.may_take(light)


def test_headroom_does_nothing_without_a_slot_count() -> None:
    clock = ManualClock()
    place = _placement(clock, QUARTER | NO_PREFILL, backend("b1", max_num_seqs=3), backend("b2"))
    place.active.touch("hog", 1.0, clock.now)
    _hog(place, clock, 3, 3)
    assert place.may_take(request(clock, tenant="hog"))


HOLD = {"headroom": {"decode_slowdown_max": 1.5}} | NO_PREFILL


def _hold_allows(
    clock: ManualClock, *slowdowns: tuple[float | None, float | None], quiet: int = 100
) -> bool:
    """Whether the decode hold lets ``hog`` (300 estimated tokens in flight beside the
    ``quiet`` tenant's, who is active too) add a request, on one backend per
    ``(itl_s, itl_floor_s)``."""
    views = [
        backend(f"b{n}", max_num_seqs=8, itl_s=itl, itl_floor_s=floor)
        for n, (itl, floor) in enumerate(slowdowns, 1)
    ]
    place = _placement(clock, HOLD, *views)
    place.active.touch("quiet", 1.0, clock.now)
    place.active.touch("hog", 1.0, clock.now)
    place.took("b1", request(clock, tenant="quiet"), quiet)
    place.took("b1", request(clock, tenant="hog"), 300)
    return place.may_take(request(clock, tenant="hog"))


def test_the_decode_hold_weighs_the_mean_slowdown_of_the_models_backends() -> None:
    clock = ManualClock()
    assert _hold_allows(clock, (0.002, 0.002), (0.0028, 0.002))  # mean 1.2: nobody held
    assert not _hold_allows(clock, (0.002, 0.002), (0.0044, 0.002))  # mean 1.6 > 1.5
    assert _hold_allows(clock, (0.002, 0.002), (0.004, 0.002))  # mean 1.5: not over the factor
    assert _hold_allows(clock, (0.0028, 0.002), (0.002, 0.002))  # either order
    assert not _hold_allows(clock, (0.0044, 0.002), (0.002, 0.002))
    assert not _hold_allows(clock, (0.0032, 0.002), (0.0032, 0.002), (0.0032, 0.002))  # 1.6


def test_a_backend_without_a_step_floor_is_left_out_of_the_mean_slowdown() -> None:
    """A floor of 0.0 (no batch measured light enough yet) or none at all says nothing: the
    mean is of the other backends', and with none left nobody is held."""
    clock = ManualClock()
    assert not _hold_allows(clock, (0.0044, 0.002), (0.002, 0.002), (0.05, 0.0))  # mean 1.6
    assert not _hold_allows(clock, (0.0044, 0.002), (0.002, 0.002), (0.05, None))
    assert not _hold_allows(clock, (0.0044, 0.002), (0.002, 0.002), (None, 0.002))
    assert _hold_allows(clock, (0.05, 0.0))
    assert _hold_allows(clock, (0.05, 0.0), (0.05, None), (None, 0.002))
    assert not _hold_allows(clock, (0.05, 0.0), (0.0044, 0.002))  # 2.2 alone


def test_tenant_tokens_follow_dispatch_release_and_a_new_dispatch_after_a_full_release() -> None:
    clock = ManualClock()
    place, a1, a2, b = _a_twice_b_once(clock, a2_on="b2")
    assert place.tenant_tokens == {"a": 150, "b": 7}
    place.gave_back("b1", a1, 120)
    assert place.tenant_tokens == {"a": 30, "b": 7}
    place.gave_back("b2", a2, 30)
    assert place.tenant_tokens == {"b": 7}  # none left: the tenant leaves the map
    a3 = request(clock, tenant="a")
    place.took("b1", a3, 5)
    assert place.tenant_tokens == {"a": 5, "b": 7}  # counted afresh, nothing carried over
    place.gave_back("b1", a3, 5)
    place.gave_back("b2", b, 7)
    assert place.tenant_tokens == {}


def _session(first: str, second: str, third: str) -> str:
    """A session id whose backends rank ``first``, ``second``, ``third`` (``home_backend``'s
    order: the home, then the home among the other two)."""
    for n in range(10_000):
        sid = f"s{n}"
        scores = [affinity_score(sid, name) for name in (first, second, third)]
        if scores[0] > scores[1] > scores[2]:
            return sid
    raise AssertionError("no such session id")


def _three_prefill(clock: ManualClock, home_slots: int) -> Placement:
    """b1, b2 and b3 prefill 1,000 tokens/s each (a bound of 250 prompt tokens); b3 has
    240 pending, b2 carries more tokens than b1."""
    place = _placement(
        clock,
        SIGNALS,
        backend("b1", max_num_seqs=8, prefill_tokens_per_s=1000.0),
        backend("b2", max_num_seqs=8, prefill_tokens_per_s=1000.0),
        backend("b3", max_num_seqs=home_slots, prefill_tokens_per_s=1000.0),
    )
    place.took("b3", request(clock, prompt=240), 300)
    place.took("b2", request(clock, prompt=10), 100)
    return place


def test_a_session_whose_home_the_prefill_bound_refuses_goes_to_its_next_home() -> None:
    """The home (b3) has a slot but not the prefill room: the session goes to the home among
    the backends that admit it (b2), not to the least loaded (b1)."""
    clock = ManualClock()
    place = _three_prefill(clock, home_slots=8)
    sid = _session("b3", "b2", "b1")
    assert place.pick(request(clock, prompt=40, session_id=sid)).name == "b2"  # type: ignore[union-attr]
    assert place.pick(request(clock, prompt=10, session_id=sid)).name == "b3"  # type: ignore[union-attr]


def test_a_session_whose_home_is_full_goes_to_the_least_loaded_that_admits_it() -> None:
    """The home (b3) has no slot (and no prefill room): the least loaded backend (b1), which
    admits the prompt, even though b2 ranks above it for the session."""
    clock = ManualClock()
    place = _three_prefill(clock, home_slots=1)
    sid = _session("b3", "b2", "b1")
    assert place.pick(request(clock, prompt=40, session_id=sid)).name == "b1"  # type: ignore[union-attr]
    assert place.pick(request(clock, prompt=10, session_id=sid)).name == "b1"  # type: ignore[union-attr]


SLOWED = {"max_num_seqs": 8, "itl_s": 0.004, "itl_floor_s": 0.002}  # twice its floor: over 1.5


def test_the_hold_weighs_every_token_in_flight() -> None:
    clock = ManualClock()
    assert not _hold_allows(clock, (0.004, 0.002), quiet=1)  # 300 of 301: over its half
    assert not _hold_allows(clock, (0.004, 0.002), quiet=300)  # 300 of 600: its half


def test_a_tenant_with_nothing_in_flight_is_not_held_by_the_tokens_of_others() -> None:
    clock = ManualClock()
    place = _placement(clock, HOLD, backend("b1", **SLOWED))
    place.active.touch("quiet", 1.0, clock.now)
    place.took("b1", request(clock, tenant="quiet"), 2)
    assert place.may_take(request(clock, tenant="new"))  # 0 of 2: under its half (1)


def test_a_tenant_seen_before_the_active_window_no_longer_counts() -> None:
    clock = ManualClock()
    place = _placement(clock, HOLD, backend("b1", **SLOWED))
    place.active.touch("quiet", 1.0, clock.now)
    place.active.touch("hog", 1.0, clock.now)
    place.took("b1", request(clock, tenant="quiet"), 100)
    place.took("b1", request(clock, tenant="hog"), 300)
    assert not place.may_take(request(clock, tenant="hog"))  # quiet is active: held
    clock.advance(20.0)
    place.active.touch("hog", 1.0, clock.now)
    clock.advance(10.5)  # quiet was seen 30.5 s ago: past the 30 s window
    place.observe(place.view.fleet, clock.now)
    assert place.may_take(request(clock, tenant="hog"))  # nobody else to protect


def test_a_backend_that_reports_no_slots_takes_no_one() -> None:
    clock = ManualClock()
    reserve = _placement(clock, QUARTER | NO_PREFILL, backend("b1", max_num_seqs=0))
    reserve.active.touch("quiet", 1.0, clock.now)  # (alone, a tenant is never held)
    assert not reserve.may_take(request(clock, tenant="new"))
    held = _placement(clock, HOLD, backend("b1", **(SLOWED | {"max_num_seqs": 0})))
    held.active.touch("quiet", 1.0, clock.now)
    assert not held.may_take(request(clock, tenant="new"))  # its share of no slots
