"""Parameters of ``headroom.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class HeadroomParams(Params):
    reserve_fraction: float = Field(default=0.125, ge=0, lt=1)
    active_window_s: float = Field(default=30.0, gt=0)
    hold_arrivals: bool = False
    """True: the reserve also holds back a request that arrives with nobody waiting in the
    gateway queue (its tenant over its share queues while slots are free). False: only
    requests waiting in the queue are held, so a tenant without a backlog takes a free slot
    at once and the reserve forms from a flood's own backlog as its requests end."""
    decode_slowdown_max: float | None = Field(default=None, gt=1)
    """While the model's engines step more than this many times slower than their lightest
    recent batch (their inter-token latency against its floor), a tenant holding its
    weighted share of the estimated tokens in flight there (of the slots, when its
    sequences are alone in the batch) adds none, so the batch shrinks back until the
    others' decode is within this factor. None: off."""
    route_around_prefill: bool = False
    """While two or more tenants are active, a request (without a session) goes to the
    backend with room whose un-prefilled prompts are estimated to clear first (the least
    loaded among those that are clear), so a quiet tenant's short prompt does not wait out
    another tenant's long prefill when another backend has none (``placement.py``)."""
