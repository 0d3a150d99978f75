"""Small parts read number by number: the flow-key table's bound and sharing, and the fixed
limit's reported cap."""

from __future__ import annotations

from policies.contracts import BackendLoad
from policies.engine.flow_keys import FlowKeys
from policies.limits.fixed import FixedCap
from policies.limits.fixed_params import FixedParams

from .helpers import ManualClock, backend, request


def test_one_key_object_per_flow() -> None:
    clock = ManualClock()
    keys = FlowKeys()
    a1, a2 = request(clock, tenant="a"), request(clock, tenant="a")
    assert keys.of(a1) is keys.of(a2) and keys.of(a1) == a1.flow
    assert keys.of(request(clock, tenant="b")) is not keys.of(a1)
    assert len(keys) == 2


def test_the_table_is_emptied_when_it_reaches_its_limit() -> None:
    clock = ManualClock()
    keys = FlowKeys(limit=2)
    keys.of(request(clock, tenant="a"))
    keys.of(request(clock, tenant="b"))
    assert len(keys) == 2
    keys.of(request(clock, tenant="c"))  # a third flow: the table starts over
    assert len(keys) == 1


def test_the_default_table_holds_4096_flows() -> None:
    clock = ManualClock()
    keys = FlowKeys()
    for i in range(4096):
        keys.of(request(clock, tenant=f"t{i}"))
    assert len(keys) == 4096
    keys.of(request(clock, tenant="one-more"))
    assert len(keys) == 1


def test_the_fixed_limit_reports_and_applies_its_cap() -> None:
    cap = FixedCap(FixedParams(max_in_flight=3))
    view = backend(max_num_seqs=64)
    assert cap.current(None, view, BackendLoad(in_flight=1)) == 3.0
    assert cap.has_room(None, view, BackendLoad(in_flight=2)) is True
    assert cap.has_room(None, view, BackendLoad(in_flight=3)) is False


def test_the_fixed_limit_without_a_typed_cap_takes_the_engines_own_number() -> None:
    measured = FixedCap(FixedParams())
    load = BackendLoad(in_flight=0)
    # max_num_seqs first, then the KV cache's measured bound, then the most seen running
    assert measured.current(None, backend(max_num_seqs=41, capacity_estimate=7.9), load) == 41.0
    assert measured.current(None, backend(capacity_estimate=7.9, running_peak=3.0), load) == 7.0
    assert measured.current(None, backend(running_peak=3.0), load) == 3.0
    big = backend(max_num_seqs=1024)
    assert measured.has_room(None, big, BackendLoad(in_flight=1023)) is True
    assert measured.has_room(None, big, BackendLoad(in_flight=1024)) is False
    # other replicas' requests on the backend count with this one's
    shared = backend(max_num_seqs=4, peer_in_flight=2)
    assert measured.has_room(None, shared, BackendLoad(in_flight=1)) is True
    assert measured.has_room(None, shared, BackendLoad(in_flight=2)) is False


def test_the_fixed_limit_probes_an_engine_whose_slots_are_unknown() -> None:
    measured, unknown, idle_load = FixedCap(FixedParams()), backend(), BackendLoad(in_flight=0)
    assert measured.current(None, unknown, BackendLoad(in_flight=0)) is None
    assert measured.has_room(None, unknown, BackendLoad(in_flight=0)) is True
    assert measured.has_room(None, unknown, BackendLoad(in_flight=1)) is False
    assert measured.has_room(None, backend(peer_in_flight=1), BackendLoad(in_flight=0)) is False
    # an engine seen running nothing yet, or whose KV bound is below one prompt, is not full
    idle = backend(running_peak=0.0, capacity_estimate=0.4)
    assert measured.current(None, idle, BackendLoad(in_flight=0)) is None
    assert measured.has_room(None, idle, BackendLoad(in_flight=0)) is True
    assert (
        measured.current(None, backend(capacity_estimate=0.4, running_peak=2.0), idle_load) == 2.0
    )
    for one in (1.0, 1.5):  # one slot measured is one slot
        assert measured.current(None, backend(capacity_estimate=one), idle_load) == 1.0
        assert measured.current(None, backend(running_peak=one), idle_load) == 1.0
