"""The default policy (``policy: {}``) with a fake clock: a flood from one tenant does not
take back the slot another active tenant's next turn needs, and a tenant alone is held back
by nothing (every slot is its own)."""

from __future__ import annotations

from policies.engine.scheduler import Ticket
from policies.types import Decision, Ending, Outcome, RequestInfo

from .helpers import ManualClock, backend, fleet, request, scheduler

SLOTS = 8


def _long(clock: ManualClock) -> RequestInfo:
    return request(clock, tenant="noisy", prompt=1500, output=256)


def test_a_flood_leaves_a_slot_for_the_quiet_tenants_next_turn() -> None:
    clock = ManualClock()
    s = scheduler(clock, {})
    f = fleet(clock, backend(max_num_seqs=SLOTS))
    first = s.submit(request(clock, tenant="quiet", prompt=50, output=32), f)
    assert isinstance(first, Ticket)
    s.release(first, Ending(Outcome.COMPLETED))
    clock.advance(1.0)
    flood = [s.submit(_long(clock), f) for _ in range(20)]
    running = [x for x in flood if isinstance(x, Ticket)]
    assert len(running) == SLOTS  # arriving to an empty queue, the flood takes every slot
    clock.advance(1.0)
    s.release(running[0], Ending(Outcome.COMPLETED))
    assert s.poll(f) == []  # but its backlog may not take the slot one of its own freed
    turn = s.submit(request(clock, tenant="quiet", prompt=50, output=32), f)
    assert isinstance(turn, Decision)  # the flood is queued: the turn goes through poll
    (out,) = s.poll(f)
    assert isinstance(out, Ticket) and out.request.tenant == "quiet"


def test_the_flood_takes_the_slot_back_once_the_quiet_tenant_left() -> None:
    clock = ManualClock()
    s = scheduler(clock, {})
    f = fleet(clock, backend(max_num_seqs=SLOTS))
    first = s.submit(request(clock, tenant="quiet"), f)
    assert isinstance(first, Ticket)
    s.release(first, Ending(Outcome.COMPLETED))
    window = s.policy.headroom.active_window_s
    clock.advance(window - 5.0)
    f = fleet(clock, backend(max_num_seqs=SLOTS))
    flood = [s.submit(request(clock, tenant="noisy"), f) for _ in range(SLOTS + 4)]
    running = [x for x in flood if isinstance(x, Ticket)]
    s.release(running[0], Ending(Outcome.COMPLETED))
    assert s.poll(f) == []
    clock.advance(6.0)  # the quiet tenant's last request is now older than the window
    f = fleet(clock, backend(max_num_seqs=SLOTS))
    (out,) = s.poll(f)  # nobody else active: the reserve has nobody to keep the slot for
    assert isinstance(out, Ticket) and out.request.tenant == "noisy"


def test_a_tenant_alone_takes_every_slot() -> None:
    clock = ManualClock()
    s = scheduler(clock, {})
    f = fleet(clock, backend(max_num_seqs=SLOTS))
    out = [s.submit(request(clock, tenant="solo"), f) for _ in range(SLOTS + 2)]
    assert sum(isinstance(x, Ticket) for x in out) == SLOTS
