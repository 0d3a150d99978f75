"""Degradation ladder: ordered steps applied as load rises, each with a saturation
threshold and hysteresis (a step turns on at ``at`` and off below ``at - hysteresis``).

Saturation is read from the backends' own signals, llm-d style: per backend
max(waiting / waiting_scale, kv_cache_usage / kv_scale), 1.0 when the signal is stale; the
pool value is the mean over backends serving the model. The gateway queue adds its own
pressure: the oldest queued request's age over the queue's wait bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from policies.backends import BackendView
from policies.ladder.ladder_params import LadderParams, LadderStep
from policies.native.quick_init import quick_init
from policies.types import Degradation, Reason, RequestInfo, WorkEstimate


def backend_saturation(b: BackendView, params: LadderParams) -> float:
    if b.stale:
        return 1.0
    waiting = (b.waiting or 0.0) / params.waiting_scale
    kv = (b.kv_cache_usage or 0.0) / params.kv_scale
    return max(waiting, kv)


def pool_saturation(backends: Sequence[BackendView], params: LadderParams) -> float:
    if not backends:
        return 1.0
    total = 0.0  # (left to right, as sum() adds)
    for b in backends:
        total += backend_saturation(b, params)
    return total / len(backends)


def update_active(active: set[str], params: LadderParams, saturation: float) -> None:
    """Turn steps on at ``at`` and off below ``at - hysteresis`` (in place)."""
    for step in params.steps:
        if saturation >= step.at:
            active.add(step.name)
        elif saturation < step.at - step.hysteresis:
            active.discard(step.name)


@quick_init
@dataclass(frozen=True, slots=True)
class LadderResult:
    request: RequestInfo
    degradation: Degradation
    shadowed: tuple[str, ...]
    reject: Reason | None = None


def apply_ladder(
    req: RequestInfo,
    active: set[str],
    params: LadderParams,
    served: frozenset[str],
    run_behind: bool = False,
) -> LadderResult:
    """Apply the active steps in order; ``served`` are the models some backend serves;
    ``run_behind``: ``req`` is a call of a run behind its pace (``LadderStep.skip_runs``)."""
    degradation = Degradation()
    shadowed: tuple[str, ...] = ()
    in_run = req.run is not None
    for step in params.steps:
        if step.name not in active or not step.applies_to(req.workload_class, in_run, run_behind):
            continue
        changed = _step(req, step, served)
        if changed is None:
            continue
        if step.shadow:
            shadowed += (f"ladder:{step.name}",)
            continue
        if isinstance(changed, Reason):
            return LadderResult(req, degradation, shadowed, reject=changed)
        req = changed
        degradation = Degradation(
            steps=(*degradation.steps, step.name),
            max_tokens=req.max_tokens
            if step.action == "cap_max_tokens"
            else degradation.max_tokens,
            model=req.model if step.action == "route_model" else degradation.model,
        )
    return LadderResult(req, degradation, shadowed)


def _step(
    req: RequestInfo, step: LadderStep, served: frozenset[str]
) -> RequestInfo | Reason | None:
    if step.action == "shed_classes":
        return Reason.CLASS_SHED
    if step.action == "reject":
        return Reason.OVERLOADED
    if step.action == "cap_max_tokens" and step.max_tokens is not None:
        cap = step.max_tokens
        if req.max_tokens is not None and req.max_tokens <= cap:
            return None
        before = req.estimate  # the cap holds per sequence
        est = WorkEstimate(
            before.prompt_tokens,
            min(before.output_tokens, cap * before.sequences),
            before.sequences,
        )
        return dataclasses.replace(req, max_tokens=cap, estimate=est)
    alias = step.models.get(req.model)
    if alias is None or alias not in served:
        return None
    return dataclasses.replace(req, model=alias)
