"""Parameters of ``fixed.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class FixedParams(Params):
    max_in_flight: int = Field(gt=0)
