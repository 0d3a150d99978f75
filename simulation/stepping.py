"""An engine on the virtual clock runs one step at a time: the loop asks for its next step
only once it has handled the end of the last one. ``EngineEvents``: what a loop in front of
one engine pushes besides its own events, that step's end and the policy's wake-up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from simulation.event_queue import EventQueue, WakeupAlarm
from simulation.ports import EngineStep, VirtualClock

T = TypeVar("T")


class Steps(Protocol):
    def step(self, now: float, until: float | None = None) -> EngineStep | None: ...


class Stepping:
    __slots__ = ("_busy", "_engine")

    def __init__(self, engine: Steps) -> None:
        self._engine = engine
        self._busy = False

    def start(self, now: float, until: float | None = None) -> EngineStep | None:
        """The engine's next step when it is idle and has work; it is busy until ``ended``.
        ``until``: the loop's next event; plain decode steps before it may run as one."""
        if self._busy:
            return None
        step = self._engine.step(now, until)
        self._busy = step is not None
        return step

    def ended(self) -> None:
        self._busy = False


class EngineEvents(Generic[T]):
    """The end of ``engine``'s step under way and the policy's next wake-up, as events of
    the loop's queue: ``step_end`` and ``wakeup`` make them."""

    __slots__ = ("_alarm", "_clock", "_events", "_step_end", "_stepping", "_wakeup")

    def __init__(
        self,
        events: EventQueue[T],
        engine: Steps,
        clock: VirtualClock,
        *,
        step_end: Callable[[EngineStep], T],
        wakeup: Callable[[], T],
    ) -> None:
        self._events, self._clock = events, clock
        self._step_end, self._wakeup = step_end, wakeup
        self._stepping = Stepping(engine)
        self._alarm = WakeupAlarm()

    def kick(self) -> None:
        """The engine's next step, when it is idle and has work; its end is pushed. Plain
        decode steps that start before the next event in the queue run as one."""
        step = self._stepping.start(self._clock.now, self._events.next_at())
        if step is not None:
            self._events.push(step.ends_at, self._step_end(step))

    def ended(self) -> None:
        """The step under way has ended (its event handled): the next one may start."""
        self._stepping.ended()

    def arm(self, wake: float | None) -> None:
        """A wake-up at ``wake`` (the policy's ``next_wakeup()``), unless none is needed."""
        at = self._alarm.arm(wake, self._clock.now)
        if at is not None:
            self._events.push(at, self._wakeup())
