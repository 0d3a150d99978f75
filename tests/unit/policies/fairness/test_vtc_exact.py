"""``vtc`` counter by counter: the amounts charged per weight (below 1 too), the floor a
newly backlogged tenant is lifted to, ``deficits()``, the live counts, and an entry handed
back with nothing else of its tenant queued."""

from __future__ import annotations

from policies.contracts import QueuedEntry
from policies.engine.scheduler import Ticket
from policies.fairness.fleet_share import share_of
from policies.fairness.vtc import Vtc, VtcState
from policies.types import Decision, DecisionKind, Ending, Outcome
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler
from tests.unit.policies.helpers import tenant_entry as entry


def backlogged(*entries: QueuedEntry) -> tuple[Vtc, VtcState]:
    """New VTC books with ``entries`` pushed, in this order, at 0."""
    vtc, state = Vtc(None), VtcState()  # type: ignore[arg-type]
    for e in entries:
        vtc.push(state, e, 0.0)
    return vtc, state


def test_a_charge_adds_tokens_over_the_weight_also_below_one() -> None:
    heavy, light, tiny = entry("heavy", 4.0), entry("light", 0.5), entry("tiny", 0.0)
    vtc, state = backlogged(heavy, light, tiny)
    for e in (heavy, light, tiny):
        vtc.charge(state, e.request, 100.0)
    assert state.counters["heavy"] == 25.0
    assert state.counters["light"] == 200.0
    assert state.counters["tiny"] == 100.0 / 1e-9  # a zero weight is floored, never divides by 0
    vtc.charge(state, light.request, -40.0)  # the correction at release
    assert state.counters["light"] == 120.0


def test_the_least_served_tenant_goes_first_whatever_it_weighs() -> None:
    a, b = entry("a", 0.5), entry("b", 2.0)
    vtc, state = backlogged(a, b)
    vtc.charge(state, a.request, 10.0)  # a: 20
    vtc.charge(state, b.request, 30.0)  # b: 15
    assert vtc.pop(state, 0.0) is b
    assert vtc.pop(state, 0.0) is a
    assert vtc.pop(state, 0.0) is None


def test_deficits_are_counters_above_the_least_backlogged() -> None:
    a, b, c = entry("a"), entry("b", 0.5), entry("c", 2.0)
    vtc, state = backlogged(a, b, c)
    vtc.charge(state, a.request, 30.0)
    vtc.charge(state, b.request, 30.0)
    vtc.charge(state, c.request, 30.0)
    assert vtc.deficits(state) == {"a": 15.0, "b": 45.0, "c": 0.0}
    assert vtc.pop(state, 0.0) is c  # c leaves the backlog: a is the floor now
    assert vtc.deficits(state) == {"a": 0.0, "b": 30.0, "c": -15.0}


def test_with_nobody_backlogged_deficits_count_from_the_last_served() -> None:
    a, b = entry("a"), entry("b")
    vtc, state = backlogged(a, b)
    vtc.charge(state, a.request, 50.0)  # started at 0: last served stays 0
    assert state.last_served == 0.0
    vtc.charge(state, a.request, 20.0)  # started at 50
    assert state.last_served == 50.0
    vtc.charge(state, a.request, -5.0)  # a correction moves no floor
    assert state.last_served == 50.0
    assert vtc.pop(state, 0.0) is b and vtc.pop(state, 0.0) is a
    assert vtc.deficits(state) == {"a": 15.0, "b": -50.0}


def test_a_newly_backlogged_tenant_is_lifted_to_the_floor_and_cannot_bank_idle_time() -> None:
    busy, idle = entry("busy"), entry("idle")
    vtc, state = backlogged(busy)
    vtc.charge(state, busy.request, 300.0)  # busy: 300
    vtc.push(state, entry("busy"), 0.0)
    vtc.push(state, idle, 0.0)  # lifted to the least backlogged: 300
    assert state.counters["idle"] == 300.0
    vtc.charge(state, idle.request, 10.0)  # idle: 310, above busy now
    assert vtc.pop(state, 0.0) is busy


def test_a_tenant_returning_to_an_empty_queue_starts_at_the_last_served() -> None:
    a = entry("a")
    vtc, state = backlogged(a)
    assert vtc.pop(state, 0.0) is a
    vtc.charge(state, a.request, 80.0)
    vtc.charge(state, a.request, 40.0)  # started at 80: last served 80
    late = entry("late")
    vtc.push(state, late, 0.0)
    assert state.counters["late"] == 80.0
    vtc.push(state, entry("a"), 0.0)  # a kept its own, higher counter
    assert state.counters["a"] == 120.0


