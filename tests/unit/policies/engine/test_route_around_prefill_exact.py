"""Routing around pending prefill (``headroom.route_around_prefill``): with two tenants
active, a request that would wait behind the prompts pending on the least-loaded backend
longer than its own prefill goes where the wait is shortest; exact clear times and the
boundary where the wait equals its own prefill (then load decides again). Rates of 4,096
tokens/s keep every time exact in binary."""

from __future__ import annotations

import math
from typing import Any

from policies.backends import BackendsSnapshot, BackendView
from policies.contracts import BackendLoad
from policies.engine.placement import Placement
from policies.engine.prefill_backlog import BackendPrefill, PrefillBacklog
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.engine.routing import around_prefill, home_backend
from policies.registry import build_policy
from tests.unit.policies.helpers import ManualClock, backend, request

ON = {"headroom": {"route_around_prefill": True}}
OFF = {"headroom": {"route_around_prefill": False}}


def _placement(clock: ManualClock, raw: dict[str, Any], b1_rate: float = 4096.0) -> Placement:
    """b1 and b2, 8 slots each; b1 prefills ``b1_rate`` tokens/s, b2 4,096."""
    policy = build_policy(raw)
    place = Placement(policy, policy.limit.new_state(), clock.now)
    views = (
        backend("b1", max_num_seqs=8, prefill_tokens_per_s=b1_rate),
        backend("b2", max_num_seqs=8, prefill_tokens_per_s=4096.0),
    )
    place.observe(BackendsSnapshot(at=clock.now, backends=views), clock.now)
    return place


def _flood_on_both(clock: ManualClock, place: Placement) -> None:
    """The snapshot of the issue's cells: the flood's earlier prompt on b2 is prefilled (its
    first token came back at 0.4 s) and decoding, 3,000 tokens in flight there; its new
    1,500-token prompt went to b1 at 0.5 s, 1,756 tokens in flight: b1 is the less loaded
    and the one still prefilling (until 0.5 + 1,500 / 4,096 = 0.8662109375 s). The quiet
    tenant's 64-token prompt takes 64 / 4,096 = 0.015625 s: b1 holds it longer than that
    until 0.8505859375 s."""
    place.active.touch("flood", 1.0, clock.now)
    place.active.touch("quiet", 1.0, clock.now)
    done = request(clock, tenant="flood", prompt=1500, output=256, stream=True)
    place.took("b2", done, 3000)
    clock.now = 0.4
    assert place.prefill is not None
    place.prefill.backend("b2").first_token(done.request_id, clock.now)
    clock.now = 0.5
    place.observe(place.view.fleet, clock.now)
    place.took("b1", request(clock, tenant="flood", prompt=1500, output=256, stream=True), 1756)


def _pick_at(clock: ManualClock, place: Placement, at: float, **kw: Any) -> str:
    clock.now = at
    place.observe(place.view.fleet, clock.now)
    picked = place.pick(request(clock, tenant="quiet", prompt=64, output=32, **kw))
    assert picked is not None
    return picked.name


def test_a_quiet_request_goes_to_the_backend_not_prefilling_the_flood() -> None:
    clock = ManualClock(0.0)
    place = _placement(clock, ON)
    _flood_on_both(clock, place)
    assert place.loads == {"b1": BackendLoad(1, 1756), "b2": BackendLoad(1, 3000)}
    assert _pick_at(clock, place, 0.6) == "b2"


def test_without_it_the_least_loaded_backend_takes_it_behind_the_flood() -> None:
    clock = ManualClock(0.0)
    place = _placement(clock, OFF)
    _flood_on_both(clock, place)
    assert _pick_at(clock, place, 0.6) == "b1"


def test_once_the_prompt_ahead_is_prefilled_load_decides_again() -> None:
    clock = ManualClock(0.0)
    place = _placement(clock, ON)
    _flood_on_both(clock, place)
    assert _pick_at(clock, place, 0.85) == "b2"
    assert _pick_at(clock, place, 0.8505859375) == "b1"  # waits its own prefill: load decides


def test_one_tenant_alone_is_placed_by_load() -> None:
    clock = ManualClock(0.0)
    place = _placement(clock, ON)
    _flood_on_both(clock, place)
    place.active.expire(clock.now + 31.0, 30.0)  # both left the window
    place.active.touch("quiet", 1.0, clock.now)
    assert _pick_at(clock, place, 0.6) == "b1"


