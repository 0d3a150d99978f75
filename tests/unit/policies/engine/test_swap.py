"""Hot swap: new parameters, same queues, same in-flight tickets."""

from __future__ import annotations

from policies.engine.scheduler import Ticket
from policies.registry import build_policy
from policies.types import Decision, Ending, Outcome
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler


def test_swap_keeps_queue_and_tickets_across_a_fairness_change() -> None:
    clock = ManualClock()
    s = scheduler(clock)  # vtc
    f = fleet(clock, backend(max_num_seqs=1))
    running = s.submit(request(clock), f)
    queued = [s.submit(request(clock, tenant=f"t{i % 3}"), f) for i in range(6)]
    assert isinstance(running, Ticket) and all(isinstance(q, Decision) for q in queued)
    s.swap(build_policy({"fairness": {"type": "fifo"}, "queue": {"max_wait_s": 99}}))
    assert s.stats().queued == 6 and s.stats().in_flight == 1
    s.release(running, Ending(Outcome.COMPLETED))
    order = []
    for _ in range(6):
        (out,) = s.poll(f)
        assert isinstance(out, Ticket)
        assert out.decision.policy_version == s.policy.version
        order.append(out.request_id)
        s.release(out, Ending(Outcome.COMPLETED))
    assert order == [q.request_id for q in queued]  # fifo now: arrival order


def test_swap_to_a_smaller_limit_never_drops_in_flight() -> None:
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock)
    tickets = [s.submit(request(clock), f) for _ in range(4)]
    s.swap(build_policy({"limit": {"type": "fixed", "parameters": {"max_in_flight": 1}}}))
    assert s.stats().in_flight == 4
    assert isinstance(s.submit(request(clock), f), Decision)
    for t in tickets:
        assert isinstance(t, Ticket)
        s.release(t, Ending(Outcome.COMPLETED))
    assert len(s.poll(f)) == 1
