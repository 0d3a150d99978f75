"""The values the scheduler hands out and reads: a ticket's equality, hash and repr by its
fields; a decision's reservation, flow and degradation; the snapshot memo (each lookup
computed once per snapshot, room bounds and saturation again after a swap)."""

from __future__ import annotations

from policies.backends import BackendsSnapshot, BackendView, Health
from policies.contracts import BackendLoad
from policies.engine.scheduler_types import Ticket, make_decision
from policies.engine.snapshot_view import SnapshotView
from policies.ladder.ladder import pool_saturation
from policies.ladder.ladder_params import LadderParams
from policies.types import NO_DEGRADATION, DecisionKind, Degradation, FlowKey, Reason
from tests.unit.policies.helpers import ManualClock, backend, policy, request


def test_tickets_are_equal_and_hash_alike_exactly_when_every_field_is() -> None:
    clock = ManualClock()
    req = request(clock, request_id="r1")
    decision = make_decision(policy(), req, DecisionKind.ADMIT, Reason.CAPACITY_AVAILABLE)
    one = Ticket("r1", "b1", decision, 5.0, req)
    assert one == Ticket("r1", "b1", decision, 5.0, req)
    assert hash(one) == hash(Ticket("r1", "b1", decision, 5.0, req))
    assert one != Ticket("r1", "b2", decision, 5.0, req)
    assert one != Ticket("r1", "b1", decision, 5.5, req)
    assert one.__eq__("r1") is NotImplemented and one != "r1"
    assert repr(one) == (
        f"Ticket(request_id='r1', backend='b1', decision={decision!r}, dispatched_at=5.0, "
        f"request={req!r})"
    )


def test_a_decision_reserves_the_estimate_unless_it_rejects() -> None:
    clock = ManualClock()
    req = request(clock, prompt=120, output=30)
    p = policy()
    admit = make_decision(p, req, DecisionKind.ADMIT, Reason.CAPACITY_AVAILABLE, backend="b2")
    assert (admit.reservation_tokens, admit.backend, admit.flow) == (150, "b2", req.flow)
    assert admit.degradation is NO_DEGRADATION
    reject = make_decision(p, req, DecisionKind.REJECT, Reason.OVERLOADED, retry_after_s=3.0)
    assert (reject.reservation_tokens, reject.retry_after_s) == (0, 3.0)
    flow = FlowKey("other", "batch", "m2", "none")
    degraded = Degradation(("cap",), max_tokens=64)
    queued = make_decision(
        p,
        req,
        DecisionKind.DELAY,
        Reason.QUEUED_FOR_CAPACITY,
        queue_position=4,
        degradation=degraded,
        flow=flow,
    )
    assert queued.flow is flow and queued.degradation is degraded
    assert (queued.reservation_tokens, queued.queue_position) == (150, 4)


class _Loads:
    """The scheduler's loads, recording which backends were asked for."""

    def __init__(self) -> None:
        self.loads: dict[str, BackendLoad] = {}
        self.asked: list[str] = []

    def __call__(self, name: str) -> BackendLoad:
        self.asked.append(name)
        return self.loads.setdefault(name, BackendLoad())


def test_each_lookup_is_computed_once_per_snapshot() -> None:
    views = (
        backend("b1", models=("m", "n"), max_num_seqs=4),
        backend("b2", models=("m",), max_num_seqs=8, kv_cache_usage=0.9),
        BackendView("b3", frozenset({"gone"}), health=Health.DOWN),
        backend("b1", models=("z",)),
    )
    view = SnapshotView(BackendsSnapshot(at=0.0, backends=views))
    load_of = _Loads()
    loads, asked = load_of.loads, load_of.asked
    serving = view.serving("m")
    assert serving == views[:2] and view.serving("m") is serving
    cands = view.candidates("m", load_of)
    assert view.candidates("m", load_of) is cands and asked == ["b1", "b2"]
    assert [(b.name, load) for b, load in cands] == [("b1", loads["b1"]), ("b2", loads["b2"])]
    bounds_asked: list[str] = []

    def bound_of(b: BackendView) -> float:
        bounds_asked.append(b.name)
        return float(b.max_num_seqs or 0)

    bounds = view.room_bounds("m", load_of, bound_of)
    assert [x[2] for x in bounds] == [4.0, 8.0]
    assert view.room_bounds("m", load_of, bound_of) is bounds
    assert view.get("b1") is views[0] and view.get("b3") is views[2] and view.get("b9") is None
    assert view.served_models() == frozenset({"m", "n", "z"})
    assert view.served_models() is view.served_models()
    params = LadderParams()
    sat = view.saturation("m", params)
    assert sat == pool_saturation(views[:2], params) and view.saturation("m", params) == sat
    view.forget_policy()
    assert view.room_bounds("m", load_of, bound_of) is not bounds
    assert bounds_asked == ["b1", "b2", "b1", "b2"]
    assert view.candidates("m", load_of) is cands and asked == ["b1", "b2"]
