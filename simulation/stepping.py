"""An engine on the virtual clock runs one step at a time: the loop asks for its next step
only once it has handled the end of the last one. ``EngineEvents``: what a loop in front of
one engine pushes besides its own events, that step's end and the policy's wake-up."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from simulation.event_queue import EventQueue, WakeupAlarm
from simulation.ports import EngineStep, VirtualClock

T = TypeVar("T")


class Steps(Protocol):
    def step(self, now: float, until: float | None = None) -> EngineStep | None: ...
    def decode_reach(self, now: float) -> float: ...


class Stepping:
    __slots__ = ("_engine", "_step")

    def __init__(self, engine: Steps) -> None:
        self._engine = engine
        self._step: EngineStep | None = None
        """The step under way (None: idle)."""

    @property
    def busy(self) -> bool:
        """A step is under way: ``start`` starts nothing until it ``ended``."""
        return self._step is not None

    def start(self, now: float, until: float | None = None) -> EngineStep | None:
        """The engine's next step when it is idle and has work; it is busy until ``ended``.
        ``until``: the loop's next event; plain decode steps before it may run as one."""
        if self._step is not None:
            return None
        self._step = self._engine.step(now, until)
        return self._step

    def ended(self) -> None:
        self._step = None

    def reach(self) -> float:
        """The earliest time this engine's stepping could end a step the loop acts on
        (a first token, a finish, a preemption), if no other event reaches it first:
        infinity when idle (only an event can start it), the step under way's end when
        that step is one, else where plain decode steps from that end would take it."""
        step = self._step
        if step is None:
            return float("inf")
        if step.changed:
            return step.ends_at
        return self._engine.decode_reach(step.ends_at)


def horizon(events: EventQueue[T], stepping: Iterable[Stepping]) -> float:
    """Until when an idle engine of several may run plain decode steps as one: before the
    next event the loop acts on, and before any engine could end a step it acts on (the
    idle one among them reaches infinity)."""
    until = events.next_seen_at()
    for engine in stepping:
        until = min(until, engine.reach())
    return until


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
