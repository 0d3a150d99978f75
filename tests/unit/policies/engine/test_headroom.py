"""Headroom keeps the last slots for tenants under their share; nothing without a slot count."""

from __future__ import annotations

from policies.engine.headroom import may_take_slot
from policies.engine.headroom_params import HeadroomParams
from policies.engine.scheduler import Ticket
from policies.types import Decision, Ending, Outcome
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

QUARTER = HeadroomParams(reserve_fraction=0.25)


def test_plenty_free_lets_anyone_take_a_slot() -> None:
    assert may_take_slot(
        QUARTER, limit=8, in_flight=5, tenant_in_flight=5, tenant_weight=1, active_weight=2
    )


def test_last_slots_go_only_to_tenants_under_their_share() -> None:
    assert not may_take_slot(
        QUARTER, limit=8, in_flight=6, tenant_in_flight=6, tenant_weight=1, active_weight=2
    )
    assert may_take_slot(
        QUARTER, limit=8, in_flight=6, tenant_in_flight=0, tenant_weight=1, active_weight=2
    )
    assert may_take_slot(
        QUARTER, limit=8, in_flight=7, tenant_in_flight=5, tenant_weight=3, active_weight=4
    )


def test_no_slot_count_means_no_headroom() -> None:
    assert may_take_slot(
        QUARTER, limit=None, in_flight=99, tenant_in_flight=99, tenant_weight=1, active_weight=5
    )


def test_scheduler_keeps_a_slot_for_the_other_active_tenant() -> None:
    """8 slots, the default's 1 reserved: the hog holds 6, past its share (4) plus the
    reserve (1), so the 8th stays free for the quiet tenant."""
    clock = ManualClock()
    s = scheduler(clock, {"headroom": {"reserve_fraction": 0.125, "hold_arrivals": True}})
    f = fleet(clock, backend(max_num_seqs=8))
    first = s.submit(request(clock, tenant="quiet"), f)
    hog = [s.submit(request(clock, tenant="hog"), f) for _ in range(8)]
    assert isinstance(first, Ticket)
    assert sum(isinstance(h, Ticket) for h in hog) == 6  # the 8th slot stays free
    assert s.poll(f) == []  # the hog may not take it even on a poll
    quiet = s.submit(request(clock, tenant="quiet"), f)
    assert isinstance(quiet, Decision)  # others are queued: it goes through poll
    (out,) = s.poll(f)
    assert isinstance(out, Ticket) and out.request.tenant == "quiet"
    s.release(first, Ending(Outcome.COMPLETED))
    assert s.poll(f) == []  # the hog still holds 6, past 4 + 1: the last stays free
    s.release(out, Ending(Outcome.COMPLETED))
    (nxt,) = s.poll(f)
    assert isinstance(nxt, Ticket) and nxt.request.tenant == "hog"  # work goes on
