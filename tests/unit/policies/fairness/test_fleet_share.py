"""Fair share across replicas, amount by amount: the report a replica sends, the fleet's
counters merged with what it served since, the ledger's sums and lifts, and which tenant
is held back for a tenant queued elsewhere (the allowance boundary, weights below 1, two
tenants of different weights)."""

from __future__ import annotations

from policies.fairness.fleet_ledger import FleetLedger
from policies.fairness.fleet_share import ShareReport, share_of
from policies.fairness.vtc import Vtc, VtcState
from tests.unit.policies.helpers import tenant_entry as entry


def sharing() -> tuple[Vtc, VtcState]:
    vtc, state = Vtc(None), VtcState()  # type: ignore[arg-type]
    assert vtc.share_report(state) == ShareReport({}, frozenset())  # starts the accounting
    return vtc, state


def test_a_report_carries_the_weighted_service_since_the_last_and_who_is_queued() -> None:
    vtc, state = sharing()
    light, heavy = entry("light", 0.25), entry("heavy", 2.0)
    vtc.push(state, light, 0.0)
    vtc.charge(state, light.request, 30.0)  # 120 virtual tokens
    vtc.charge(state, heavy.request, 30.0)  # 15
    vtc.charge(state, light.request, -5.0)  # the correction at release: -20
    report = vtc.share_report(state)
    assert report == ShareReport({"light": 100.0, "heavy": 15.0}, frozenset({"light"}))
    assert vtc.share_report(state).served == {}  # sent once


def test_a_replica_that_never_reported_accumulates_nothing() -> None:
    vtc, state = Vtc(None), VtcState()  # type: ignore[arg-type]
    vtc.charge(state, entry("a").request, 30.0)
    assert state.unsent == {}


def test_the_fleets_counters_plus_what_was_served_since_the_report() -> None:
    vtc, state = sharing()
    a = entry("a")
    vtc.push(state, a, 0.0)
    vtc.charge(state, a.request, 10.0)
    report = vtc.share_report(state)
    vtc.charge(state, a.request, 4.0)  # served while the sync was on its way
    vtc.share_merge(state, share_of({"a": 500.0, "b": 300.0}, {"b": 300.0}, 0.0))
    assert report.served == {"a": 10.0}
    assert state.counters == {"a": 504.0, "b": 300.0}


def test_a_failed_sync_falls_back_to_local_order_and_sends_the_service_again() -> None:
    vtc, state = sharing()
    a = entry("a")
    vtc.push(state, a, 0.0)
    vtc.share_merge(state, share_of({"a": 0.0}, {"b": 0.0}, 0.0))
    vtc.charge(state, a.request, 10.0)
    report = vtc.share_report(state)
    vtc.charge(state, a.request, 2.0)
    assert vtc.pop(state, 0.0) is None  # held: a leads b (queued elsewhere) by 12
    vtc.share_merge(state, None, report)
    assert state.fleet is None
    assert vtc.share_report(state).served == {"a": 12.0}
    assert vtc.pop(state, 0.0) is a


def test_a_tenant_is_held_only_beyond_the_allowance() -> None:
    vtc, state = sharing()
    y = entry("y")
    vtc.push(state, y, 0.0)
    vtc.share_merge(state, share_of({"y": 150.0}, {"x": 50.0}, 100.0))
    assert vtc.pop(state, 0.0) is y  # leads x by exactly the allowance: goes
    vtc.push(state, y, 0.0)
    vtc.charge(state, y.request, 0.5)  # 150.5: leads by more
    assert vtc.pop(state, 0.0) is None
    vtc.share_merge(state, share_of({"y": 150.5}, {}, 100.0))  # x no longer queued anywhere
    assert vtc.pop(state, 0.0) is y  # nobody else waits: never held


