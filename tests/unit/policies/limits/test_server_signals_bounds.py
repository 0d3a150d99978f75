"""``server_signals`` room bound read number by number: each signal at, just past and far
from its bound, on two backends whose engine numbers differ (slots, running) and two
parameter sets that differ in every field the limit reads."""

from __future__ import annotations

import math
from typing import Any

import pytest

from policies.contracts import BackendLoad
from policies.limits.server_signals import ServerSignals
from policies.limits.server_signals_params import ServerSignalsParams
from tests.unit.policies.helpers import backend

LOOSE = ServerSignals(ServerSignalsParams())  # max_waiting 1, kv 0.9, no queue-time bound
STRICT = ServerSignals(
    ServerSignalsParams(
        max_waiting=3.0, max_kv_usage=0.5, max_queue_time_s=0.25, slow_start=False, fuse=24
    )
)
SMALL = backend("small", max_num_seqs=6, running=2.0, waiting=0.0, kv_cache_usage=0.2)
LARGE = backend("large", max_num_seqs=64, running=20.0, waiting=0.0, kv_cache_usage=0.2)


def bound(limit: ServerSignals, **signals: Any) -> float:
    return limit.room_bound(backend("b", max_num_seqs=64, running=20.0, **signals))


def test_the_least_of_slots_and_slow_start_bounds_each_backend() -> None:
    assert LOOSE.room_bound(SMALL) == 4.0  # twice running (2) under the 6 slots
    assert LOOSE.room_bound(LARGE) == 40.0  # twice running (20) under the 64 slots
    assert STRICT.room_bound(SMALL) == 6.0  # no slow start: the slots, under the fuse of 24
    assert STRICT.room_bound(LARGE) == 24.0  # the fuse, under the 64 slots


def test_slow_start_doubles_at_least_one_running() -> None:
    assert LOOSE.room_bound(backend("b", running=1.5)) == 3.0
    assert LOOSE.room_bound(backend("b", running=0.5)) == 2.0
    assert LOOSE.room_bound(backend("b", running=0.0)) == 2.0
    assert LOOSE.room_bound(backend("b")) == math.inf  # nothing measured, nothing typed in


def test_slow_start_opens_to_what_the_engine_is_known_to_hold() -> None:
    """Past twice its running count, slow start opens to the engine's measured capacity
    where it states its slots, and to the most it was seen running where it does not: each
    is the known number of its own kind of backend, not the other's."""
    stated = backend("b", max_num_seqs=8, running=1.0, capacity_estimate=6.0, running_peak=3.0)
    assert LOOSE.room_bound(stated) == 6.0  # the capacity measured, under the 8 slots
    unstated = backend("b", running=1.0, capacity_estimate=6.0, running_peak=3.0)
    assert LOOSE.room_bound(unstated) == 3.0  # the peak seen running


def test_a_fuse_alone_bounds_a_backend_that_states_no_slots() -> None:
    assert STRICT.room_bound(backend("b", running=5.0)) == 24.0


@pytest.mark.parametrize(
    ("limit", "at", "past"),
    [
        (LOOSE, {"waiting": 1.0}, {"waiting": 1.01}),
        (STRICT, {"waiting": 3.0}, {"waiting": 3.01}),
        (LOOSE, {"kv_cache_usage": 0.9}, {"kv_cache_usage": 0.901}),
        (STRICT, {"kv_cache_usage": 0.5}, {"kv_cache_usage": 0.501}),
        (STRICT, {"queue_time_p50_s": 0.25}, {"queue_time_p50_s": 0.26}),
    ],
)
def test_a_signal_at_its_bound_leaves_room_and_just_past_it_closes_the_backend(
    limit: ServerSignals, at: dict[str, float], past: dict[str, float]
) -> None:
    assert bound(limit, **at) > 0
    assert bound(limit, **past) == -math.inf


def test_queue_time_is_ignored_without_its_bound_and_a_stale_signal_closes() -> None:
    assert bound(LOOSE, queue_time_p50_s=100.0) == 40.0
    assert bound(LOOSE, stale=True) == -math.inf
    assert bound(STRICT, stale=True) == -math.inf


def test_only_an_idle_backend_takes_one_when_the_engine_says_it_is_full() -> None:
    full = backend("b", max_num_seqs=6, waiting=9.0)
    assert LOOSE.has_room(None, full, BackendLoad(in_flight=0)) is True
    assert LOOSE.has_room(None, full, BackendLoad(in_flight=1)) is False
    assert LOOSE.has_room(None, SMALL, BackendLoad(in_flight=3)) is True
    assert LOOSE.has_room(None, SMALL, BackendLoad(in_flight=4)) is False


def test_the_current_limit_reported_is_the_engines_slot_count() -> None:
    assert LOOSE.current(None, SMALL, BackendLoad()) == 6.0
    assert STRICT.current(None, LARGE, BackendLoad()) == 64.0
    assert LOOSE.current(None, backend("b"), BackendLoad()) is None
