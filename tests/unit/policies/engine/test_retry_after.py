"""Retry-After jitter survives the clamp: simultaneous rejections never share a millisecond
value (unless the policy sets jitter 0), and none is above ``max_s``."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest
import yaml

from gateway.request.errors import retry_after_headers
from policies.engine.retry_after import JitterSequence, retry_after
from policies.engine.retry_after_params import RetryAfterParams
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, Ending, Outcome, Reason, Usage
from tests.unit.policies.helpers import ManualClock, backend, fleet, request, scheduler

N = 1000
TPM = 60  # one token per second: any sizeable request is minutes from its quota


def _millis(decisions: list[Decision | Ticket]) -> list[int]:
    out = []
    for d in decisions:
        assert isinstance(d, Decision) and d.retry_after_s is not None
        out.append(int(retry_after_headers(d.retry_after_s)["retry-after-ms"]))
    return out


def _assert_spread_below_the_clamp(millis: list[int], max_s: float, jitter: float) -> None:
    assert len(millis) == N
    assert len(set(millis)) == N, "two simultaneous rejections got the same value"
    assert max(millis) <= max_s * 1000  # never above the maximum
    assert min(millis) >= max_s * (1 - jitter) * 1000  # and within the jitter's window
    # evenly spread over the window, not bunched at the top
    assert statistics.pstdev(millis) > 0.25 * jitter * max_s * 1000


def test_a_thousand_simultaneous_quota_rejections_at_the_clamp_are_all_different() -> None:
    clock = ManualClock()
    gates = [{"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": TPM}}}]
    s = scheduler(clock, {"gates": gates})
    f = fleet(clock)
    assert isinstance(s.submit(request(clock, prompt=10_000, output=0), f), Ticket)  # empties it
    out = [s.submit(request(clock, prompt=10_000, output=0), f) for _ in range(N)]
    assert all(isinstance(d, Decision) and d.reason is Reason.TENANT_QUOTA for d in out)
    _assert_spread_below_the_clamp(_millis(out), 60.0, 0.2)


def test_a_thousand_short_deadlines_expiring_at_the_front_are_all_different() -> None:
    """Short-deadline requests go to the front of a long queue, then expire together; the
    work ahead (the whole queue over a slow drain) is far above the clamp."""
    clock = ManualClock()
    s = scheduler(clock)
    f = fleet(clock, backend(max_num_seqs=1))
    _measure_a_slow_drain(s, clock, f)
    for _ in range(50):
        s.submit(request(clock, prompt=1000, output=1000), f)  # the long queue
    urgent = [s.submit(request(clock, deadline_in=0.5), f) for _ in range(N)]
    assert all(isinstance(d, Decision) and d.queue_position is not None for d in urgent)
    clock.advance(1.0)
    expired = [d for d in s.poll(f) if isinstance(d, Decision)]
    assert all(d.reason is Reason.DEADLINE_EXPIRED for d in expired)
    _assert_spread_below_the_clamp(_millis(list(expired)), 60.0, 0.2)


def _measure_a_slow_drain(s: Scheduler, clock: ManualClock, f: object, tokens: int = 100) -> None:
    """One request served over 10 s for ``tokens`` (10 tokens/s by default), and the slot
    stays taken."""
    first = s.submit(request(clock), f)  # type: ignore[arg-type]
    assert isinstance(first, Ticket)
    clock.advance(10.0)
    half = tokens // 2
    s.release(first, Ending(Outcome.COMPLETED, Usage(half, tokens - half), latency_s=10.0))
    holder = s.submit(request(clock), f)  # type: ignore[arg-type]
    assert isinstance(holder, Ticket)


def test_jitter_zero_past_the_maximum_still_spreads_below_it() -> None:
    clock = ManualClock()
    gates = [{"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": TPM}}}]
    s = scheduler(clock, {"gates": gates, "retry_after": {"jitter": 0}})
    assert isinstance(s.submit(request(clock, prompt=10_000, output=0), fleet(clock)), Ticket)
    out = [s.submit(request(clock, prompt=10_000, output=0), fleet(clock)) for _ in range(20)]
    millis = _millis(out)
    assert len(set(millis)) == 20 and min(millis) >= 59_500 and max(millis) < 60_000


@pytest.mark.parametrize("seconds", [None, 0.1, 0.5, 3.0, 49.0, 55.0, 59.999, 60.0, 1e9])
def test_never_above_the_maximum_never_below_the_computed_value_where_it_fits(
    seconds: float | None,
) -> None:
    params = RetryAfterParams()
    fractions = JitterSequence(random.Random(5))
    values = [retry_after(seconds, params, fractions.next()) for _ in range(200)]
    base = params.min_s if seconds is None else min(max(seconds, params.min_s), params.max_s)
    assert all(params.min_s <= v < params.max_s or v == base == params.max_s for v in values)
    if seconds is None or seconds < params.min_s:  # unknown or under it: min_s above the floor
        assert params.min_s <= min(values) and max(values) <= 2 * params.min_s
    elif base * (1 + params.jitter) <= params.max_s:
        assert min(values) >= base  # jitter only lengthens while there is room
        assert max(values) <= base * (1 + params.jitter)
    else:
        assert min(values) >= params.max_s - params.jitter * base
    assert len(set(values)) == len(values)


@pytest.mark.parametrize("jitter", [0.0, 0.2])
def test_a_hundred_simultaneous_refusals_with_no_drain_measured_are_all_different(
    jitter: float,
) -> None:
    """Nothing completed yet (or for a while): the wait is unknown, and the clients refused
    meanwhile must not all come back in the same instant, whatever the jitter."""
    clock = ManualClock()
    s = scheduler(clock, {"queue": {"max_queued_tokens": 1}, "retry_after": {"jitter": jitter}})
    f = fleet(clock, backend(max_num_seqs=1))
    assert isinstance(s.submit(request(clock), f), Ticket)  # the slot, never released
    out = [s.submit(request(clock), f) for _ in range(100)]
    assert all(isinstance(d, Decision) and d.reason is Reason.QUEUE_FULL for d in out)
    millis = _millis(out)
    assert len(set(millis)) == 100, "two simultaneous refusals got the same value"
    assert min(millis) >= 500 and max(millis) <= 1000  # within [min_s, 2 x min_s]


def test_the_window_stays_above_the_floor() -> None:
    params = RetryAfterParams(min_s=1.0, max_s=1.1, jitter=0.5)
    values = [retry_after(5.0, params, k / 100) for k in range(100)]
    assert min(values) >= 1.0 and max(values) < 1.1


PRESETS = sorted((Path(__file__).parents[4] / "presets").glob("*.yaml"))


@pytest.mark.parametrize("served", [100, 1_000_000], ids=["past-the-clamp", "below-it"])
@pytest.mark.parametrize("path", [None, *PRESETS], ids=lambda p: "default" if p is None else p.stem)
def test_a_hundred_queued_requests_expiring_together_are_told_different_values(
    path: Path | None, served: int
) -> None:
    """The matrix's probe withdraws what it queues, so it never sees this: a burst queued at
    one instant, behind a slot that is never freed, waits out the queue bound (5 s here, so
    the drain measured before stays in its window) together. Each refusal is told the
    queue's drain at that moment: past ``max_s`` at 100 tokens served in 15 s, under the
    floor ``min_s`` at a million. Under every shipped policy (some set jitter 0), no two
    may send their clients back in the same millisecond."""
    clock = ManualClock()
    raw = {} if path is None else yaml.safe_load(path.read_text())["policy"]
    queue = {**raw.get("queue", {}), "max_wait_s": 5.0}
    s = scheduler(clock, {**raw, "gates": [], "ladder": {"steps": []}, "queue": queue})
    f = fleet(clock, backend(max_num_seqs=1))
    _measure_a_slow_drain(s, clock, f, served)
    burst = [s.submit(request(clock), f) for _ in range(100)]
    assert all(isinstance(d, Decision) and d.queue_position is not None for d in burst)
    clock.advance(5.0)
    expired = [d for d in s.poll(f) if isinstance(d, Decision)]
    assert len(expired) == 100 and all(d.reason is Reason.OVERLOADED for d in expired)
    millis = _millis(list(expired))
    assert len(set(millis)) == 100, "two refusals of one instant got the same value"
    if served > 100:  # the drain is under the floor: the floor's window
        assert min(millis) >= 500 and max(millis) <= 1_000
    else:  # minutes of drain: at the clamp, spread below it
        assert min(millis) >= 10_000
