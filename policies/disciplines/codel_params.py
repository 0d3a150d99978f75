"""Parameters of ``codel.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from policies.params import Params


class CodelParams(Params):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"target_s": 0.5, "interval_s": 3.0}]}
    )
    target_s: float = Field(default=5.0, gt=0)
    interval_s: float = Field(default=50.0, gt=0)

    @model_validator(mode="after")
    def _target_below_interval(self) -> CodelParams:
        if self.target_s >= self.interval_s:
            raise ValueError("target_s must be below interval_s")
        return self
