"""What the live run swarm sends: the X-Agent-Run-* headers of a run's calls."""

from __future__ import annotations

from emulator.profile import LengthComponent, LengthMixture
from simulation.agent_runs import RunPlan, RunWorkload
from simulation.run_swarm import run_headers

MIX = LengthMixture(components=(LengthComponent(weight=1.0, min_tokens=5, max_tokens=5),))
PLAN = RunPlan(3, 0.0, ((20,), (10, 30), (40,)), (1.0, 1.0))


def test_every_hint_in_its_header_and_the_deadline_in_wall_milliseconds() -> None:
    w = RunWorkload(MIX, prompt_tokens=8, hints=("calls", "tokens", "branches", "deadline"))
    assert run_headers(w, PLAN, left_s=80.0, speed=8.0) == {
        "x-agent-run-id": "run-3",
        "x-agent-run-calls": "4",
        "x-agent-run-tokens": str(4 * 8 + 100),
        "x-agent-run-branches": "2",
        "x-agent-run-deadline-ms": "10000",  # 80 emulated s at 8x: 10 wall s
    }


def test_only_the_hints_the_workload_sends() -> None:
    w = RunWorkload(MIX, hints=())
    assert run_headers(w, PLAN, left_s=80.0, speed=1.0) == {"x-agent-run-id": "run-3"}
