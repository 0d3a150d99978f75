"""Parameters of ``reservation.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from policies.params import Params


class ReservationParams(Params):
    model_config = ConfigDict(json_schema_extra={"examples": [{"target_wait_s": 0.5}]})
    target_wait_s: float = Field(default=10.0, gt=0)
    """The queue wait the gateway aims to hold, in seconds."""
    grace_s: float = Field(default=30.0, gt=0)
    """How long after its time an unclaimed reservation is kept, in seconds."""
