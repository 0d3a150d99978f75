"""Plain decode steps run as one (``Engine.decode_ahead``) change no answer: every loop
gives the same measurements to the last digit as when each step is its own event, with
one backend and with several, and the merge does happen (fewer steps handled)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from simulation.matrix import runs_pool
from simulation.matrix.cells import Cell
from simulation.matrix.evaluate import shipped_policies
from simulation.matrix.measure import Measured, capacity_of, run_cell
from simulation.matrix.probe import probe
from simulation.ports import EngineStep
from simulation.stepping import Stepping

DURATION_S = 40.0
"""Of arrivals, shorter than a cell's own (what it steps through is the same)."""
CELLS = [
    Cell("runs-short", "cpu-tiny", 2.0, 1),
    Cell("runs-short", "cpu-tiny", 2.0, 2),
    Cell("noisy-1500-stream", "cpu-tiny", 2.0, 2),
    Cell("chat", "rx9070xt", 1.0, 2),
]


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each agent-run loop took its probe (at its first event from the probe's time)."""
    taken: list[float] = []

    def recording(*args: Any, now: float, **kwargs: Any) -> list[float]:
        taken.append(now)
        return probe(*args, now=now, **kwargs)

    monkeypatch.setattr(runs_pool, "probe", recording)
    return taken


@pytest.fixture
def steps_started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    counted = [0]
    start = Stepping.start

    def counting(self: Stepping, now: float, until: float | None = None) -> EngineStep | None:
        step = start(self, now, until)
        counted[0] += step is not None
        return step

    monkeypatch.setattr(Stepping, "start", counting)
    yield counted


def _measure(cell: Cell) -> Measured:
    policy = dict(shipped_policies())["default"]
    return run_cell(cell, policy, capacity_of(cell), duration_s=DURATION_S)


@pytest.mark.parametrize("cell", CELLS, ids=str)
def test_the_same_measurements_as_one_event_per_step(
    cell: Cell,
    steps_started: list[int],
    probes: list[float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    merged = _measure(cell)
    merged_steps = steps_started[0]
    start = Stepping.start  # (the counting one)
    monkeypatch.setattr(Stepping, "start", lambda self, now, until=None: start(self, now, None))
    steps_started[0] = 0
    one_by_one = _measure(cell)
    assert merged == one_by_one
    if cell.workload.startswith("runs"):
        merged_probe, probe_at = probes
        assert merged_probe == probe_at  # at the same event
    assert merged_steps < 0.7 * steps_started[0], (merged_steps, steps_started[0])
