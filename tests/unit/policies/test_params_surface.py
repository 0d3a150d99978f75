"""The parameter models of the plugins, to the number: every default an operator gets without
writing it (the values docs/policies.md states), every bound at and beside its edge, the
cross-field rules (codel's target below its interval, a ladder step's action fields, unique
step names), and the example each model hands the conformance suite."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from policies.disciplines.codel_params import CodelParams
from policies.fairness.priority_params import PriorityParams
from policies.gates.codel_admission_params import CodelAdmissionParams
from policies.gates.deadline_params import DeadlineParams
from policies.gates.quota_params import QuotaCounts, QuotaParams, TenantLimits
from policies.gates.reservation_params import ReservationParams
from policies.gates.retry_budget_params import RetryBudgetParams
from policies.ladder.ladder_params import LadderParams, LadderStep
from policies.limits.adaptive_params import AdaptiveParams
from policies.limits.fixed_params import FixedParams
from policies.limits.server_signals_params import ServerSignalsParams
from policies.params import Params

DEFAULTS: list[tuple[type[Params], dict[str, Any]]] = [
    (CodelParams, {"target_s": 5.0, "interval_s": 50.0}),
    (CodelAdmissionParams, {"target_s": 5.0, "interval_s": 50.0, "shed": "control_law"}),
    (PriorityParams, {"starvation_after_s": 10.0}),
    (DeadlineParams, {"wait_factor": 1.0}),
    (
        RetryBudgetParams,
        {"ratio": 0.1, "window_s": 10.0, "min_retries_per_s": 0.0, "per_tenant": True},
    ),
    (ReservationParams, {"target_wait_s": 10.0, "grace_s": 30.0}),
    (
        AdaptiveParams,
        {"signal": "ttft", "target_s": 2.0, "backoff": 0.9, "max_waiting": 0.5, "min_limit": 1.0},
    ),
    (
        ServerSignalsParams,
        {
            "max_waiting": 1.0,
            "max_kv_usage": 0.9,
            "max_queue_time_s": None,
            "slow_start": True,
            "fuse": None,
        },
    ),
    (TenantLimits, {"tokens_per_minute": None, "burst_tokens": None, "max_concurrent": None}),
    (QuotaParams, {"default": TenantLimits(), "tenants": {}, "counts": QuotaCounts.PROMPT_TOKENS}),
]


@pytest.mark.parametrize(("model", "expected"), DEFAULTS, ids=lambda x: getattr(x, "__name__", ""))
def test_the_defaults(model: type[Params], expected: dict[str, Any]) -> None:
    assert model().model_dump() == {
        k: v.model_dump() if isinstance(v, Params) else v for k, v in expected.items()
    }


def test_the_ladders_defaults() -> None:
    ladder = LadderParams()
    assert (ladder.waiting_scale, ladder.kv_scale) == (5.0, 0.8)
    (step,) = ladder.steps
    assert (step.name, step.at, step.action, step.max_tokens) == (
        "cap-output",
        0.8,
        "cap_max_tokens",
        512,
    )
    assert (step.hysteresis, step.classes, step.models, step.shadow) == (0.1, [], {}, False)


# (model, field, the other fields a valid instance needs, bounds): each bound is checked at its
# edge and half a unit (one for integers) to the side it allows and the side it refuses.
BOUNDS: list[tuple[type[Params], str, dict[str, Any], list[str]]] = [
    (CodelParams, "target_s", {"interval_s": 100.0}, ["gt 0"]),
    (CodelParams, "interval_s", {"target_s": 0.25}, ["gt 0"]),
    (PriorityParams, "starvation_after_s", {}, ["gt 0"]),
    (DeadlineParams, "wait_factor", {}, ["gt 0"]),
    (RetryBudgetParams, "ratio", {}, ["gt 0", "le 1"]),
    (RetryBudgetParams, "window_s", {}, ["gt 0"]),
    (RetryBudgetParams, "min_retries_per_s", {}, ["ge 0"]),
    (ReservationParams, "target_wait_s", {}, ["gt 0"]),
    (ReservationParams, "grace_s", {}, ["gt 0"]),
    (AdaptiveParams, "target_s", {}, ["gt 0"]),
    (AdaptiveParams, "backoff", {}, ["gt 0", "lt 1"]),
    (AdaptiveParams, "max_waiting", {}, ["ge 0"]),
    (AdaptiveParams, "min_limit", {}, ["ge 1"]),
    (ServerSignalsParams, "max_waiting", {}, ["ge 0"]),
    (ServerSignalsParams, "max_kv_usage", {}, ["gt 0", "le 1"]),
    (ServerSignalsParams, "max_queue_time_s", {}, ["gt 0"]),
    (ServerSignalsParams, "fuse", {}, ["int gt 0"]),
    (FixedParams, "max_in_flight", {}, ["int gt 0"]),
    (TenantLimits, "tokens_per_minute", {}, ["int gt 0"]),
    (TenantLimits, "burst_tokens", {}, ["int gt 0"]),
    (TenantLimits, "max_concurrent", {}, ["int gt 0"]),
    (LadderParams, "waiting_scale", {}, ["gt 0"]),
    (LadderParams, "kv_scale", {}, ["gt 0"]),
    (LadderStep, "at", {"name": "s", "action": "reject"}, ["ge 0"]),
    (LadderStep, "hysteresis", {"name": "s", "at": 0.5, "action": "reject"}, ["ge 0"]),
    (LadderStep, "max_tokens", {"name": "s", "at": 0.5, "action": "reject"}, ["int gt 0"]),
]


def probes(bound: str) -> list[tuple[float, bool]]:
    """(value, accepted) at a bound and either side of it."""
    *kind, op, edge_text = bound.split()
    edge, step = float(edge_text), 1.0 if kind else 0.5
    below, above = edge - step, edge + step
    return {
        "gt": [(edge, False), (above, True)],
        "ge": [(edge, True), (below, False)],
        "lt": [(edge, False), (below, True)],
        "le": [(edge, True), (above, False)],
    }[op]


def accepts(model: type[Params], raw: dict[str, Any]) -> bool:
    try:
        model.model_validate(raw)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(("model", "name", "others", "bounds"), BOUNDS, ids=lambda x: str(x))
def test_each_bound_at_its_edge(
    model: type[Params], name: str, others: dict[str, Any], bounds: list[str]
) -> None:
    for bound in bounds:
        for value, ok in probes(bound):
            v: float | int = int(value) if bound.startswith("int") else value
            assert accepts(model, {**others, name: v}) is ok, (bound, v)


def test_a_ladder_step_needs_a_name_of_one_character_or_more() -> None:
    assert not accepts(LadderStep, {"name": "", "at": 0.5, "action": "reject"})
    assert accepts(LadderStep, {"name": "s", "at": 0.5, "action": "reject"})


def test_codel_needs_its_target_below_its_interval() -> None:
    assert not accepts(CodelParams, {"target_s": 3.0, "interval_s": 3.0})
    assert accepts(CodelParams, {"target_s": 2.5, "interval_s": 3.0})
    with pytest.raises(ValidationError, match="target_s must be below interval_s"):
        CodelAdmissionParams(target_s=4.0, interval_s=3.0)
    with pytest.raises(ValidationError) as info:  # refused for its own bound, not the order
        CodelParams.model_validate({"target_s": 0.25, "interval_s": 0})
    assert [(e["loc"], e["type"]) for e in info.value.errors()] == [
        (("interval_s",), "greater_than")
    ]


def test_a_ladder_step_has_the_fields_its_action_needs() -> None:
    base = {"name": "s", "at": 0.5}
    assert not accepts(LadderStep, {**base, "action": "cap_max_tokens"})
    assert accepts(LadderStep, {**base, "action": "cap_max_tokens", "max_tokens": 8})
    assert not accepts(LadderStep, {**base, "action": "route_model"})
    assert accepts(LadderStep, {**base, "action": "route_model", "models": {"big": "small"}})
    assert accepts(LadderStep, {**base, "action": "shed_classes"})
    assert accepts(LadderStep, {**base, "action": "reject"})


def test_ladder_step_names_are_unique() -> None:
    step = {"at": 0.5, "action": "reject"}
    assert not accepts(LadderParams, {"steps": [{**step, "name": "a"}, {**step, "name": "a"}]})
    assert accepts(LadderParams, {"steps": [{**step, "name": "a"}, {**step, "name": "b"}]})
    assert LadderParams.model_validate({"steps": []}).steps == []


def test_a_ladder_step_applies_to_its_classes_or_to_all() -> None:
    every = LadderStep(name="s", at=0.5, action="reject")
    batch = LadderStep(name="s", at=0.5, action="reject", classes=["batch"])
    assert every.applies_to("interactive") and every.applies_to("batch")
    assert batch.applies_to("batch") and not batch.applies_to("interactive")


def test_a_ladder_step_that_skips_runs_passes_over_their_calls_only() -> None:
    step = LadderStep(name="s", at=0.5, action="reject", skip_runs=True)
    assert step.applies_to("interactive") and not step.applies_to("interactive", in_run=True)
    every = LadderStep(name="s", at=0.5, action="reject")
    assert every.applies_to("interactive", in_run=True)
    assert every.applies_to("interactive", in_run=True, run_behind=True)
    assert not step.applies_to("interactive", in_run=True, run_behind=False)


def test_a_ladder_step_that_spares_runs_behind_pace_passes_over_those_calls_only() -> None:
    step = LadderStep.model_validate(
        {"name": "s", "at": 0.5, "action": "reject", "skip_runs": "behind_pace"}
    )
    assert not step.applies_to("chat", in_run=True, run_behind=True)
    assert step.applies_to("chat", in_run=True, run_behind=False)
    assert step.applies_to("chat", run_behind=True)  # no run: the flag is not its
    with pytest.raises(ValueError):
        LadderStep.model_validate({"name": "s", "at": 0.5, "action": "reject", "skip_runs": "x"})


def test_the_examples_handed_to_the_conformance_suite() -> None:
    codel = {"target_s": 0.5, "interval_s": 3.0}
    assert CodelParams.example() == codel and CodelAdmissionParams.example() == codel
    assert PriorityParams.example() == {"starvation_after_s": 2.0}
    assert RetryBudgetParams.example() == {"ratio": 0.2}
    assert ReservationParams.example() == {"target_wait_s": 0.5}
    assert AdaptiveParams.example() == {"target_s": 0.5}
    assert FixedParams.example() == {"max_in_flight": 2}
    assert QuotaParams.example() == {"default": {"tokens_per_minute": 6000, "max_concurrent": 4}}


def test_a_quota_names_its_tenants() -> None:
    quota = QuotaParams.model_validate({"tenants": {"a": {}, "b": {"max_concurrent": 1}}})
    assert quota.tenant_references() == [(("tenants", "a"), "a"), (("tenants", "b"), "b")]
    assert QuotaParams().tenant_references() == []
