"""``fixed``: a fixed in-flight cap per backend, like vLLM's ``max_num_seqs``.

The blunt baseline (docs/seed-table.md): it bounds the wait, but sheds by count, starting to queue
at a fixed occupancy even when the queued work is short. The number is the operator's,
typed into the YAML; nothing here guesses one. It caps the gateway fleet's requests: other
replicas' in flight (``peer_in_flight``) count with this one's.
"""

from __future__ import annotations

from policies.backends import BackendView
from policies.contracts import BackendLoad, Limit
from policies.limits.fixed_params import FixedParams


class FixedCap(Limit[None, FixedParams]):
    type_name = "fixed"
    params_model = FixedParams

    def new_state(self) -> None:
        return None

    def has_room(self, state: None, backend: BackendView, load: BackendLoad) -> bool:
        return load.in_flight + backend.peer_in_flight < self.params.max_in_flight

    def current(self, state: None, backend: BackendView, load: BackendLoad) -> float | None:
        return float(self.params.max_in_flight)
