"""Degradation ladder (thresholds, hysteresis, actions, shadow) and routing."""

from __future__ import annotations

import dataclasses
from typing import Any

from policies.engine.routing import home_backend
from policies.engine.scheduler import Ticket
from policies.types import Decision, Ending, Outcome, Reason, WorkEstimate
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

LADDER: dict[str, Any] = {
    "steps": [
        {"name": "shed-eval", "at": 0.5, "action": "shed_classes", "classes": ["eval"]},
        {"name": "small-model", "at": 0.7, "action": "route_model", "models": {"big": "small"}},
        {"name": "reject-batch", "at": 0.9, "action": "reject", "classes": ["batch"]},
    ]
}


def fleet_at(clock: ManualClock, kv: float) -> Any:
    return fleet(clock, backend("b", models=("big", "small"), kv_cache_usage=kv, waiting=0.0))


def test_steps_apply_in_order_as_saturation_rises() -> None:
    clock = ManualClock()
    s = scheduler(clock, {"ladder": LADDER})
    calm, warm, hot = fleet_at(clock, 0.1), fleet_at(clock, 0.6), fleet_at(clock, 0.75)
    assert isinstance(s.submit(request(clock, workload_class="eval", model="big"), calm), Ticket)
    shed = s.submit(request(clock, workload_class="eval", model="big"), warm)
    assert isinstance(shed, Decision) and shed.reason is Reason.CLASS_SHED
    routed = s.submit(request(clock, model="big"), hot)
    assert isinstance(routed, Ticket) and routed.request.model == "small"
    assert routed.decision.degradation.steps == ("small-model",)
    assert routed.decision.degradation.model == "small"
    batch = s.submit(request(clock, workload_class="batch", model="big"), fleet_at(clock, 0.8))
    assert isinstance(batch, Decision) and batch.reason is Reason.OVERLOADED


def test_hysteresis_keeps_a_step_on_until_load_falls_clearly() -> None:
    clock = ManualClock()
    s = scheduler(clock, {"ladder": LADDER})
    s.submit(request(clock, model="big"), fleet_at(clock, 0.6))  # 0.75 saturation: shed-eval on
    still = s.submit(request(clock, workload_class="eval", model="big"), fleet_at(clock, 0.34))
    assert isinstance(still, Decision) and still.reason is Reason.CLASS_SHED
    assert isinstance(
        s.submit(request(clock, workload_class="eval", model="big"), fleet_at(clock, 0.3)), Ticket
    )


def test_shadow_step_is_recorded_not_applied() -> None:
    clock = ManualClock()
    steps = [
        {"name": "cap", "at": 0.1, "action": "cap_max_tokens", "max_tokens": 8, "shadow": True}
    ]
    s = scheduler(clock, {"ladder": {"steps": steps}})
    out = s.submit(request(clock, model="big", max_tokens=100), fleet_at(clock, 0.5))
    assert isinstance(out, Ticket) and out.request.max_tokens == 100
    assert out.decision.shadowed == ("ladder:cap",)


def test_routes_to_least_outstanding_tokens() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock, backend("a"), backend("b"))
    big = s.submit(request(clock, prompt=5000), f)
    assert isinstance(big, Ticket)
    smalls = [s.submit(request(clock, prompt=10), f) for _ in range(3)]
    assert {t.backend for t in smalls if isinstance(t, Ticket)} == {"a", "b"} - {big.backend}
    s.release(big, Ending(Outcome.COMPLETED))


def test_session_affinity_is_sticky_and_spills_when_home_is_full() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    views = (
        backend("a", max_num_seqs=1),
        backend("b", max_num_seqs=1),
        backend("c", max_num_seqs=1),
    )
    f = fleet(clock, *views)
    home = home_backend("sess-42", views).name
    first = s.submit(request(clock, session_id="sess-42", prompt=9000), f)
    assert isinstance(first, Ticket) and first.backend == home
    spill = s.submit(request(clock, session_id="sess-42"), f)
    assert isinstance(spill, Ticket) and spill.backend != home
    s.release(first, Ending(Outcome.COMPLETED))
    again = s.submit(request(clock, session_id="sess-42"), f)
    assert isinstance(again, Ticket) and again.backend == home
    for gone in {"a", "b", "c"} - {home}:  # removing another backend never moves the session
        assert home_backend("sess-42", tuple(v for v in views if v.name != gone)).name == home


def test_cap_max_tokens_caps_each_sequence_of_a_fan_out() -> None:
    """n=10 at 100 tokens each, capped to 8: 80 output tokens are left, not 8."""
    clock = ManualClock()
    steps = [{"name": "cap", "at": 0.1, "action": "cap_max_tokens", "max_tokens": 8}]
    s = scheduler(clock, {"ladder": {"steps": steps}})
    req = request(clock, model="big", max_tokens=100)
    fan_out = dataclasses.replace(req, estimate=WorkEstimate(100, 10 * 100, 10))
    out = s.submit(fan_out, fleet_at(clock, 0.5))
    assert isinstance(out, Ticket) and out.request.max_tokens == 8
    assert out.request.estimate == WorkEstimate(100, 10 * 8, 10)
