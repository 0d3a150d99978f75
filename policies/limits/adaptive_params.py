"""Parameters of ``adaptive.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from policies.params import Params


class AdaptiveParams(Params):
    model_config = ConfigDict(json_schema_extra={"examples": [{"target_s": 0.5}]})
    signal: Literal["ttft", "queue_time"] = "ttft"
    target_s: float = Field(default=2.0, gt=0)
    backoff: float = Field(default=0.9, gt=0, lt=1)
    max_waiting: float = Field(default=0.5, ge=0)
    min_limit: float = Field(default=1.0, ge=1)
