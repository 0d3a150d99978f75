"""Run reservations in the tokens the engine computes: a call's prompt tokens its backend's
prefix cache is expected to serve (``estimate.cached_prompt_tokens``) are neither reserved
nor drawn, and a completed call is corrected with what it computed; the calls' usage stays
whole in ``spent_tokens``; completed runs teach their flow what they computed."""

from __future__ import annotations

from policies.cache_estimate import with_cached_tokens
from policies.runs.coordinator import RunCoordinator
from policies.runs.run import Reservation, Run
from policies.runs.run_state import OpenRunState
from policies.types import Outcome, RequestInfo, RunHints, Usage
from tests.unit.policies.helpers import ManualClock, request
from tests.unit.policies.runs.test_run_coordinator import Host, entry


def _call(clock: ManualClock, run_id: str = "a") -> RequestInfo:
    """1,000 prompt tokens, 900 of them expected cached, 100 output: 200 computed."""
    return with_cached_tokens(request(clock, prompt=1000, output=100, run=RunHints(run_id)), 900)


def _opened(clock: ManualClock, runs: RunCoordinator, req: RequestInfo) -> None:
    plan = runs.check(req, clock())
    assert isinstance(plan, Reservation | Run)
    assert runs.admit(plan, entry(req, clock(), 1), ()) is None
    runs.dispatched(req, clock())


def _state(runs: RunCoordinator, run_id: str = "a") -> OpenRunState:
    state = runs.state("t1", run_id)
    assert isinstance(state, OpenRunState)
    return state


def test_a_run_without_hints_reserves_its_default_calls_of_uncached_prompt_and_output() -> None:
    clock = ManualClock()
    runs = RunCoordinator(Host(), clock)
    assert runs.check(_call(clock), clock()) == Reservation(4 * 200, 4, None, "default")


def test_a_call_draws_its_computed_tokens_and_is_corrected_with_what_it_computed() -> None:
    clock = ManualClock()
    runs = RunCoordinator(Host(), clock)
    call = _call(clock)
    _opened(clock, runs, call)
    assert (_state(runs).drawn_tokens, runs.stats().promised_tokens) == (200, 600)
    runs.released(call, Outcome.COMPLETED, Usage(1000, 120, cached_tokens=850), clock())
    # computed: 1,120 - 850 = 270, drawn in place of the estimated 200
    assert (_state(runs).drawn_tokens, runs.stats().promised_tokens) == (270, 530)
    assert _state(runs).spent_tokens == 1120


def test_without_cached_tokens_reported_the_estimates_cached_share_is_applied() -> None:
    clock = ManualClock()
    runs = RunCoordinator(Host(), clock)
    call = _call(clock)
    _opened(clock, runs, call)
    runs.released(call, Outcome.COMPLETED, Usage(1200, 100), clock())
    # 90 % of the 1,200 prompt tokens cached: 120 + 100 computed
    assert _state(runs).drawn_tokens == 220


def test_a_completed_run_teaches_its_flow_the_tokens_it_computed() -> None:
    clock = ManualClock()
    runs = RunCoordinator(Host(), clock)
    for call in (_call(clock), _call(clock)):
        _opened(clock, runs, call)
        runs.released(call, Outcome.COMPLETED, Usage(1000, 100, cached_tokens=900), clock())
    assert runs.end("t1", "a", cancel=False) == []
    assert runs.check(_call(clock, "b"), clock()) == Reservation(400, 2, None, "learned")
