"""``adaptive``: an AIMD concurrency limit per backend, driven by the backend's own signals.

On each completion the limit backs off (x ``backoff``) when the request failed, its TTFT
(or the backend's queue-time p50, with ``signal: queue_time``) exceeded ``target_s``, or the
backend reports waiting above ``max_waiting``. It rises only while the backend reports no
waiting and the limit was actually in use: by one per completion until the first backoff
(slow start), then by ``1/limit`` per completion (about one per round trip). It starts
from the engine's own numbers (``max_num_seqs``, else what it reports running, at least 1);
no capacity is typed in. Other gateway replicas' requests there (``peer_in_flight``) count
against the limit with this one's.
"""

from __future__ import annotations

from policies.backends import BackendView
from policies.contracts import BackendLoad, Limit
from policies.limits.adaptive_params import AdaptiveParams
from policies.types import Ending, Outcome


class AdaptiveState:
    def __init__(self) -> None:
        self.limits: dict[str, float] = {}
        self.slow_start: dict[str, bool] = {}


class AdaptiveLimit(Limit[AdaptiveState, AdaptiveParams]):
    type_name = "adaptive"
    params_model = AdaptiveParams

    state_model = AdaptiveState

    def has_room(self, state: AdaptiveState, backend: BackendView, load: BackendLoad) -> bool:
        return load.in_flight + backend.peer_in_flight < self._limit(state, backend)

    def current(self, state: AdaptiveState, backend: BackendView, load: BackendLoad) -> float:
        return self._limit(state, backend)

    def on_sample(
        self, state: AdaptiveState, backend: BackendView | None, load: BackendLoad, end: Ending
    ) -> None:
        if backend is None:
            return
        p, name = self.params, backend.name
        limit = self._limit(state, backend)
        signal = end.ttft_s if p.signal == "ttft" else backend.queue_time_p50_s
        waiting = backend.waiting
        if (
            end.outcome is Outcome.FAILED
            or (signal is not None and signal > p.target_s)
            or (waiting is not None and waiting > p.max_waiting)
        ):
            state.limits[name] = max(p.min_limit, limit * p.backoff)
            state.slow_start[name] = False
        elif waiting is not None and load.in_flight + 1 >= limit:
            step = 1.0 if state.slow_start.get(name, True) else 1.0 / limit
            state.limits[name] = limit + step

    def _limit(self, state: AdaptiveState, backend: BackendView) -> float:
        limit = state.limits.get(backend.name)
        if limit is None:
            start = backend.max_num_seqs or backend.running or 1.0
            limit = state.limits[backend.name] = max(self.params.min_limit, float(start))
        return limit