def test_a_session_keeps_its_home() -> None:
    clock = ManualClock(0.0)
    place = _placement(clock, ON)
    _flood_on_both(clock, place)
    session = next(f"s{i}" for i in range(100) if _home(f"s{i}") == "b1")
    assert _pick_at(clock, place, 0.6, session_id=session) == "b1"


def _home(session: str) -> str:
    return home_backend(session, (backend("b1"), backend("b2"))).name


def test_every_backend_is_timed_at_the_fastest_rate_measured() -> None:
    """b1's own rate (1,024/s) would put its prompt's end at 0.5 + 1.46 s; at b2's 4,096/s,
    the one scale for both, the boundary is the same as with equal rates."""
    clock = ManualClock(0.0)
    place = _placement(clock, ON, b1_rate=1024.0)
    _flood_on_both(clock, place)
    assert _pick_at(clock, place, 0.85) == "b2"
    assert _pick_at(clock, place, 0.8505859375) == "b1"


def test_room_now_leaves_the_choice_to_pick_while_it_routes_around_prefill() -> None:
    clock = ManualClock(0.0)
    place = _placement(clock, ON)
    best, spare = place.room_now({"m": 1})
    assert isinstance(best, BackendView) and best.name == "b1" and spare is True  # one tenant
    place.active.touch("flood", 1.0, clock.now)
    place.active.touch("quiet", 1.0, clock.now)
    assert place.room_now({"m": 1}) == (True, True)


def test_clears_at_chains_the_pending_prompts_from_their_dispatch() -> None:
    b = BackendPrefill(20.0)
    assert b.clears_at(1000.0) == -math.inf
    b.dispatched("a", 500, 1.0, streamed=True)
    b.dispatched("b", 250, 1.2, streamed=True)  # starts when a ends: 1.5
    assert b.clears_at(1000.0) == 1.75
    b.dispatched("c", 100, 3.0, streamed=True)  # dispatched after: starts at its dispatch
    assert b.clears_at(1000.0) == 3.1
    b.first_token("a", 1.6)  # a done at 1.6: b starts there
    assert b.clears_at(1000.0) == 3.1
    assert BackendPrefill(20.0).clears_at(1.0) == -math.inf


def test_fastest_rate_is_the_highest_measured_among_the_named() -> None:
    backlog = PrefillBacklog(PrefillBacklogParams())
    assert backlog.fastest_rate(["b1", "b2"]) is None
    backlog.backend("b1").engine_rate = 1000.0
    backlog.backend("b2").engine_rate = 4000.0
    backlog.backend("b3").engine_rate = 9000.0
    assert backlog.fastest_rate(["b1", "b2"]) == 4000.0
    assert backlog.fastest_rate(["b1"]) == 1000.0


def test_a_prompt_as_long_as_the_wait_stays_where_load_puts_it() -> None:
    """A 900-token prompt (0.2197265625 s of prefill; within b1's prefill bound of 1,024
    behind the oversized head) at 0.7 s: b1's wait (0.1662109375 s) is shorter than its
    own prefill, so the least-loaded b1 takes it; at 0.6 s (0.2662109375 s) it goes to b2."""
    clock = ManualClock(0.0)
    place = _placement(clock, ON)
    _flood_on_both(clock, place)
    for at, name in ((0.6, "b2"), (0.7, "b1")):
        clock.now = at
        place.observe(place.view.fleet, clock.now)
        picked = place.pick(request(clock, tenant="flood", prompt=900, output=256))
        assert picked is not None and picked.name == name


def test_around_prefill_keeps_the_least_loaded_while_its_wait_is_within_the_own_prefill() -> None:
    b1, b2, b3 = backend("b1"), backend("b2"), backend("b3")
    light, heavy = BackendLoad(1, 10), BackendLoad(5, 900)
    assert around_prefill([(b1, light, 0.5), (b2, heavy, 0.0)], own_s=0.5) is b1
    assert around_prefill([(b1, light, 0.5), (b2, heavy, 0.0)], own_s=0.25) is b2
    tied = [(b1, light, 1.0), (b2, BackendLoad(2, 10), 0.5), (b3, BackendLoad(1, 900), 0.5)]
    assert around_prefill(tied, own_s=0.1) is b2  # the same wait: the fewer tokens
    same = [(b3, BackendLoad(1, 10), 0.5), (b2, BackendLoad(1, 10), 0.5), (b1, light, 1.0)]
    assert around_prefill(same, own_s=0.1) is b2  # then the fewer requests, then the name
    assert around_prefill([], own_s=1.0) is None
