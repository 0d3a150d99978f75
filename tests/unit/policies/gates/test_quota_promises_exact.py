"""``tenant_quota``'s Retry-After as a promise: k clients refused together are told k
increasing times, each admitted when it returns at its time, new requests kept off the
promised tokens, promises lapsing, and a promise that never opens the bucket."""

from __future__ import annotations

from typing import Any

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, Reason
from tests.unit.policies.helpers import ManualClock, promising_quota, refused_after, request

TPM = 6000  # the operator's quota in this test config: 100 tokens/s, a bucket of 6,000


def _empty_bucket(
    clock: ManualClock, retry_after: dict[str, Any] | None = None
) -> tuple[Scheduler, BackendsSnapshot]:
    limits = {"tokens_per_minute": TPM}
    s, f = promising_quota(clock, limits, 100, {"grace_s": 1.0, **(retry_after or {})})
    assert isinstance(s.submit(request(clock, prompt=TPM, output=0), f), Ticket)
    return s, f


def _refused(out: Decision | Ticket) -> float:
    return refused_after(out, Reason.TENANT_QUOTA)


def test_refused_together_told_apart_and_each_admitted_at_its_time() -> None:
    clock = ManualClock()
    s, f = _empty_bucket(clock)
    start = clock.now
    afters = [_refused(s.submit(request(clock, prompt=100, output=0), f)) for _ in range(3)]
    assert afters == [1.0, 2.0, 3.0]  # the bucket refills 100 tokens a second
    clock.now = start + 1.0
    assert isinstance(s.submit(request(clock, prompt=100, output=0, is_retry=True), f), Ticket)
    # a newcomer now waits behind the two still due back: (100 + 200 - 0) / 100
    assert _refused(s.submit(request(clock, prompt=100, output=0), f)) == 3.0
    for at in (2.0, 3.0, 4.0):  # the two returns, then the newcomer's
        clock.now = start + at
        back = request(clock, prompt=100, output=0, is_retry=True)
        assert isinstance(s.submit(back, f), Ticket)


def test_unclaimed_promises_hold_their_tokens_until_they_lapse() -> None:
    clock = ManualClock()
    s, f = _empty_bucket(clock)
    start = clock.now
    for _ in range(3):  # due at +1, +2, +3; lapsed 1 s later
        _refused(s.submit(request(clock, prompt=100, output=0), f))
    clock.now = start + 2.0  # the first at its lapse time: 200 in, 300 still promised
    assert _refused(s.submit(request(clock, prompt=100, output=0), f)) == (100 + 300 - 200) / 100
    clock.now = start + 4.0001  # all three lapsed; the newcomer's own (due +4) still held
    for _ in range(3):
        assert isinstance(s.submit(request(clock, prompt=100, output=0), f), Ticket)
    assert _refused(s.submit(request(clock, prompt=100, output=0), f)) > 0.0


def test_a_retry_without_a_promise_due_is_a_newcomer() -> None:
    clock = ManualClock()
    s, f = _empty_bucket(clock)
    start = clock.now
    for _ in range(2):
        _refused(s.submit(request(clock, prompt=100, output=0), f))
    clock.now = start + 0.5  # before the first promise's time: 50 in, 200 promised
    early = s.submit(request(clock, prompt=100, output=0, is_retry=True), f)
    assert _refused(early) == (100 + 200 - 50) / 100


def test_a_promise_never_admits_past_the_bucket() -> None:
    clock = ManualClock()
    s, f = _empty_bucket(clock, {"max_s": 1.5, "min_s": 0.01})
    start = clock.now
    afters = [_refused(s.submit(request(clock, prompt=100, output=0), f)) for _ in range(3)]
    assert afters[0] == 1.0  # the clamp tells the other two too early, in [1.49, 1.5)
    assert all(1.49 <= a < 1.5 for a in afters[1:]) and afters[1] != afters[2]
    clock.now = start + 1.0
    assert isinstance(s.submit(request(clock, prompt=100, output=0, is_retry=True), f), Ticket)
    clock.now = start + 1.5  # 50 tokens in the bucket: one promise due, not honoured
    again = s.submit(request(clock, prompt=100, output=0, is_retry=True), f)
    assert _refused(again) == (100 + 100 - 50) / 100  # after the other one still due


def test_a_request_past_the_burst_is_promised_the_burst_not_its_cost() -> None:
    clock = ManualClock()
    limits = {"tokens_per_minute": TPM, "burst_tokens": 50}
    s, f = promising_quota(clock, limits, 100, {"min_s": 0.01})
    assert isinstance(s.submit(request(clock, prompt=50, output=0), f), Ticket)  # empty now
    # 100 tokens need the full bucket, 50: half a second at 100 a second
    assert _refused(s.submit(request(clock, prompt=100, output=0), f)) == 0.5
    # a newcomer waits for the 50 promised and its own 50
    assert _refused(s.submit(request(clock, prompt=100, output=0), f)) == 1.0
