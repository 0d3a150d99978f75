"""Parameters of ``server_signals.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class ServerSignalsParams(Params):
    max_waiting: float = Field(default=1.0, ge=0)
    """Tolerated requests waiting inside the engine (a smoothed gauge)."""
    max_kv_usage: float = Field(default=0.9, gt=0, le=1)
    max_queue_time_s: float | None = Field(default=None, gt=0)
    slow_start: bool = True
    fuse: int | None = Field(default=None, gt=0)
    """Runaway fuse per backend: far above any real need, never the thing throttling."""