def test_live_counts_follow_push_pop_discard_and_push_back() -> None:
    e1, e2, e3 = entry("a"), entry("a"), entry("a")
    vtc, state = backlogged(e1, e2, e3)
    assert state.live == {"a": 3}
    got = vtc.pop(state, 0.0)
    assert got is e1 and state.live == {"a": 2}
    vtc.push_back(state, got)
    assert state.live == {"a": 3}
    vtc.discard(state, e2)
    e2.alive = False
    assert state.live == {"a": 2}
    assert vtc.pop(state, 0.0, allow=lambda e: True) is e1 and state.live == {"a": 1}
    assert vtc.pop(state, 0.0) is e3 and state.live == {"a": 0}
    vtc.discard(state, e3)  # leaving twice never drives the count below zero
    assert state.live == {"a": 0}
    assert vtc.pop(state, 0.0) is None


def test_an_entry_handed_back_alone_is_popped_again() -> None:
    a = entry("a")
    vtc, state = backlogged(a)
    assert vtc.pop(state, 0.0) is a
    vtc.push_back(state, a)
    assert vtc.pop(state, 0.0, allow=lambda e: True) is a
    vtc.push_back(state, a)
    assert vtc.pop(state, 0.0) is a


def test_an_entry_handed_back_after_its_tenant_left_the_heap_is_popped_again() -> None:
    """A pop after ``a`` went idle drops a's heap item: handing ``a`` back must restore it."""
    for allow in (None, lambda e: True):
        a, b = entry("a"), entry("b")
        vtc, state = backlogged(a, b)
        assert vtc.pop(state, 0.0, allow) is a
        assert vtc.pop(state, 0.0, allow) is b  # a is idle now: its item is dropped
        vtc.push_back(state, b)
        vtc.push_back(state, a)
        assert {vtc.pop(state, 0.0, allow), vtc.pop(state, 0.0, allow)} == {a, b}
        assert vtc.pop(state, 0.0, allow) is None


def test_an_entry_handed_back_keeps_its_place_among_other_tenants() -> None:
    a, b = entry("a"), entry("b")
    vtc, state = backlogged(a, b)
    vtc.charge(state, b.request, 5.0)  # b: 5, a: 0
    assert vtc.pop(state, 0.0) is a
    vtc.push_back(state, a)
    assert vtc.pop(state, 0.0) is a and vtc.pop(state, 0.0) is b


def test_a_refused_tenant_keeps_its_place_and_the_next_one_goes() -> None:
    a, b, c = entry("a"), entry("b"), entry("c")
    vtc, state = backlogged(a, b, c)
    vtc.charge(state, b.request, 1.0)
    vtc.charge(state, c.request, 2.0)
    assert vtc.pop(state, 0.0, allow=lambda e: e is not a) is b
    assert vtc.pop(state, 0.0, allow=lambda e: False) is None
    assert state.live == {"a": 1, "b": 0, "c": 1}
    assert vtc.pop(state, 0.0) is a and vtc.pop(state, 0.0) is c


def test_a_tenant_left_with_dead_entries_only_is_dropped_from_the_backlog() -> None:
    for allow in (None, lambda e: True):
        gone, other = entry("gone"), entry("other")
        vtc, state = backlogged(gone, other)
        vtc.charge(state, other.request, 1.0)
        gone.alive = False  # marked dead without a discard: the count still says 1
        assert vtc.pop(state, 0.0, allow) is other
        assert state.live == {"gone": 0, "other": 0}
        assert vtc.pop(state, 0.0, allow) is None


def test_within_a_tenant_the_earliest_expiry_goes_first() -> None:
    late, soon = entry("a", expires_at=50.0), entry("a", expires_at=20.0)
    vtc, state = backlogged(late, soon)
    assert vtc.pop(state, 0.0) is soon and vtc.pop(state, 0.0) is late


def test_tenants_with_equal_counters_go_in_the_order_they_became_backlogged() -> None:
    first, second, third = entry("zed"), entry("mid"), entry("abe")  # not alphabetical
    vtc, state = backlogged(first, second, third)
    assert [vtc.pop(state, 0.0) for _ in range(3)] == [first, second, third]


def test_only_a_charge_of_service_moves_the_last_served_floor() -> None:
    a = entry("a")
    vtc, state = backlogged(a)
    vtc.charge(state, a.request, 50.0)  # a: 50
    vtc.charge(state, a.request, 0.0)  # a correction of nothing
    assert state.last_served == 0.0
    vtc.charge(state, a.request, 1.0)  # one token of service, started at 50
    assert state.last_served == 50.0 and state.counters["a"] == 51.0


