"""The drain's bounds (``gateway/front/lingering_close.py``), on a transport that records
what is done to it and timers fired by hand: the write side is shut at once, the socket is
closed at the first bound reached (time in all, silence, bytes) and never before."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.front.lingering_close import LingerBounds, Lingering


@dataclass
class Timer:
    at: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class Timers:
    now: float = 0.0
    pending: list[Timer] = field(default_factory=list)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now + delay, callback)
        self.pending.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in list(self.pending):
            if not timer.cancelled and timer.at <= self.now:
                self.pending.remove(timer)
                timer.callback()


@dataclass
class Transport:
    eof_written: bool = False
    closed: bool = False

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_written = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


BOUNDS = LingerBounds(time_s=30.0, idle_s=5.0, max_bytes=1000)


def _lingering() -> tuple[Lingering, Transport, Timers]:
    transport, timers = Transport(), Timers()
    lingering = Lingering(transport, BOUNDS, timers)  # type: ignore[arg-type]
    return lingering, transport, timers


def test_the_write_side_is_shut_at_once_and_the_socket_left_open() -> None:
    _, transport, _ = _lingering()
    assert transport.eof_written and not transport.closed


def test_silence_longer_than_the_idle_bound_closes() -> None:
    lingering, transport, timers = _lingering()
    timers.advance(4.0)
    lingering.received(10)
    timers.advance(4.0)  # 8 s in, 4 s since the last byte
    assert not transport.closed
    timers.advance(1.5)
    assert transport.closed


def test_a_trickle_is_closed_at_the_time_bound() -> None:
    lingering, transport, timers = _lingering()
    for _ in range(29):
        timers.advance(1.0)
        lingering.received(1)
        assert not transport.closed
    timers.advance(1.0)
    assert transport.closed


def test_more_than_the_byte_bound_closes_at_once() -> None:
    lingering, transport, _ = _lingering()
    lingering.received(BOUNDS.max_bytes)
    assert not transport.closed
    lingering.received(1)
    assert transport.closed and lingering.drained == BOUNDS.max_bytes + 1


def test_a_connection_gone_cancels_the_timers() -> None:
    lingering, transport, timers = _lingering()
    lingering.stop()
    assert all(t.cancelled for t in timers.pending)
    timers.advance(60.0)
    assert not transport.closed
