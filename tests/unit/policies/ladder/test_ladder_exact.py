"""The degradation ladder read number by number: saturation from each signal (stale, waiting,
KV, none at all, the mean over backends), the hysteresis band at its edges, and what each
action changes in the request (and what it must leave alone)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.engine.scheduler import Ticket
from policies.ladder.ladder import apply_ladder, backend_saturation, pool_saturation, update_active
from policies.ladder.ladder_params import LadderParams
from policies.types import Degradation, Reason, RequestInfo, RunHints, WorkEstimate
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

SCALES = LadderParams(waiting_scale=4.0, kv_scale=0.5, steps=[])  # not the defaults (5, 0.8)


def req(**kw: Any) -> RequestInfo:
    fields: dict[str, Any] = {"model": "big", "max_tokens": None, "workload_class": "chat"}
    fields.update(kw)
    return RequestInfo(
        "r",
        "t",
        fields.pop("workload_class"),
        fields.pop("model"),
        WorkEstimate(300, 700),
        0.0,
        **fields,
    )


def ladder(*steps: dict[str, Any]) -> LadderParams:
    return LadderParams.model_validate({"steps": list(steps)})


def test_each_signal_over_its_own_scale_and_the_larger_one_wins() -> None:
    assert backend_saturation(backend(waiting=3.0, kv_cache_usage=0.1), SCALES) == 0.75
    assert backend_saturation(backend(waiting=1.0, kv_cache_usage=0.3), SCALES) == 0.6
    assert backend_saturation(backend(waiting=6.0), SCALES) == 1.5  # may exceed 1
    assert backend_saturation(backend(), SCALES) == 0.0  # no signal yet: nothing measured


def test_a_stale_backend_counts_as_saturated_whatever_it_last_said() -> None:
    assert backend_saturation(backend(waiting=0.0, kv_cache_usage=0.0, stale=True), SCALES) == 1.0
    assert backend_saturation(backend(waiting=40.0, stale=True), SCALES) == 1.0


def test_the_pool_is_the_mean_over_its_backends_and_saturated_when_empty() -> None:
    calm = backend("a", waiting=1.0, kv_cache_usage=0.05)  # 0.25
    busy = backend("b", waiting=0.0, kv_cache_usage=0.4)  # 0.8
    stale = backend("c", stale=True)  # 1.0
    assert pool_saturation([calm, busy], SCALES) == pytest.approx(0.525)
    assert pool_saturation([calm, busy, stale], SCALES) == pytest.approx(2.05 / 3)
    assert pool_saturation([busy], SCALES) == 0.8
    assert pool_saturation([], SCALES) == 1.0


def test_a_step_turns_on_at_its_threshold_and_off_only_below_the_band() -> None:
    params = ladder(
        {"name": "low", "at": 0.5, "hysteresis": 0.2, "action": "reject"},
        {"name": "high", "at": 0.9, "hysteresis": 0.05, "action": "reject"},
    )
    active: set[str] = set()
    update_active(active, params, 0.49)
    assert active == set()
    update_active(active, params, 0.5)
    assert active == {"low"}
    update_active(active, params, 0.9)
    assert active == {"low", "high"}
    update_active(active, params, 0.85)  # "high": 0.85 is the band's lower edge, stays on
    assert active == {"low", "high"}
    update_active(active, params, 0.3)  # "low": the edge again
    assert active == {"low"}
    update_active(active, params, 0.29)
    assert active == set()


CAP = {"name": "cap", "at": 0.1, "action": "cap_max_tokens", "max_tokens": 256}
ROUTE = {"name": "route", "at": 0.1, "action": "route_model", "models": {"big": "small"}}


def test_a_cap_lowers_max_tokens_and_the_output_estimate_never_raises_them() -> None:
    params, on = ladder(CAP), {"cap"}
    capped = apply_ladder(req(max_tokens=1000), on, params, frozenset({"big"}))
    assert capped.request.max_tokens == 256
    assert capped.request.estimate == WorkEstimate(300, 256)
    assert capped.degradation == Degradation(steps=("cap",), max_tokens=256)
    unset = apply_ladder(req(), on, params, frozenset({"big"}))
    assert unset.request.max_tokens == 256 and unset.degradation.steps == ("cap",)
    for small in (100, 256):  # already within the cap: untouched, not counted as degraded
        kept = apply_ladder(req(max_tokens=small), on, params, frozenset({"big"}))
        assert kept.request.max_tokens == small and kept.degradation == Degradation()
        assert kept.request.estimate == WorkEstimate(300, 700)


def test_a_cap_that_skips_runs_leaves_a_call_of_a_run_whole_and_caps_the_others() -> None:
    params, on = ladder({**CAP, "skip_runs": True}), {"cap"}
    call = apply_ladder(req(max_tokens=1000, run=RunHints("run-1")), on, params, frozenset())
    assert call.request.max_tokens == 1000 and call.degradation == Degradation()
    plain = apply_ladder(req(max_tokens=1000), on, params, frozenset())
    assert plain.request.max_tokens == 256 and plain.degradation.steps == ("cap",)
    capped = apply_ladder(req(max_tokens=1000, run=RunHints("run-1")), on, ladder(CAP), frozenset())
    assert capped.request.max_tokens == 256  # without skip_runs a run's call is capped too


def test_a_cap_above_the_output_estimate_keeps_the_estimate() -> None:
    params = ladder({**CAP, "max_tokens": 900})
    out = apply_ladder(req(max_tokens=5000), {"cap"}, params, frozenset({"big"}))
    assert out.request.max_tokens == 900 and out.request.estimate == WorkEstimate(300, 700)


def test_a_degrade_goes_only_to_a_model_some_backend_serves() -> None:
    params, on = ladder(ROUTE), {"route"}
    unserved = apply_ladder(req(), on, params, frozenset({"big"}))
    assert unserved.request.model == "big" and unserved.degradation == Degradation()
    routed = apply_ladder(req(), on, params, frozenset({"big", "small"}))
    assert routed.request.model == "small"
    assert routed.degradation == Degradation(steps=("route",), model="small")
    other = apply_ladder(req(model="tiny"), on, params, frozenset({"big", "small", "tiny"}))
    assert other.request.model == "tiny" and other.degradation == Degradation()


def test_a_route_step_routes_even_when_it_names_max_tokens() -> None:
    params = ladder({**ROUTE, "max_tokens": 8})
    out = apply_ladder(req(max_tokens=4000), {"route"}, params, frozenset({"big", "small"}))
    assert out.request.model == "small" and out.request.max_tokens == 4000
    assert out.degradation == Degradation(steps=("route",), model="small")


def test_steps_combine_in_order_and_a_reject_keeps_what_came_before() -> None:
    params = ladder(CAP, ROUTE, {"name": "no", "at": 0.1, "action": "reject", "classes": ["batch"]})
    served, on = frozenset({"big", "small"}), {"cap", "route", "no"}
    both = apply_ladder(req(max_tokens=4000), on, params, served)
    assert both.degradation == Degradation(steps=("cap", "route"), max_tokens=256, model="small")
    assert both.reject is None and both.request.model == "small"
    rejected = apply_ladder(req(workload_class="batch"), on, params, served)
    assert rejected.reject is Reason.OVERLOADED
    assert rejected.degradation.steps == ("cap", "route")
    shed = apply_ladder(
        req(), {"x"}, ladder({**CAP, "name": "x", "action": "shed_classes"}), served
    )
    assert shed.reject is Reason.CLASS_SHED


def test_inactive_and_other_class_steps_are_skipped_and_shadow_steps_only_recorded() -> None:
    params = ladder({**CAP, "shadow": True, "classes": ["chat"]}, ROUTE)
    served = frozenset({"big", "small"})
    out = apply_ladder(req(max_tokens=4000), {"cap", "route"}, params, served)
    assert out.request.max_tokens == 4000 and out.shadowed == ("ladder:cap",)
    assert out.degradation == Degradation(steps=("route",), model="small")
    assert apply_ladder(req(max_tokens=4000), set(), params, served).degradation == Degradation()
    batch = apply_ladder(req(max_tokens=4000, workload_class="batch"), {"cap"}, params, served)
    assert batch.shadowed == () and batch.request.max_tokens == 4000


STEP_AT_HALF = {
    "ladder": {
        "steps": [
            {
                "name": "cap",
                "at": 0.5,
                "hysteresis": 0.0,
                "action": "cap_max_tokens",
                "max_tokens": 16,
            }
        ]
    }
}


@pytest.mark.parametrize(
    ("signals", "degraded"),
    [
        ({"waiting": 2.4}, False),  # 2.4 / 5 = 0.48
        ({"waiting": 2.5}, True),  # 0.5: the threshold
        ({"kv_cache_usage": 0.4}, True),  # 0.4 / 0.8
        ({"stale": True}, True),
    ],
)
def test_the_scheduler_degrades_on_each_signal(signals: dict[str, Any], degraded: bool) -> None:
    clock = ManualClock()
    s = scheduler(clock, STEP_AT_HALF)
    out = s.submit(request(clock, max_tokens=64), fleet(clock, backend(**signals)))
    assert isinstance(out, Ticket)
    assert out.decision.degradation.steps == (("cap",) if degraded else ())


def test_the_scheduler_averages_the_backends_serving_the_model() -> None:
    clock = ManualClock()
    s = scheduler(clock, STEP_AT_HALF)
    calm, hot = backend("a", kv_cache_usage=0.0), backend("b", kv_cache_usage=0.72)  # 0, 0.9
    other = backend("c", models=("x",), stale=True)  # serves another model: not averaged
    out = s.submit(request(clock, max_tokens=64), fleet(clock, calm, hot, other))
    assert isinstance(out, Ticket) and out.decision.degradation.steps == ()  # mean 0.45
    hotter = backend("b", kv_cache_usage=0.8)  # 1.0: mean 0.5
    out = s.submit(request(clock, max_tokens=64), fleet(clock, calm, hotter, other))
    assert isinstance(out, Ticket) and out.decision.degradation.steps == ("cap",)
