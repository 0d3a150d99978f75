"""Routing's exact choices: the (tokens, requests, name) order field by field, the room
rule's edges (an idle backend always has room, one at its bound has none), whether room
remains after the pick, and a session's home against the least-loaded backend."""

from __future__ import annotations

import hashlib
import math
from typing import Any

from policies.backends import BackendView
from policies.contracts import BackendLoad
from policies.engine.routing import (
    Bounded,
    any_room,
    choose_backend,
    home_backend,
    least_loaded,
    pick_within,
)
from policies.registry import build_policy
from tests.unit.policies.helpers import backend

FIXED_2 = build_policy({"limit": {"type": "fixed", "parameters": {"max_in_flight": 2}}}).limit


def _b(name: str, tokens: int, n: int, bound: float = 8.0) -> Bounded:
    return backend(name), BackendLoad(n, tokens), bound


def _pick(*candidates: Bounded) -> tuple[str | None, bool]:
    best, spare = pick_within(candidates)
    return (None if best is None else best.name), spare


def test_affinity_is_the_first_eight_bytes_of_blake2b_of_session_and_backend() -> None:
    views = [backend(f"b{i}") for i in range(5)]
    for sid in ("s1", "s2", "alpha", "β"):
        scores = {}
        for v in views:
            digest = hashlib.blake2b(f"{sid}\x00{v.name}".encode(), digest_size=8).digest()
            scores[v.name] = int.from_bytes(digest, "big")
        assert home_backend(sid, views).name == max(scores, key=scores.__getitem__)


def test_fewest_tokens_first_then_fewest_requests_then_the_name() -> None:
    assert _pick(_b("b2", 10, 1), _b("b1", 10, 2)) == ("b2", True)  # tokens tie: requests
    assert _pick(_b("b2", 10, 2), _b("b1", 10, 1)) == ("b1", True)
    assert _pick(_b("b1", 10, 1), _b("b2", 10, 1)) == ("b1", True)  # then the name
    assert _pick(_b("b2", 10, 1), _b("b1", 10, 1)) == ("b1", True)
    assert _pick(_b("b1", 5, 3), _b("b2", 9, 1)) == ("b1", True)  # tokens before requests
    assert _pick(_b("b2", 9, 1), _b("b1", 5, 3)) == ("b1", True)


def test_room_is_idle_or_under_the_bound() -> None:
    assert _pick(_b("b1", 0, 2, bound=2.0)) == (None, False)
    assert _pick(_b("b1", 0, 1, bound=-math.inf)) == (None, False)
    assert _pick(_b("b1", 50, 0, bound=-math.inf)) == ("b1", False)  # idle: one may go
    assert _pick(_b("b1", 0, 2, bound=2.0), _b("b2", 90, 1, bound=2.0)) == ("b2", False)


def test_room_remains_unless_the_only_backend_with_room_fills_with_this_one() -> None:
    assert _pick(_b("b1", 0, 0, bound=2.0)) == ("b1", True)  # 0 + 1 < 2
    assert _pick(_b("b1", 0, 1, bound=2.0)) == ("b1", False)  # 1 + 1 = 2
    assert _pick(_b("b1", 0, 1, bound=2.0), _b("b2", 5, 1, bound=2.0)) == ("b1", True)
    assert _pick(_b("b1", 0, 1, bound=2.0), _b("b2", 5, 0, bound=1.0)) == ("b1", True)
    three = (_b("b1", 0, 1, 2.0), _b("b2", 5, 1, 2.0), _b("b3", 9, 1, 2.0))
    assert _pick(*three) == ("b1", True)


def _cands(*pairs: tuple[BackendView, BackendLoad]) -> list[tuple[BackendView, BackendLoad]]:
    return list(pairs)


def test_least_loaded_skips_a_lighter_backend_without_room() -> None:
    light, heavy = backend("b1"), backend("b2")
    cands = _cands((light, BackendLoad(2, 10)), (heavy, BackendLoad(1, 500)))
    assert least_loaded(FIXED_2, None, cands) is heavy
    assert any_room(FIXED_2, None, cands)
    full = _cands((light, BackendLoad(2, 10)), (heavy, BackendLoad(2, 500)))
    assert least_loaded(FIXED_2, None, full) is None and not any_room(FIXED_2, None, full)
    assert least_loaded(FIXED_2, None, cands[::-1]) is heavy


def test_without_a_session_the_least_loaded_backend_whichever_comes_first() -> None:
    a, b = backend("b1"), backend("b2")
    for first, second in ((a, b), (b, a)):
        cands = _cands((first, BackendLoad(0, 10)), (second, BackendLoad(1, 200)))
        assert choose_backend(FIXED_2, None, cands, None) is first
        assert choose_backend(FIXED_2, None, cands, "") is first


def _session_homed_on(name: str, views: list[BackendView]) -> str:
    return next(f"s{i}" for i in range(100) if home_backend(f"s{i}", views).name == name)


def test_a_session_goes_home_while_it_has_room_else_to_the_least_loaded() -> None:
    a, b = backend("b1"), backend("b2")
    sid = _session_homed_on("b2", [a, b])
    loads: dict[str, Any] = {"b1": BackendLoad(0, 10), "b2": BackendLoad(1, 900)}
    cands = _cands((a, loads["b1"]), (b, loads["b2"]))
    assert choose_backend(FIXED_2, None, cands, sid) is b  # home, though heavier
    loads["b2"].in_flight = 2
    assert choose_backend(FIXED_2, None, cands, sid) is a  # home full: spills
    assert choose_backend(FIXED_2, None, [], sid) is None
    assert choose_backend(FIXED_2, None, [], None) is None
