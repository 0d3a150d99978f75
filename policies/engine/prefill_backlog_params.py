"""Parameters of ``prefill_backlog.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class PrefillBacklogParams(Params):
    enabled: bool = True
    ttft_target_s: float = Field(default=0.25, gt=0)
    """How long the prompts already sent to a backend, and not yet answered with a first
    token, may keep a newly dispatched request from its own: the backlog bound is this
    times the backend's measured prefill rate."""
    half_life_s: float = Field(default=20.0, gt=0)
    """Memory of the prefill-rate meter: older samples weigh half after this long."""
    between_tenants: bool = False
    """True: the bound holds a request only while a tenant other than its own is active
    (submitted in the last ``headroom.active_window_s``). A tenant alone waits behind its
    own prompts, in its own order, whether they wait here or in the engine: holding them
    here protects nobody and adds the gateway's wait and its estimate's lag to theirs.
    False: every request is held (an overload then waits in the gateway queue)."""
