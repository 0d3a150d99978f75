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
