"""Parameters of ``headroom.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class HeadroomParams(Params):
    reserve_fraction: float = Field(default=0.0, ge=0, lt=1)
    active_window_s: float = Field(default=30.0, gt=0)