def test_tenants_with_one_entry_each_survive_a_rebuild_of_the_tenant_heap() -> None:
    a, b = entry("a"), entry("b")
    vtc, state = backlogged(a, b)
    for _ in range(80):  # each charge of a backlogged tenant adds a heap item: past the bound
        vtc.charge(state, a.request, 1.0)
    assert len(state.heap) < 80  # rebuilt
    assert vtc.pop(state, 0.0) is b and vtc.pop(state, 0.0) is a
    assert state.counters == {"a": 80.0, "b": 0.0}


def test_a_lone_entry_whose_model_had_no_room_dispatches_once_room_returns() -> None:
    """Through the scheduler: the entry is popped, finds its model full and is handed back
    (push_back) after another tenant's pop; it must still come out once room returns."""
    clock = ManualClock()
    s = scheduler(clock, {"ladder": {"steps": []}})
    f = fleet(
        clock,
        backend("one", models=("m1",), max_num_seqs=1),
        backend("two", models=("m2",), max_num_seqs=1),
    )
    first = s.submit(request(clock, tenant="x", model="m1"), f)
    other = s.submit(request(clock, tenant="y", model="m2"), f)
    lone = s.submit(request(clock, tenant="a", model="m1", request_id="lone"), f)
    later = s.submit(request(clock, tenant="c", model="m2", request_id="later"), f)
    assert isinstance(first, Ticket) and isinstance(other, Ticket)
    assert isinstance(lone, Decision) and lone.decision is DecisionKind.DELAY
    assert isinstance(later, Decision) and later.decision is DecisionKind.DELAY
    s.release(other, Ending(Outcome.COMPLETED))
    out = s.poll(f)  # "lone" first (m1 full: handed back), then "later" goes to m2
    assert [t.request_id for t in out if isinstance(t, Ticket)] == ["later"]
    s.release(first, Ending(Outcome.COMPLETED))
    out = s.poll(f)
    assert [t.request_id for t in out if isinstance(t, Ticket)] == ["lone"]


def test_a_rebuild_of_the_tenant_heap_keeps_the_order_of_tenants_with_equal_counters() -> None:
    early = entry("a")
    vtc, state = backlogged(early)  # "a" enters the books first...
    assert vtc.pop(state, 0.0) is early  # ...and goes idle
    z, x, a = entry("z"), entry("x"), entry("a")
    for e in (z, x, a):  # backlogged in this order, all at counter 0
        vtc.push(state, e, 0.0)
    for _ in range(80):  # x's charges add heap items past the bound: the heap is rebuilt
        vtc.charge(state, x.request, 1.0)
    assert len(state.heap) < 80
    assert [vtc.pop(state, 0.0) for _ in range(3)] == [z, a, x]


def test_a_correction_charged_while_idle_does_not_move_the_tenant_ahead_later() -> None:
    a1 = entry("a")
    vtc, state = backlogged(a1)
    assert vtc.pop(state, 0.0) is a1
    vtc.charge(state, a1.request, 10.0)  # a: 10, charged after it went idle
    z = entry("z")
    vtc.push(state, z, 0.0)
    vtc.charge(state, z.request, 10.0)  # z: 10, backlogged before a returns
    a2 = entry("a")
    vtc.push(state, a2, 0.0)  # a: 10 again, backlogged after z
    assert vtc.pop(state, 0.0) is z and vtc.pop(state, 0.0) is a2


def charge_until_rebuilt(vtc: Vtc, state: VtcState, e: QueuedEntry) -> None:
    """Charge ``e``'s tenant a token at a time (each adds a heap item) until the heap is
    rebuilt, and stop right there: its stale items are still in it when it rebuilds."""
    for _ in range(1000):
        held = len(state.heap)
        vtc.charge(state, e.request, 1.0)
        if len(state.heap) <= held:
            return
    raise AssertionError("the tenant heap was never rebuilt")


def test_a_rebuild_keeps_a_tenant_by_its_current_item_not_a_stale_one() -> None:
    a, x = entry("a"), entry("x")
    vtc, state = backlogged(a, x)
    charge_until_rebuilt(vtc, state, x)  # x's older items (lower counters) are stale
    assert vtc.pop(state, 0.0) is a and vtc.pop(state, 0.0) is x


def test_a_rebuild_restores_backlogged_tenants_whose_heap_items_were_lost() -> None:
    zed, abe, x = entry("zed"), entry("abe"), entry("x")
    vtc, state = backlogged(zed, abe, x)
    state.heap.clear()  # the books lost every item
    charge_until_rebuilt(vtc, state, x)  # x's charges push items for x only
    assert [vtc.pop(state, 0.0) for _ in range(3)] == [zed, abe, x]


