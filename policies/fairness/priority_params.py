"""Parameters of ``priority.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class PriorityParams(Params):
    starvation_after_s: float = Field(default=10.0, gt=0)
