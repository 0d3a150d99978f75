"""``fixed``: a fixed in-flight cap per backend, like vLLM's ``max_num_seqs``.

The blunt baseline (docs/seed-table.md): it bounds the wait, but sheds by count, starting to queue
at a fixed occupancy even when the queued work is short. The cap is ``max_in_flight`` when the
operator types one; without it, the cap is the engine's own slot count as the gateway knows it:
``max_num_seqs`` when the backend's config states it, else the capacity measured from the
engine's KV cache (``capacity_estimate``), else the most it was seen running at once
(``running_peak``). A backend with none of these known takes one request at a time while
nothing of ours is in flight there, so it is probed rather than starved. The cap counts the
gateway fleet's requests: other replicas' in flight (``peer_in_flight``) count with this one's.
"""

from __future__ import annotations

from policies.backends import BackendView
from policies.contracts import BackendLoad, Limit
from policies.limits.fixed_params import FixedParams


def engine_slots(backend: BackendView) -> float | None:
    """The requests the engine holds at once, as far as the gateway knows (None: unknown,
    which a measure below one slot also is: an engine never seen running is not full)."""
    if backend.max_num_seqs is not None:
        return float(backend.max_num_seqs)
    measured = backend.capacity_estimate
    if measured is None or measured < 1.0:
        measured = backend.running_peak
    return None if measured is None or measured < 1.0 else float(int(measured))


class FixedCap(Limit[None, FixedParams]):
    type_name = "fixed"
    params_model = FixedParams

    def has_room(self, state: None, backend: BackendView, load: BackendLoad) -> bool:
        held = load.in_flight + backend.peer_in_flight
        cap = self.current(state, backend, load)
        return held == 0 if cap is None else held < cap

    def current(self, state: None, backend: BackendView, load: BackendLoad) -> float | None:
        typed = self.params.max_in_flight
        return engine_slots(backend) if typed is None else float(typed)
