"""``server_signals``: the default limit. Let the server speak (docs/policies.md).

No capacity is typed in. A backend takes one more request while its own signals say it has
room: not stale, its queue (``waiting``) at most ``max_waiting``, KV usage at most
``max_kv_usage``, queue time under ``max_queue_time_s`` when set, and fewer in flight than
``max_num_seqs`` when the backend's config states it (the engine's own number: past it,
requests would only wait inside vLLM, out of reach of fairness and deadlines).

Between two scrapes the signals cannot see what was just sent, so growth is bounded by the
engine's own count: at most twice what it reports ``running`` (slow start; it doubles per
fresh signal while the queue stays empty), but never below what the engine is known to
hold: its slots when the backend's config states ``max_num_seqs`` (``capacity_estimate``:
those slots, fewer when the KV cache cannot hold that many of the p90 prompt), else the
most it was seen running at once (``running_peak``). So after a quiet period (``running``
0) a backend takes again at once what it ran before, and a burst fills every known free
slot in one dispatch instead of two per backend per scrape. A backend with nothing of
ours in flight always takes one request, so a stale or silent backend is probed rather
than starved.
With several gateway replicas, the fuse and the engine's slots are shared: the requests
other replicas have in flight there (``peer_in_flight``) are taken off them.
"""

from __future__ import annotations

import math

from policies.backends import BackendView
from policies.contracts import BackendLoad, Limit
from policies.limits.server_signals_params import ServerSignalsParams


class ServerSignals(Limit[None, ServerSignalsParams]):
    type_name = "server_signals"
    params_model = ServerSignalsParams

    def has_room(self, state: None, backend: BackendView, load: BackendLoad) -> bool:
        n = load.in_flight
        return n == 0 or n < self.room_bound(backend)

    def current(self, state: None, backend: BackendView, load: BackendLoad) -> float | None:
        return None if backend.max_num_seqs is None else float(backend.max_num_seqs)

    def room_bound(self, backend: BackendView) -> float:
        """The room rule as a number read once per snapshot: ``has_room`` is
        ``load.in_flight == 0 or load.in_flight < room_bound(backend)``. -inf when the engine
        says it is full (stale signal, too many waiting, KV cache or queue time past their
        bounds): only an idle backend takes one. Otherwise the least of the fuse, the
        engine's slots and, in slow start, twice what it reports running or what it is
        known to hold, whichever is more. The signals alone decide, so the state plays no
        part."""
        p = self.params
        waiting, kv, qt = backend.waiting, backend.kv_cache_usage, backend.queue_time_p50_s
        if (
            backend.stale
            or (waiting is not None and waiting > p.max_waiting)
            or (kv is not None and kv > p.max_kv_usage)
            or (p.max_queue_time_s is not None and qt is not None and qt > p.max_queue_time_s)
        ):
            return -math.inf
        bound = math.inf if p.fuse is None else float(p.fuse)
        seqs = backend.max_num_seqs
        if seqs is not None and seqs < bound:
            bound = float(seqs)
        bound -= backend.peer_in_flight  # other replicas' share of the fuse and the slots
        running = backend.running
        if p.slow_start and running is not None:
            slow = 2 * (running if running > 1.0 else 1.0)  # 2 * max(1.0, running)
            known = backend.capacity_estimate if seqs is not None else backend.running_peak
            if known is not None and known > slow:
                slow = known
            if slow < bound:
                bound = slow
        return bound
