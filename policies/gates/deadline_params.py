"""Parameters of ``deadline.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class DeadlineParams(Params):
    wait_factor: float = Field(default=1.0, gt=0)
