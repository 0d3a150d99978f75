"""Every shipped preset builds into a valid policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policies.registry import build_policy

PRESETS = sorted((Path(__file__).parents[3] / "presets").glob("*.yaml"))


def test_the_four_presets_ship() -> None:
    names = {p.stem for p in PRESETS}
    assert {"fixed-cap", "codel", "fair-share", "agent-swarm"} <= names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_builds(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert set(doc) == {"policy"}
    policy = build_policy(doc["policy"])
    assert policy.name == path.stem


def test_agent_runs_queues_a_new_run_after_the_fleet_was_full_instead_of_refusing_it() -> None:
    """The 1x loss of issue 29: with a promise horizon (30 s at the drain measured while
    calls queued) a run was refused at its first call whenever the fleet had been full in
    the last 30 s and the open runs' reservations exceeded 30 s of that drain, which long
    runs always do (promised / capacity ~ half a run's duration). The preset now refuses a
    run only through the queue bound, like any call; started runs keep their precedence."""
    from policies.engine.scheduler import Scheduler, Ticket
    from policies.types import Decision, DecisionKind, Ending, Outcome, RunHints, Usage

    from .helpers import ManualClock, fleet, request

    doc = yaml.safe_load((Path(__file__).parents[3] / "presets/agent-runs.yaml").read_text())
    raw = {**doc["policy"], "limit": {"type": "fixed", "parameters": {"max_in_flight": 1}}}
    clock = ManualClock()
    s = Scheduler(build_policy(raw), clock=clock)

    def first_call(run_id: str) -> Decision | Ticket:
        return s.submit(request(clock, run=RunHints(run_id, tokens=20_000)), fleet(clock))

    a = first_call("a")
    assert isinstance(a, Ticket)
    assert isinstance(first_call("b"), Decision)  # queued behind a: the fleet is full
    clock.advance(2.0)
    s.release(a, Ending(Outcome.COMPLETED, Usage(100, 500)))  # 600 tokens in 2 s full: 300/s
    (b,) = s.poll(fleet(clock))
    assert isinstance(b, Ticket)
    # 19 400 + 19 800 promised + 20 000: 197 s at 300/s, far past any horizon
    late = first_call("c")
    assert isinstance(late, Decision) and late.decision is DecisionKind.DELAY


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_no_preset_types_in_a_backends_capacity(path: Path) -> None:
    """A cap typed into a preset fits one engine: `fixed-cap` shipped `max_in_flight: 8`,
    which starved the 1,024-slot mi300x profile in every matrix cell. Per-backend caps come
    from the engine (its max_num_seqs, its KV cache, what it was seen running)."""
    limit = yaml.safe_load(path.read_text())["policy"].get("limit", {})
    typed = set(limit.get("parameters") or {}) & {"max_in_flight", "fuse", "min_limit"}
    assert not typed, f"{path.name} types in {sorted(typed)}"
