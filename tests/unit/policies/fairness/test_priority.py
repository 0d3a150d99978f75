"""Priority bands: higher band first, EDF inside a band, and the anti-starvation guard."""

from __future__ import annotations

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Ending, Outcome
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

GUARD_S = 5.0


def setup() -> tuple[ManualClock, Scheduler, BackendsSnapshot, Ticket]:
    clock = ManualClock()
    s = scheduler(
        clock, {"fairness": {"type": "priority", "parameters": {"starvation_after_s": GUARD_S}}}
    )
    f = fleet(clock, backend(max_num_seqs=1))
    blocker = s.submit(request(clock), f)
    assert isinstance(blocker, Ticket)
    return clock, s, f, blocker


def dispatch_order(s: Scheduler, f: BackendsSnapshot, first: Ticket, n: int) -> list[str]:
    order: list[str] = []
    ticket = first
    for _ in range(n):
        s.release(ticket, Ending(Outcome.COMPLETED))
        (out,) = s.poll(f)
        assert isinstance(out, Ticket)
        ticket = out
        order.append(ticket.request_id)
    return order


def test_higher_band_first_then_earliest_deadline() -> None:
    clock, s, f, blocker = setup()
    low = request(clock, priority=0, request_id="low")
    late = request(clock, priority=5, deadline_in=20.0, request_id="late")
    soon = request(clock, priority=5, deadline_in=8.0, request_id="soon")
    for r in (low, late, soon):
        s.submit(r, f)
    assert dispatch_order(s, f, blocker, 3) == ["soon", "late", "low"]


def test_guard_serves_a_starving_low_band_request() -> None:
    clock, s, f, blocker = setup()
    s.submit(request(clock, priority=0, request_id="old-low"), f)
    clock.advance(GUARD_S)
    for i in range(3):
        s.submit(request(clock, priority=9, request_id=f"hi{i}"), f)
    assert dispatch_order(s, f, blocker, 2) == ["old-low", "hi0"]


def test_without_the_guard_age_low_band_waits() -> None:
    clock, s, f, blocker = setup()
    s.submit(request(clock, priority=0, request_id="young-low"), f)
    clock.advance(GUARD_S / 2)
    for i in range(2):
        s.submit(request(clock, priority=9, request_id=f"hi{i}"), f)
    assert dispatch_order(s, f, blocker, 3) == ["hi0", "hi1", "young-low"]
