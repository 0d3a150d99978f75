"""Parameters of ``priority.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from policies.params import Params


class PriorityParams(Params):
    model_config = ConfigDict(json_schema_extra={"examples": [{"starvation_after_s": 2.0}]})
    starvation_after_s: float = Field(default=10.0, gt=0)
