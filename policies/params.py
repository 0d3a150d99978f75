"""Every policy's YAML parameters: the pydantic models that validate a policy file.

One model per registered policy (``Plugin.params_model``), plus the queue, ladder,
Retry-After and headroom sections of a policy set. Unknown keys are config errors; every
model is frozen, so a loaded policy never changes under the scheduler.

Kept apart from the decision code on purpose, so that the modules that decide (the
scheduler and the policies' hot hooks) can be compiled with mypyc: pydantic inspects its
validators as plain Python functions, which a compiled module does not have. The build
(``setup.py``) compiles the other modules; ``tests/unit/policies/test_params_apart.py`` keeps
pydantic out of them.
Sections are named after the module whose policy reads them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# -- contracts -----------------------------------------------------------------


class Params(BaseModel):
    """Base of every policy parameter model: unknown keys are config errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(Params):
    pass


# -- retry_after ---------------------------------------------------------------


class RetryAfterParams(Params):
    """Bounds in seconds; ``jitter`` is the largest fraction added (never subtracted, so a
    client that obeys the header is never told to come back before the budget returns)."""

    min_s: float = Field(default=0.5, gt=0)
    max_s: float = Field(default=60.0, gt=0)
    jitter: float = Field(default=0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> RetryAfterParams:
        if self.max_s < self.min_s:
            raise ValueError("max_s must be >= min_s")
        return self


# -- queue_codel ---------------------------------------------------------------


class CodelParams(Params):
    target_s: float = Field(default=5.0, gt=0)
    interval_s: float = Field(default=50.0, gt=0)

    @model_validator(mode="after")
    def _target_below_interval(self) -> CodelParams:
        if self.target_s >= self.interval_s:
            raise ValueError("target_s must be below interval_s")
        return self


# -- gate_codel_admission ------------------------------------------------------


class CodelAdmissionParams(CodelParams):
    """``target_s`` and ``interval_s`` in seconds, as for the ``codel`` discipline."""

    shed: Literal["control_law", "while_dropping"] = "control_law"


# -- gate_deadline -------------------------------------------------------------


class DeadlineParams(Params):
    wait_factor: float = Field(default=1.0, gt=0)


# -- gate_quota ----------------------------------------------------------------


class TenantLimits(Params):
    tokens_per_minute: int | None = Field(default=None, gt=0)
    burst_tokens: int | None = Field(default=None, gt=0)
    max_concurrent: int | None = Field(default=None, gt=0)


class QuotaParams(Params):
    default: TenantLimits = Field(default_factory=TenantLimits)
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)


# -- gate_reservation ----------------------------------------------------------


class ReservationParams(Params):
    target_wait_s: float = Field(default=10.0, gt=0)
    """The queue wait the gateway aims to hold, in seconds."""
    grace_s: float = Field(default=30.0, gt=0)
    """How long after its time an unclaimed reservation is kept, in seconds."""


# -- gate_retry ----------------------------------------------------------------


class RetryBudgetParams(Params):
    ratio: float = Field(default=0.1, gt=0, le=1)
    window_s: float = Field(default=10.0, gt=0)
    min_retries_per_s: float = Field(default=0.0, ge=0)
    per_tenant: bool = True


# -- fair_priority -------------------------------------------------------------


class PriorityParams(Params):
    starvation_after_s: float = Field(default=10.0, gt=0)


# -- headroom ------------------------------------------------------------------


class HeadroomParams(Params):
    reserve_fraction: float = Field(default=0.0, ge=0, lt=1)
    active_window_s: float = Field(default=30.0, gt=0)


# -- ladder --------------------------------------------------------------------

Action = Literal["shed_classes", "cap_max_tokens", "route_model", "reject"]


class LadderStep(Params):
    name: str = Field(min_length=1)
    at: float = Field(ge=0)
    hysteresis: float = Field(default=0.1, ge=0)
    action: Action
    classes: list[str] = Field(default_factory=list)
    """Workload classes the step applies to; empty means every class."""
    max_tokens: int | None = Field(default=None, gt=0)
    models: dict[str, str] = Field(default_factory=dict)
    """For route_model: requested model -> smaller alias."""
    shadow: bool = False

    @model_validator(mode="after")
    def _action_fields(self) -> LadderStep:
        if self.action == "cap_max_tokens" and self.max_tokens is None:
            raise ValueError("cap_max_tokens needs max_tokens")
        if self.action == "route_model" and not self.models:
            raise ValueError("route_model needs models")
        return self

    def applies_to(self, workload_class: str) -> bool:
        return not self.classes or workload_class in self.classes


class LadderParams(Params):
    waiting_scale: float = Field(default=5.0, gt=0)
    kv_scale: float = Field(default=0.8, gt=0)
    steps: list[LadderStep] = Field(
        default_factory=lambda: [
            LadderStep(name="cap-output", at=0.8, action="cap_max_tokens", max_tokens=512)
        ]
    )

    @model_validator(mode="after")
    def _unique_names(self) -> LadderParams:
        names = [s.name for s in self.steps]
        if len(names) != len(set(names)):
            raise ValueError("step names must be unique")
        return self


# -- limit_adaptive ------------------------------------------------------------


class AdaptiveParams(Params):
    signal: Literal["ttft", "queue_time"] = "ttft"
    target_s: float = Field(default=2.0, gt=0)
    backoff: float = Field(default=0.9, gt=0, lt=1)
    max_waiting: float = Field(default=0.5, ge=0)
    min_limit: float = Field(default=1.0, ge=1)


# -- limit_fixed ---------------------------------------------------------------


class FixedParams(Params):
    max_in_flight: int = Field(gt=0)


# -- limit_signals -------------------------------------------------------------


class ServerSignalsParams(Params):
    max_waiting: float = Field(default=1.0, ge=0)
    """Tolerated requests waiting inside the engine (a smoothed gauge)."""
    max_kv_usage: float = Field(default=0.9, gt=0, le=1)
    max_queue_time_s: float | None = Field(default=None, gt=0)
    slow_start: bool = True
    fuse: int | None = Field(default=None, gt=0)
    """Runaway fuse per backend: far above any real need, never the thing throttling."""


# -- registry ------------------------------------------------------------------


class QueueParams(Params):
    max_wait_s: float = Field(default=30.0, gt=0)
    """Longest a request without its own deadline may wait in the gateway queue."""
    max_queued_tokens: int | None = Field(default=None, gt=0)
    """Work-weighted bound on the whole queue (estimated tokens); None: time bound only."""
