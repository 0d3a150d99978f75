"""The live subset: matrix cells that also run over real HTTP (``sluicegate evaluate-live``).

Each live cell is a matrix cell (``cells.Cell``) with the emulator's ``--speed`` and the
seconds of arrivals both sides run: the emulators run ``speed`` times faster than real
time, the clients shrink their waits by it, and every time is scaled back, so the live
numbers compare directly with the simulator's for the same cell and duration.

The subset: the noisy flood (1,500 prompt tokens streaming and not, 3,000 streaming) on
``cpu-tiny`` and ``rx9070xt``, both agent-run shapes and the multi-turn conversations on
each, one backend. The engines' token rates bound the speed: ``cpu-tiny`` (8 slots at
~300 tokens/s each) runs at real time, ``rx9070xt`` (8 slots at ~39 tokens/s) 4x faster.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulation.matrix.cells import Cell

LIVE_SPEED = {"cpu-tiny": 1.0, "rx9070xt": 4.0}
"""The emulator's ``--speed`` per profile."""

LIVE_DURATION_S = {"cpu-tiny": 60.0, "rx9070xt": 240.0}
"""Emulated seconds of arrivals per profile: the matrix's own (``cells.DURATION_S``)."""


@dataclass(frozen=True, slots=True)
class LiveCell:
    cell: Cell
    speed: float
    duration_s: float
    drain_s: float | None = None
    """Emulated seconds the drain waits at most for the requests still open after the
    arrivals (None: as long as the arrivals); a request open past it is counted cut."""

    @property
    def key(self) -> str:
        return self.cell.key

    @property
    def wall_s(self) -> float:
        """Wall seconds of arrivals (the drain comes on top)."""
        return self.duration_s / self.speed


def live(workload: str, profile: str, load: float) -> LiveCell:
    cell = Cell(workload, profile, load, 1)
    return LiveCell(cell, LIVE_SPEED[profile], LIVE_DURATION_S[profile])


LIVE_SUBSET: tuple[LiveCell, ...] = tuple(
    [
        live(w, p, 2.0)
        for p in ("cpu-tiny", "rx9070xt")
        for w in ("noisy-1500", "noisy-1500-stream", "noisy-3000-stream")
    ]
    + [live(w, p, 1.0) for p in ("cpu-tiny", "rx9070xt") for w in ("runs-short", "runs-long")]
    + [live("multi-turn", p, 1.0) for p in ("cpu-tiny", "rx9070xt")]
)
"""12 cells: 6 noisy at 2x, 4 agent-run at 1x, 2 multi-turn at 1x."""


def select(keys: list[str] | None) -> list[LiveCell]:
    """The subset's cells whose key (``workload/profile/LOADx/Bb``) or workload is in
    ``keys``; all of them for None. An unknown name is an error."""
    if keys is None:
        return list(LIVE_SUBSET)
    known = {c.key for c in LIVE_SUBSET} | {c.cell.workload for c in LIVE_SUBSET}
    unknown = sorted(set(keys) - known)
    if unknown:
        raise ValueError(f"not in the live subset: {', '.join(unknown)}")
    return [c for c in LIVE_SUBSET if c.key in keys or c.cell.workload in keys]
