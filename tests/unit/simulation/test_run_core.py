"""Agent runs through the real scheduler and the real engine model, on a virtual clock."""

from __future__ import annotations

from typing import Any

from emulator.profile import LengthComponent, LengthMixture, Profile
from simulation.agent_runs import RunWorkload, arrivals, capacity_runs_per_s
from simulation.ports import VirtualClock
from simulation.run_core import CuttableBackend, RunSimulation
from simulation.run_metrics import RunSummary, summarise_run_records

CALL_LEVEL: dict[str, Any] = {
    "name": "call-level",
    "ladder": {"steps": []},
    "runs": {"enabled": False},
}
RUN_LEVEL: dict[str, Any] = {**CALL_LEVEL, "name": "run-level", "runs": {"enabled": True}}
"""The same policy with runs on and no promise horizon: only the precedence of started
runs (and their hints) differs."""

DURATION_S = 300.0


def workload() -> RunWorkload:
    mix = LengthMixture(components=(LengthComponent(weight=1.0, min_tokens=100, max_tokens=300),))
    return RunWorkload(
        mix,
        turns_min=3,
        turns_max=3,
        branch_prob=0.0,
        think_mean_s=1.0,
        deadline_s=60.0,
        hints=("calls", "deadline"),
    )


def simulate(
    profile: Profile,
    policy: dict[str, Any],
    load: float,
    window: tuple[float, float] | None = None,
    kind: type[RunSimulation] = RunSimulation,
) -> RunSimulation:
    """``window``: measure only the runs arriving in it."""
    w = workload()
    plans = arrivals(w, load * capacity_runs_per_s(profile, w), DURATION_S, seed=5)
    measured = None
    if window is not None:
        measured = frozenset(p.index for p in plans if window[0] <= p.arrival < window[1])
    sim = kind(
        plans=plans,
        workload=w,
        policy=policy,
        backend=CuttableBackend(profile),
        clock=VirtualClock(),
        seed=5,
        measured=measured,
    )
    sim.run()
    return sim


def summary(sim: RunSimulation) -> RunSummary:
    return summarise_run_records(sim.records, 0.0, DURATION_S)


def test_at_twice_capacity_started_runs_finish_first(profile: Profile) -> None:
    calls = summary(simulate(profile, CALL_LEVEL, 2.0))
    runs = summary(simulate(profile, RUN_LEVEL, 2.0))
    assert calls.arrived == runs.arrived  # the very same runs
    assert runs.completed >= 2 * calls.completed > 0
    assert runs.wasted_tokens < calls.wasted_tokens


def test_every_run_ends_and_nothing_is_left_taken(profile: Profile) -> None:
    for policy in (CALL_LEVEL, RUN_LEVEL):
        sim = simulate(profile, policy, 2.0)
        assert len(sim.records) == summary(sim).arrived
        assert all(r.ended is not None for r in sim.records)
        stats = sim.scheduler.stats()
        assert (stats.queued, stats.in_flight) == (0, 0)
        assert sim.scheduler.runs.stats().open_runs == 0
        assert not sim._backend.engine.has_work


def test_an_abandoned_run_wastes_what_its_calls_used(profile: Profile) -> None:
    sim = simulate(profile, CALL_LEVEL, 2.0)
    lost = [r for r in sim.records if not r.completed]
    assert lost and all(r.ended == r.arrival + workload().deadline_s for r in lost)
    assert summary(sim).wasted_tokens == sum(r.spent_tokens for r in lost)
    done = [r for r in sim.records if r.completed]
    assert all(r.spent_tokens >= r.calls * 100 for r in done)  # whole calls, none cut


def test_the_loop_ends_once_the_measured_runs_have_ended(profile: Profile) -> None:
    sim = simulate(profile, CALL_LEVEL, 2.0, window=(60.0, 120.0))
    measured = {p.index for p in sim._plans if 60.0 <= p.arrival < 120.0}
    recorded = {r.index: r for r in sim.records}
    assert measured and measured <= set(recorded)
    last = max(recorded[i].ended or 0.0 for i in measured)
    assert all(r.ended is not None and r.ended <= last for r in sim.records)
    # runs that arrived after the window were still under way: the load went on
    assert any(p.arrival >= 120.0 and p.index not in recorded for p in sim._plans)


class _Served(RunSimulation):
    """Counts the output tokens each run was served, over all its calls."""

    def _release(self, ticket: Any, outcome: Any, generated: int) -> None:
        index = self._owner.get(ticket.request_id)
        if index is not None:
            self.served = getattr(self, "served", {})
            self.served[index] = self.served.get(index, 0) + generated
        super()._release(ticket, outcome, generated)


def test_an_answer_cut_short_by_a_degrade_is_continued_to_its_full_length(
    profile: Profile,
) -> None:
    """A capped ``max_tokens`` (the ladder's degrade) ends an answer early: the client asks
    for the rest, so a step is done only when every call's whole answer is in."""
    cap = 40  # below every call's length (100-300): each call is cut and continued
    step = {"name": "cap", "at": 0.0, "action": "cap_max_tokens", "max_tokens": cap}
    sim = simulate(profile, {"name": "capped", "ladder": {"steps": [step]}}, 0.3, kind=_Served)
    assert isinstance(sim, _Served)
    done = [r for r in sim.records if r.completed]
    assert len(done) == len(sim._plans)
    for record in done:
        steps = sim._plans[record.index].steps
        assert sim.served[record.index] == sum(sum(s) for s in steps)
    assert sim._served == {} and sim._asked == {}