def test_a_tenant_is_not_held_for_itself_queued_on_another_replica() -> None:
    vtc, state = sharing()
    y = entry("y")
    vtc.push(state, y, 0.0)
    vtc.share_merge(state, share_of({"y": 100.0}, {"y": 100.0}, 0.0))
    vtc.charge(state, y.request, 50.0)  # this replica served y since: 150
    assert vtc.pop(state, 0.0) is y


def test_a_held_tenant_is_passed_over_for_one_behind_the_floor() -> None:
    """Two tenants of different weights queued here; z, queued elsewhere too, is at 40."""
    vtc, state = sharing()
    light, heavy = entry("light", 0.5), entry("heavy", 4.0)
    vtc.push(state, light, 0.0)
    vtc.push(state, heavy, 0.0)
    vtc.charge(state, light.request, 30.0)  # 60
    vtc.charge(state, heavy.request, 200.0)  # 50
    assert vtc.share_report(state).served == {"light": 60.0, "heavy": 50.0}
    share = share_of({"light": 60.0, "heavy": 50.0}, {"z": 40.0, "heavy": 50.0}, 15.0)
    vtc.share_merge(state, share)
    assert vtc.pop(state, 0.0) is heavy  # 50 - 40 = 10 <= 15
    vtc.push(state, heavy, 0.0)
    vtc.charge(state, heavy.request, 40.0)  # 60: leads z by 20
    assert vtc.pop(state, 0.0) is None  # both lead z by 20 > 15
    vtc.share_report(state)
    vtc.share_merge(state, share_of({"light": 60.0}, {"z": 50.0}, 15.0))
    assert state.counters == {"light": 60.0, "heavy": 60.0}
    assert vtc.pop(state, 0.0) is light  # equal counters: the first backlogged goes first


def test_a_tenant_queued_here_first_is_lifted_to_the_floor_elsewhere() -> None:
    vtc, state = sharing()
    vtc.share_merge(state, share_of({}, {"x": 700.0}, 0.0))
    late = entry("late")
    vtc.push(state, late, 0.0)
    assert state.counters["late"] == 700.0  # idle time is not banked against x
    assert vtc.pop(state, 0.0) is late  # level with x: not held


def test_the_ledger_sums_the_replicas_service_and_lifts_a_newly_queued_tenant() -> None:
    ledger = FleetLedger(ttl_s=1.0)
    a = ledger.exchange("A", ShareReport({"x": 100.0}, frozenset({"x"})), now=0.0)
    assert a.counters == {"x": 100.0} and a.elsewhere == {}
    b = ledger.exchange("B", ShareReport({"y": 30.0, "x": 20.0}, frozenset({"y"})), now=0.1)
    # y was queued nowhere: lifted to x's 120 (its 30 served are inside the lift)
    assert b.counters == {"x": 120.0, "y": 120.0} and b.elsewhere == {"x": 120.0}
    c = ledger.exchange("C", ShareReport({"y": 0.5}, frozenset({"y"})), now=0.2)
    assert c.counters == {"x": 120.0, "y": 120.5}  # queued already (on B): not lifted
    assert c.elsewhere == {"x": 120.0, "y": 120.5}
    a2 = ledger.exchange("A", ShareReport({}, frozenset()), now=0.3)  # x no longer queued
    assert a2.elsewhere == {"y": 120.5}
    late = ledger.exchange("A", ShareReport({}, frozenset()), now=1.25)  # B's, C's expired
    assert late.elsewhere == {}


def test_the_ledger_starts_a_tenant_never_seen_at_the_last_served_counter() -> None:
    ledger = FleetLedger(ttl_s=1.0)
    ledger.exchange("A", ShareReport({"x": 100.0}, frozenset()), now=0.0)
    ledger.exchange("A", ShareReport({"x": 50.0}, frozenset()), now=0.1)  # x was at 100
    answer = ledger.exchange("B", ShareReport({"new": 10.0}, frozenset()), now=0.2)
    assert answer.counters == {"new": 110.0}
