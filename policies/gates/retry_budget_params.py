"""Parameters of ``retry_budget.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from policies.params import Params


class RetryBudgetParams(Params):
    model_config = ConfigDict(json_schema_extra={"examples": [{"ratio": 0.2}]})
    ratio: float = Field(default=0.1, gt=0, le=1)
    window_s: float = Field(default=10.0, gt=0)
    min_retries_per_s: float = Field(default=0.0, ge=0)
    per_tenant: bool = True
