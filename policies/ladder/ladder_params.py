"""Parameters of ``ladder.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from policies.params import Params

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
    skip_runs: bool | Literal["behind_pace"] = False
    """Calls of agent runs (``X-Agent-Run-Id``) pass this step untouched: a call of a run
    cut short costs its run a continuation call (docs/runs.md). ``behind_pace``: only while
    its run is behind the pace its deadline asks, or not started yet; a run ahead of its
    pace has the time for the continuation, and is cut like any call."""

    @model_validator(mode="after")
    def _action_fields(self) -> LadderStep:
        if self.action == "cap_max_tokens" and self.max_tokens is None:
            raise ValueError("cap_max_tokens needs max_tokens")
        if self.action == "route_model" and not self.models:
            raise ValueError("route_model needs models")
        return self

    def applies_to(
        self, workload_class: str, in_run: bool = False, run_behind: bool = False
    ) -> bool:
        """Whether the step applies to a request of ``workload_class`` (``in_run``: a call
        of an agent run; ``run_behind``: its run is behind its pace, or not started)."""
        if in_run and (self.skip_runs is True or (self.skip_runs == "behind_pace" and run_behind)):
            return False
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
