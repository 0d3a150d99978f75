"""Routing is part of dispatch: a backend that serves the model and has room, with the
least outstanding work (estimated tokens in flight), or the session's consistent-hash home,
or (``cache.locality_weight``) the one where the request adds the least work, counting the
prompt tokens its prefix cache would not serve (``most_local``), or (``headroom.
route_around_prefill``, several tenants active) one whose pending prefill does not hold the
request longer than its own (``around_prefill``).

Affinity uses rendezvous hashing: adding or removing a backend moves only the sessions that
hashed to it, so prefix caches stay warm. When the home backend has no room,
the request spills to the least-loaded backend that does, rather than waiting.

Candidates come as (backend, the gateway's load on it) pairs, built once per snapshot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from policies.backends import BackendView
from policies.contracts import BackendLoad, Limit

Candidate = tuple[BackendView, BackendLoad]
Bounded = tuple[BackendView, BackendLoad, float]
"""A candidate with its limit's room bound: room is ``in_flight == 0 or in_flight < bound``."""
Local = tuple[BackendView, BackendLoad, int]
"""A candidate with room, and the prompt tokens its prefix cache is not expected to serve."""
Clearing = tuple[BackendView, BackendLoad, float]
"""A candidate with room, and the seconds until the prompts already sent to it are
estimated to have been prefilled (0 when none are pending)."""


def affinity_score(session_id: str, backend: str) -> int:
    digest = hashlib.blake2b(f"{session_id}\x00{backend}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def home_backend(session_id: str, backends: Sequence[BackendView]) -> BackendView:
    return max(backends, key=lambda b: affinity_score(session_id, b.name))


def _home(session_id: str, candidates: Sequence[Candidate]) -> Candidate:
    """``home_backend`` of the candidates' backends, with its load."""
    return max(candidates, key=lambda c: affinity_score(session_id, c[0].name))


def any_room(limit: Limit[Any, Any], state: Any, candidates: Sequence[Candidate]) -> bool:
    has_room = limit.has_room
    for b, load in candidates:  # noqa: SIM110 (a plain loop: no generator per call)
        if has_room(state, b, load):
            return True
    return False


def least_loaded(
    limit: Limit[Any, Any], state: Any, candidates: Sequence[Candidate]
) -> BackendView | None:
    """The candidate with room and the least (tokens, requests) in flight; ties by name."""
    has_room = limit.has_room
    best: BackendView | None = None
    best_key: tuple[int, int, str] | None = None
    for b, load in candidates:
        key = (load.in_flight_tokens, load.in_flight, b.name)
        if (best_key is None or key < best_key) and has_room(state, b, load):
            best, best_key = b, key
    return best


def least_loaded_within(candidates: Sequence[Bounded]) -> BackendView | None:
    """``least_loaded`` for a limit that states its room as bounds (``room_bound``)."""
    return pick_within(candidates)[0]


def pick_within(candidates: Sequence[Bounded]) -> tuple[BackendView | None, bool]:
    """``least_loaded_within``'s pick, and whether room may remain once it took one more
    request: False only when it is the one candidate with room and one more fills it.

    The key (tokens in flight, requests in flight, name) is compared field by field, in
    the order a tuple comparison would (no tuple per candidate)."""
    best: BackendView | None = None
    best_t = best_n = 0
    best_name = ""
    best_bound = 0.0
    rooms = 0
    for b, load, bound in candidates:
        n = load.in_flight
        if not (n == 0 or n < bound):
            continue
        rooms += 1
        t = load.in_flight_tokens
        if (
            best is None
            or t < best_t
            or (t == best_t and (n < best_n or (n == best_n and b.name < best_name)))
        ):
            best, best_t, best_n, best_name, best_bound = b, t, n, b.name, bound
    return best, rooms > 1 or best_n + 1 < best_bound


def choose_backend(
    limit: Limit[Any, Any],
    state: Any,
    candidates: Sequence[Candidate],
    session_id: str | None,
) -> BackendView | None:
    """The backend to dispatch to now, or None when none of ``candidates`` has room."""
    if not candidates:
        return None
    if session_id:
        home, load = _home(session_id, candidates)
        if limit.has_room(state, home, load):
            return home
    return least_loaded(limit, state, candidates)


def most_local(candidates: Sequence[Local], weight: float) -> BackendView | None:
    """The candidate where ``req`` adds the least work: its tokens in flight plus ``weight``
    times the prompt tokens its prefix cache would not serve (``uncached``). One unit for
    both: a backend's prefix hit saves prefill that another backend's lighter load must
    outweigh, token for token (``weight`` > 1 values a prefill token above a token in
    flight). Ties go to the fewer requests in flight, then by name. Every candidate must
    have room: saturation is the limit's to say, so locality never overfills a backend."""
    best: BackendView | None = None
    best_key: tuple[float, int, str] | None = None
    for b, load, uncached in candidates:
        key = (load.in_flight_tokens + weight * uncached, load.in_flight, b.name)
        if best_key is None or key < best_key:
            best, best_key = b, key
    return best


def around_prefill(candidates: Sequence[Clearing], own_s: float) -> BackendView | None:
    """The least-loaded candidate (``least_loaded``'s order), unless the prompts pending
    there would hold a request longer than its own prefill (``own_s``): then the one whose
    wait is shortest, ties by that order. A prompt like the others waits out about its own
    prefill wherever it goes and stays where load puts it; a short prompt behind another
    tenant's long one goes where none is pending."""
    best: BackendView | None = None
    best_key: tuple[int, int, str] | None = None
    best_wait = 0.0
    clear: BackendView | None = None
    clear_key: tuple[float, int, int, str] | None = None
    for b, load, wait_s in candidates:
        key = (load.in_flight_tokens, load.in_flight, b.name)
        if best_key is None or key < best_key:
            best, best_key, best_wait = b, key, wait_s
        waits = (wait_s, *key)
        if clear_key is None or waits < clear_key:
            clear, clear_key = b, waits
    return best if best_wait <= own_s else clear