def test_a_correction_charged_while_idle_leaves_no_item_behind() -> None:
    """An item pushed for an idle tenant would come back to life, with its early seq, when
    the tenant returns at the same counter, and put it ahead of a tenant backlogged before."""
    y, a1, z, a2 = entry("y"), entry("a"), entry("z"), entry("a")
    vtc, state = backlogged(y, a1)
    assert vtc.pop(state, 0.0, allow=lambda e: e is a1) is a1  # y keeps the top
    vtc.charge(state, a1.request, 10.0)  # a: 10, charged while idle
    vtc.push(state, z, 0.0)  # z: 0 (y is the floor)
    vtc.charge(state, z.request, 10.0)  # z: 10
    vtc.push(state, a2, 0.0)  # a returns at 10, after z
    assert [vtc.pop(state, 0.0) for _ in range(3)] == [y, z, a2]


def order_after_a_tenant_left_and_came_back(compact: bool) -> list[str]:
    """y and a are backlogged at 0; a's only entry is cancelled, which leaves its heap item
    behind y's; z, then a again, become backlogged at 0. ``compact``: the heap is rebuilt
    (x's charges) while a is away."""
    y, a1, x, z, a2 = entry("y"), entry("a"), entry("x"), entry("z"), entry("a")
    vtc, state = backlogged(y, a1, x)
    vtc.discard(state, a1)
    a1.alive = False
    if compact:
        charge_until_rebuilt(vtc, state, x)
    else:
        vtc.charge(state, x.request, 500.0)
    vtc.push(state, z, 0.0)
    vtc.push(state, a2, 0.0)
    assert state.counters["y"] == state.counters["z"] == state.counters["a"] == 0.0
    popped = [vtc.pop(state, 0.0) for _ in range(4)]
    return [e.request.tenant if e is not None else "-" for e in popped]


def test_the_order_of_equal_counters_does_not_depend_on_when_the_heap_is_compacted() -> None:
    """a came back after z: it goes after z, whether or not a rebuild dropped a's old item
    (which, revived, would put a back in the place it held before it left)."""
    assert order_after_a_tenant_left_and_came_back(compact=False) == ["y", "z", "a", "x"]
    assert order_after_a_tenant_left_and_came_back(compact=True) == ["y", "z", "a", "x"]


def test_an_entry_handed_back_keeps_its_place_across_a_rebuild_of_the_tenant_heap() -> None:
    for compact in (False, True):
        a, b, x = entry("a"), entry("b"), entry("x")
        vtc, state = backlogged(a, b, x)
        assert vtc.pop(state, 0.0) is a  # a has nothing else queued: idle until handed back
        if compact:
            charge_until_rebuilt(vtc, state, x)
        else:
            vtc.charge(state, x.request, 500.0)
        vtc.push_back(state, a)
        assert [vtc.pop(state, 0.0) for _ in range(3)] == [a, b, x], compact


def test_a_charge_that_leaves_the_counter_as_it_was_keeps_the_tenants_place() -> None:
    a, b = entry("a"), entry("b")
    vtc, state = backlogged(a, b)
    vtc.charge(state, a.request, 0.0)  # nothing served: a stays ahead of b
    assert vtc.pop(state, 0.0) is a and vtc.pop(state, 0.0) is b


def test_equal_counters_go_in_the_order_the_counters_took_that_value() -> None:
    a, b = entry("a"), entry("b")
    vtc, state = backlogged(a, b)
    vtc.charge(state, b.request, 10.0)  # b reaches 10 first
    vtc.charge(state, a.request, 10.0)
    assert vtc.pop(state, 0.0) is b and vtc.pop(state, 0.0) is a


def sharing() -> tuple[Vtc, VtcState]:
    vtc, state = backlogged()
    vtc.share_report(state)  # starts the accounting
    return vtc, state


def test_a_report_leaves_out_a_tenant_whose_queue_has_emptied() -> None:
    vtc, state = sharing()
    a, b = entry("a"), entry("b")
    vtc.push(state, a, 0.0)
    vtc.push(state, b, 0.0)
    assert vtc.pop(state, 0.0) is a  # a's queue is empty now, b's is not
    assert vtc.share_report(state).backlogged == frozenset({"b"})
    assert vtc.pop(state, 0.0) is b
    assert vtc.share_report(state).backlogged == frozenset()


