"""The queue's drain in the tokens the engine computes: the rate counts what completed
requests computed (their output and uncached prompt), and the queued work, each refusal's
own request and the promised returns count their expected uncached prompt and output
(``estimate.computed_total``), so a cached context neither stretches a Retry-After nor
holds a place it does not need."""

from __future__ import annotations

from typing import Any

from policies.engine.scheduler import Scheduler, Ticket
from policies.fleet import FleetSnapshot
from policies.types import Decision, DecisionKind, Outcome, Reason, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

RATE = 20.0
"""80 computed tokens (100 used, 20 of them cached) completed in 4 s of busy time."""
QUEUED = 16
"""Computed tokens queued by the setup: 22 prompt (half of them, 11, cached) + 5 output."""
CONFIG: dict[str, Any] = {
    "retry_after": {"jitter": 0.0, "grace_s": 1.0, "promise": True},
    "prefill_backlog": {"enabled": False},
    "queue": {"max_queued_tokens": 50, "max_wait_s": 4.5},
}


def _decision(x: Decision | Ticket) -> Decision:
    assert isinstance(x, Decision), x
    return x


def _measured(clock: ManualClock) -> tuple[Scheduler, FleetSnapshot]:
    """A backend whose prefix cache serves half of every prompt (its hit rate)."""
    s = scheduler(clock, CONFIG)
    f = fleet(clock, backend("b1", max_num_seqs=1, prefix_cache_hit_rate=0.5))
    running = s.submit(request(clock, prompt=60, output=40), f)
    assert isinstance(running, Ticket)
    clock.advance(4.0)
    queued = _decision(s.submit(request(clock, prompt=22, output=5), f))
    assert queued.decision is DecisionKind.DELAY
    stats = s.stats()  # 30 of the running prompt's 60 tokens expected cached
    assert (stats.in_flight_tokens, stats.in_flight_computed_tokens) == (100, 70)
    assert (stats.queued_tokens, stats.queued_computed_tokens) == (27, QUEUED)
    s.release(running, Outcome.COMPLETED, Usage(60, 40, cached_tokens=20))
    assert (s.stats().drain_tokens_per_s, s.stats().in_flight_computed_tokens) == (RATE, 0)
    return s, f


def test_refusals_are_told_the_drain_of_the_uncached_work_ahead_and_their_own() -> None:
    clock = ManualClock()
    s, f = _measured(clock)
    afters = []
    for _ in range(3):  # 27 queued + 25 > the bound of 50 (the bound counts every token)
        out = _decision(s.submit(request(clock, prompt=20, output=5), f))
        assert out.reason is Reason.QUEUE_FULL
        afters.append(out.retry_after_s)
    # each refusal computes 10 + 5 = 15 tokens: (16 + 15 k) / 20
    assert afters == [(QUEUED + 15 * k) / RATE for k in (1, 2, 3)]


def test_a_new_request_takes_a_place_the_uncached_promised_work_leaves() -> None:
    clock = ManualClock()
    s, f = _measured(clock)
    for _ in range(4):  # promised 4 x 15 = 60 computed tokens
        _decision(s.submit(request(clock, prompt=20, output=5), f))
    # 20 + 3 = 23 tokens fit under the bound, and (16 + 60 + 13) / 20 = 4.45 s <= 4.5: it
    # queues (counted in every token, (27 + 100 + 23) / 25 = 6 s: it would be refused)
    late = _decision(s.submit(request(clock, prompt=20, output=3), f))
    assert late.decision is DecisionKind.DELAY
