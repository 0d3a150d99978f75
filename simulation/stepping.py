"""An engine on the virtual clock runs one step at a time: the loop asks for its next step
only once it has handled the end of the last one."""

from __future__ import annotations

from typing import Protocol

from simulation.ports import EngineStep


class Steps(Protocol):
    def step(self, now: float) -> EngineStep | None: ...


class Stepping:
    __slots__ = ("_busy", "_engine")

    def __init__(self, engine: Steps) -> None:
        self._engine = engine
        self._busy = False

    def start(self, now: float) -> EngineStep | None:
        """The engine's next step when it is idle and has work; it is busy until ``ended``."""
        if self._busy:
            return None
        step = self._engine.step(now)
        self._busy = step is not None
        return step

    def ended(self) -> None:
        self._busy = False
