"""Routing is part of dispatch: a backend that serves the model and has room, with the
least outstanding work (estimated tokens in flight), or the session's consistent-hash home.

Affinity uses rendezvous hashing: adding or removing a backend moves only the sessions that
hashed to it, so prefix caches stay warm (seed 002 §4). When the home backend has no room,
the request spills to the least-loaded backend that does, rather than waiting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

from policies.contracts import BackendLoad
from policies.fleet import BackendView

HasRoom = Callable[[BackendView], bool]


def affinity_score(session_id: str, backend: str) -> int:
    digest = hashlib.blake2b(f"{session_id}\x00{backend}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def home_backend(session_id: str, candidates: Sequence[BackendView]) -> BackendView:
    return max(candidates, key=lambda b: affinity_score(session_id, b.name))


def least_loaded(
    candidates: Sequence[BackendView], loads: Mapping[str, BackendLoad], has_room: HasRoom
) -> BackendView | None:
    best: BackendView | None = None
    best_key: tuple[int, int, str] | None = None
    for b in candidates:
        load = loads.get(b.name) or BackendLoad()
        key = (load.in_flight_tokens, load.in_flight, b.name)
        if (best_key is None or key < best_key) and has_room(b):
            best, best_key = b, key
    return best


def choose_backend(
    candidates: Sequence[BackendView],
    session_id: str | None,
    loads: Mapping[str, BackendLoad],
    has_room: HasRoom,
) -> BackendView | None:
    """The backend to dispatch to now, or None when none of ``candidates`` has room."""
    if not candidates:
        return None
    if session_id:
        home = home_backend(session_id, candidates)
        if has_room(home):
            return home
    return least_loaded(candidates, loads, has_room)
