"""The default limit lets the server speak; a typed-in per-backend cap must not come back.

``server_problems`` checks a limit against backends whose own signals say they have room;
the mutation test puts the old ``healthy x 8`` cap back and requires the checks to notice.
"""

from __future__ import annotations

import dataclasses
import random

from policies.backends import BackendsSnapshot, BackendView
from policies.contracts import BackendLoad, Limit
from policies.engine.scheduler import Scheduler, Ticket
from policies.params import NoParams
from policies.policy_set import PolicySet
from policies.registry import build_policy
from policies.types import Ending, Outcome
from tests.unit.policies.helpers import ManualClock, backend, fleet, request


class TypedInCap(Limit[None, NoParams]):
    """The mutant: ``per_backend = 8``, nobody measured it."""

    type_name = "typed_in_cap"

    def new_state(self) -> None:
        return None

    def has_room(self, state: None, backend: BackendView, load: BackendLoad) -> bool:
        return load.in_flight < 8


def _flood(policy: PolicySet, fleet_: BackendsSnapshot, clock: ManualClock, n: int) -> Scheduler:
    s = Scheduler(policy, clock=clock, rng=random.Random(1))
    for _ in range(n):
        s.submit(request(clock), fleet_)
    s.poll(fleet_)
    return s


def _engine_numbers_are_used(policy: PolicySet) -> list[str]:
    clock = ManualClock()
    f = fleet(clock, backend("small", max_num_seqs=3), backend("large", max_num_seqs=41))
    got = dict(_flood(policy, f, clock, 100).stats().in_flight_by_backend)
    if got != {"small": 3, "large": 41}:
        return [f"in flight per backend {got}, engine says small=3 large=41"]
    return []


def _grows_while_server_has_room(policy: PolicySet) -> list[str]:
    clock = ManualClock()
    view = backend(waiting=0.0, kv_cache_usage=0.1, running=0.0)
    s = _flood(policy, fleet(clock, view), clock, 300)
    for _ in range(12):  # each scrape reports what the engine is running now
        view = dataclasses.replace(view, running=float(s.stats().in_flight))
        s.poll(fleet(clock, view))
    if s.stats().queued:
        return [f"{s.stats().queued} held back while the server reported room"]
    return []


def _stops_when_server_queues(policy: PolicySet) -> list[str]:
    clock = ManualClock()
    view = backend(waiting=0.0, running=0.0)
    s = _flood(policy, fleet(clock, view), clock, 50)
    before = s.stats().in_flight
    busy = dataclasses.replace(view, waiting=6.0, running=float(before))
    s.poll(fleet(clock, busy))
    s.submit(request(clock), fleet(clock, busy))
    if s.stats().in_flight != before:
        return ["kept dispatching while the engine reported a queue"]
    return []


def server_problems(policy: PolicySet) -> list[str]:
    checks = (_engine_numbers_are_used, _grows_while_server_has_room, _stops_when_server_queues)
    return [p for check in checks for p in check(policy)]


def test_default_limit_follows_the_servers_own_signals() -> None:
    assert server_problems(build_policy({})) == []


def test_mutant_typed_in_cap_is_caught() -> None:
    mutant = dataclasses.replace(build_policy({}), limit=TypedInCap(NoParams()))
    assert len(server_problems(mutant)) >= 2


def test_stale_backend_gets_only_a_probe() -> None:
    clock = ManualClock()
    f = fleet(clock, backend(stale=True, waiting=0.0))
    s = _flood(build_policy({}), f, clock, 5)
    assert s.stats().in_flight == 1 and s.stats().queued == 4


def test_fixed_cap_is_the_operators_number() -> None:
    clock = ManualClock()
    f = fleet(clock, backend("a"), backend("b"))
    s = _flood(
        build_policy({"limit": {"type": "fixed", "parameters": {"max_in_flight": 2}}}), f, clock, 9
    )
    assert dict(s.stats().in_flight_by_backend) == {"a": 2, "b": 2}


def test_adaptive_backs_off_on_slow_ttft_and_rises_only_without_waiting() -> None:
    clock = ManualClock()
    policy = build_policy({"limit": {"type": "adaptive", "parameters": {"target_s": 1.0}}})
    s = Scheduler(policy, clock=clock, rng=random.Random(1))
    calm = fleet(clock, backend(waiting=0.0, running=4.0))
    tickets = [
        t for t in (s.submit(request(clock), calm) for _ in range(40)) if isinstance(t, Ticket)
    ]
    start = s.stats().limits["b1"]
    assert start is not None and len(tickets) == start  # starts from what the engine runs

    def limit_after(ttft: float, f: BackendsSnapshot) -> float:
        tickets.extend(t for t in s.poll(f) if isinstance(t, Ticket))  # the latest signals
        s.release(tickets.pop(0), Ending(Outcome.COMPLETED, ttft_s=ttft, latency_s=ttft + 1))
        tickets.extend(t for t in s.poll(f) if isinstance(t, Ticket))
        value = s.stats().limits["b1"]
        assert value is not None
        return value

    risen = limit_after(0.2, calm)
    assert risen > start
    fallen = limit_after(5.0, calm)
    assert fallen < risen
    queued = fleet(clock, backend(waiting=3.0, running=4.0))
    assert limit_after(0.2, queued) < fallen  # fast, but the engine has a queue: no rise


def _dispatched_with_peers(raw_limit: dict[str, object], peers: int, seqs: int | None) -> int:
    """Requests one replica dispatches to a backend that ``peers`` requests of other replicas
    already occupy (``peer_in_flight``), the backend's signals showing room."""
    clock = ManualClock()
    kw = {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0, "peer_in_flight": peers}
    f = fleet(clock, backend("b", max_num_seqs=seqs, **kw))
    policy = build_policy({"limit": raw_limit, "ladder": {"steps": []}})
    return _flood(policy, f, clock, 50).stats().in_flight


def test_every_limit_counts_the_other_replicas_in_flight() -> None:
    fixed = {"type": "fixed", "parameters": {"max_in_flight": 10}}
    assert _dispatched_with_peers(fixed, 0, None) == 10
    assert _dispatched_with_peers(fixed, 7, None) == 3
    signals = {"type": "server_signals", "parameters": {"slow_start": False}}
    assert _dispatched_with_peers(signals, 0, 12) == 12
    assert _dispatched_with_peers(signals, 5, 12) == 7
    adaptive = {"type": "adaptive"}
    assert _dispatched_with_peers(adaptive, 0, 12) == 12
    assert _dispatched_with_peers(adaptive, 4, 12) == 8