def test_a_failed_report_is_added_to_what_was_served_since() -> None:
    vtc, state = sharing()
    a, b = entry("a"), entry("b", 0.5)
    vtc.charge(state, a.request, 10.0)
    vtc.charge(state, b.request, 3.0)  # 6 virtual tokens
    failed = vtc.share_report(state)
    vtc.charge(state, a.request, 2.0)  # served since: a only
    vtc.share_merge(state, None, failed)
    assert vtc.share_report(state).served == {"a": 12.0, "b": 6.0}


def test_a_tenant_queued_elsewhere_keeps_its_own_counter_and_is_not_lifted() -> None:
    """q, also queued on another replica, is served from the fleet's counter: it is not
    lifted to the floor here (50), nor set to the counter the fleet had for it (80)."""
    vtc, state = sharing()
    p, q = entry("p"), entry("q")
    vtc.push(state, p, 0.0)
    vtc.charge(state, p.request, 50.0)  # p: 50, the floor here
    vtc.charge(state, q.request, 5.0)  # q: 5, served here while idle
    vtc.share_merge(state, share_of({}, {"q": 80.0, "r": 20.0}, 1000.0))
    vtc.push(state, q, 0.0)
    assert state.counters["q"] == 5.0
    assert vtc.pop(state, 0.0) is q and vtc.pop(state, 0.0) is p


def test_a_tenant_queued_elsewhere_and_new_here_starts_at_the_fleets_counter() -> None:
    vtc, state = sharing()
    p, q = entry("p"), entry("q")
    vtc.push(state, p, 0.0)
    vtc.charge(state, p.request, 50.0)  # p: 50, the floor here
    vtc.share_merge(state, share_of({}, {"q": 80.0, "r": 20.0}, 1000.0))
    vtc.push(state, q, 0.0)
    assert state.counters["q"] == 80.0
    assert vtc.pop(state, 0.0) is p and vtc.pop(state, 0.0) is q


def lifted_to(local: float, remote: float | None) -> float:
    """The counter a newly backlogged tenant starts at, with a tenant backlogged here at
    ``local`` and one queued elsewhere at ``remote`` (None: nobody is)."""
    vtc, state = sharing()
    here, new = entry("here"), entry("new")
    vtc.push(state, here, 0.0)
    vtc.charge(state, here.request, local)
    elsewhere = {} if remote is None else {"there": remote}
    vtc.share_merge(state, share_of({}, elsewhere, 1000.0))
    vtc.push(state, new, 0.0)
    return state.counters["new"]


def test_with_a_floor_here_and_one_elsewhere_the_lift_is_to_the_lower() -> None:
    assert lifted_to(local=50.0, remote=30.0) == 30.0
    assert lifted_to(local=30.0, remote=50.0) == 30.0
    assert lifted_to(local=40.0, remote=40.0) == 40.0
    assert lifted_to(local=40.0, remote=None) == 40.0  # nobody queued elsewhere


def test_a_correction_charged_while_an_entry_is_out_keeps_no_place_it_had_before() -> None:
    """a's counter reaches 10 after b's did (a correction while a's entry is out): when the
    entry is handed back, b, at 10 first, goes first."""
    a, b = entry("a"), entry("b")
    vtc, state = backlogged(a, b)
    vtc.charge(state, b.request, 10.0)  # b: 10
    assert vtc.pop(state, 0.0) is a
    vtc.charge(state, a.request, 10.0)  # a: 10, while its entry is out
    vtc.push_back(state, a)
    assert vtc.pop(state, 0.0) is b and vtc.pop(state, 0.0) is a


def test_the_last_served_floor_never_moves_back() -> None:
    a, b, c = entry("a"), entry("b"), entry("c")
    vtc, state = backlogged(a, b)
    vtc.charge(state, a.request, 50.0)
    vtc.charge(state, a.request, 20.0)  # started at 50: the floor is 50
    vtc.charge(state, b.request, 10.0)  # started at 0, below the floor: it stays 50
    assert state.last_served == 50.0
    assert vtc.pop(state, 0.0) is b and vtc.pop(state, 0.0) is a
    vtc.push(state, c, 0.0)  # nobody backlogged: c starts at the last served counter
    assert state.counters["c"] == 50.0


def test_a_counter_the_fleet_raised_moves_a_backlogged_tenant_back() -> None:
    vtc, state = sharing()
    a, b = entry("a"), entry("b")
    vtc.push(state, a, 0.0)
    vtc.push(state, b, 0.0)
    vtc.charge(state, b.request, 10.0)  # b: 10, a: 0 here
    vtc.share_report(state)
    vtc.share_merge(state, share_of({"a": 100.0, "b": 10.0}, {}, 1000.0))  # a served elsewhere
    assert vtc.pop(state, 0.0) is b and vtc.pop(state, 0.0) is a
