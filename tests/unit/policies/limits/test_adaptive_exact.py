"""``adaptive`` to the exact limit: where it starts (the engine's slots, else what it runs, else
the floor), the backoff factor and its floor, the slow-start step of 1 and the later step of
``1/limit``, the boundaries of ``target_s``, ``max_waiting`` and "the limit was in use", and
``peer_in_flight`` counted with this replica's requests. Backends differ in every number the
limit reads, so no backend's number can stand in for another's."""

from __future__ import annotations

from typing import Any

import pytest

from policies.backends import BackendView
from policies.contracts import BackendLoad
from policies.limits.adaptive import AdaptiveLimit, AdaptiveState
from policies.limits.adaptive_params import AdaptiveParams
from policies.types import Ending, Outcome
from tests.unit.policies.helpers import backend

TARGET, WAIT_CAP = 2.0, 1.5
SLOTS = backend("slots", max_num_seqs=8, running=5.0, waiting=0.0)  # the engine states its slots
RUNS = backend("runs", running=3.0, waiting=0.0)  # no slot count: what it runs
BLANK = backend("blank", waiting=0.0)  # neither: the floor


def limit(**params: Any) -> tuple[AdaptiveLimit, AdaptiveState]:
    raw = {"target_s": TARGET, "max_waiting": WAIT_CAP, "backoff": 0.75, **params}
    plugin = AdaptiveLimit(AdaptiveParams.model_validate(raw))
    return plugin, plugin.new_state()


def current(plugin: AdaptiveLimit, state: AdaptiveState, view: BackendView) -> float:
    return plugin.current(state, view, BackendLoad())


def sample(
    plugin: AdaptiveLimit,
    state: AdaptiveState,
    view: BackendView,
    in_flight: int,
    ttft_s: float | None = 0.1,
    dropped: bool = False,
) -> float:
    """One completion on ``view`` with ``in_flight`` still there; the limit after it."""
    end = Ending(Outcome.FAILED if dropped else Outcome.COMPLETED, ttft_s=ttft_s)
    plugin.on_sample(state, view, BackendLoad(in_flight), end)
    return current(plugin, state, view)


def test_the_limit_starts_from_the_engines_slots_else_what_it_runs_else_the_floor() -> None:
    plugin, state = limit()
    assert [current(plugin, state, v) for v in (SLOTS, RUNS, BLANK)] == [8.0, 3.0, 1.0]
    plugin, state = limit(min_limit=4.0)
    assert [current(plugin, state, v) for v in (SLOTS, RUNS, BLANK)] == [8.0, 4.0, 4.0]


def test_room_counts_this_replicas_and_the_peers_requests_against_the_limit() -> None:
    plugin, state = limit()
    peers = backend("slots", max_num_seqs=8, peer_in_flight=3)
    assert plugin.has_room(state, peers, BackendLoad(4))  # 4 + 3 < 8
    assert not plugin.has_room(state, peers, BackendLoad(5))  # 5 + 3 == 8
    assert plugin.has_room(state, SLOTS, BackendLoad(7))
    assert not plugin.has_room(state, SLOTS, BackendLoad(8))


@pytest.mark.parametrize(
    ("view", "ttft", "dropped"),
    [
        (SLOTS, 0.1, True),  # failed
        (SLOTS, TARGET + 0.01, False),  # slow
        (backend("slots", max_num_seqs=8, waiting=WAIT_CAP + 0.5), 0.1, False),  # queued
    ],
)
def test_a_backoff_multiplies_by_the_factor(view: BackendView, ttft: float, dropped: bool) -> None:
    plugin, state = limit()
    assert sample(plugin, state, view, 7, ttft, dropped) == 6.0  # 8 x 0.75
    assert state.slow_start["slots"] is False


def test_a_backoff_stops_at_the_floor() -> None:
    plugin, state = limit(min_limit=2.5)
    assert sample(plugin, state, RUNS, 2, dropped=True) == 2.5  # 3 x 0.75 = 2.25, floor 2.5
    plugin, state = limit()
    assert sample(plugin, state, BLANK, 0, dropped=True) == 1.0  # 0.75, floor 1


def test_exactly_at_the_target_and_at_max_waiting_is_no_backoff() -> None:
    plugin, state = limit()
    at_cap = backend("slots", max_num_seqs=8, waiting=WAIT_CAP)
    assert sample(plugin, state, at_cap, 0, ttft_s=TARGET) == 8.0


def test_slow_start_adds_one_per_completion_while_the_limit_is_in_use() -> None:
    plugin, state = limit()
    assert sample(plugin, state, SLOTS, 7) == 9.0  # 7 + 1 >= 8: in use
    assert sample(plugin, state, SLOTS, 7) == 9.0  # 7 + 1 < 9: not in use, no rise
    assert sample(plugin, state, SLOTS, 8) == 10.0
    assert sample(plugin, state, RUNS, 2, ttft_s=None) == 4.0  # no TTFT: no evidence against


def test_after_a_backoff_the_limit_rises_by_one_over_the_limit() -> None:
    plugin, state = limit()
    assert sample(plugin, state, SLOTS, 7, dropped=True) == 6.0
    assert sample(plugin, state, SLOTS, 5) == 6.0 + 1.0 / 6.0
    assert current(plugin, state, RUNS) == 3.0  # the other backend is untouched
    assert sample(plugin, state, RUNS, 2) == 4.0  # and still in slow start


def test_without_a_waiting_signal_the_limit_never_rises() -> None:
    plugin, state = limit()
    unknown = backend("runs", running=3.0)
    assert sample(plugin, state, unknown, 2) == 3.0
    assert sample(plugin, state, unknown, 2, dropped=True) == 2.25


def test_queue_time_signal_reads_the_backends_p50_not_the_ttft() -> None:
    plugin, state = limit(signal="queue_time")
    slow_queue = backend("slots", max_num_seqs=8, waiting=0.0, queue_time_p50_s=TARGET + 1)
    assert sample(plugin, state, slow_queue, 7, ttft_s=0.1) == 6.0
    fast_queue = backend("runs", running=3.0, waiting=0.0, queue_time_p50_s=0.1)
    assert sample(plugin, state, fast_queue, 2, ttft_s=TARGET + 1) == 4.0


def test_a_sample_without_a_backend_changes_nothing() -> None:
    plugin, state = limit()
    plugin.on_sample(state, None, BackendLoad(7), Ending(Outcome.FAILED, ttft_s=9.0))
    assert state.limits == {} and state.slow_start == {}
