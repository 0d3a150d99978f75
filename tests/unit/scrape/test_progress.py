"""A backend is stalled when its counters stop moving while a request is on it, never while
they move: ``EngineProgress`` fed fake scrapes, and the bound ``StallBounds`` derives from
it, on an injected clock."""

from __future__ import annotations

from dataclasses import replace

from gateway.backends.scrape.progress import EngineProgress
from gateway.backends.scrape.sample import MetricsSample
from gateway.config.schema import StallConfig
from gateway.forward.stall import StallBounds
from tests.unit.policies.helpers import ManualClock

INTERVAL = 0.5
PERIOD = 1.0  # the longer of the interval and a scrape's deadline
FLOOR = 4 * PERIOD  # StallConfig's default floor, in seconds


def sample(steps: float, tokens: float, *, running: float = 1.0, kv: float = 0.1) -> MetricsSample:
    counters = {"steps": steps, "generation_tokens": tokens, "prompt_tokens": 100.0}
    return MetricsSample(running=running, waiting=0.0, kv_cache_usage=kv, counters=counters)


def bounds_for(progress: EngineProgress, clock: ManualClock) -> StallBounds:
    return StallBounds(
        StallConfig(),
        read_timeout_s=600.0,
        progress={"a": progress}.get,
        scrape_period_s=PERIOD,
        clock=clock,
    )


def test_a_backend_whose_counters_advance_is_never_stalled_however_long_the_request() -> None:
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    left = bounds_for(progress, clock).progress_left("a")
    assert left is not None
    started = clock.now
    for i in range(600):  # five minutes of a slow request, the engine stepping throughout
        progress.add(clock.now, sample(steps=10.0 * i, tokens=10.0 * i))
        assert left(clock.now - started) > 0, i
        clock.now += INTERVAL


def test_frozen_counters_with_a_request_on_the_backend_stall_it_after_the_floor() -> None:
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    bounds = bounds_for(progress, clock)
    left = bounds.progress_left("a")
    assert left is not None
    progress.add(clock.now, sample(steps=5.0, tokens=5.0))
    started = clock.now
    while clock.now - started < FLOOR - INTERVAL:
        clock.now += INTERVAL
        progress.add(clock.now, sample(steps=5.0, tokens=5.0))  # answers, moves nothing
        assert left(clock.now - started) > 0
    clock.now = started + FLOOR
    assert left(clock.now - started) <= 0
    assert bounds.progress_bound_s("a") == FLOOR  # no step measured: the floor


def test_failing_scrapes_show_no_progress_even_of_an_idle_engine() -> None:
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    left = bounds_for(progress, clock).progress_left("a")
    assert left is not None
    progress.add(clock.now, sample(steps=5.0, tokens=5.0, running=0.0))
    clock.now += 3600.0  # idle for an hour: nothing moved, nothing needed to
    progress.failed()  # then it stopped answering, and a request was sent to it
    started = clock.now
    assert left(0.0) == FLOOR  # the request gets the whole bound, from its start
    clock.now += FLOOR - 0.01
    assert left(clock.now - started) > 0
    clock.now += 0.02
    assert left(clock.now - started) <= 0


def test_an_answering_engine_reporting_no_work_gets_no_verdict() -> None:
    """A fresh vLLM's first step with a new request (a cold kernel path) publishes nothing
    until it ends: its gauges still say idle, and its counters cannot tell it from a hang."""
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    progress.add(clock.now, sample(steps=5.0, tokens=5.0, running=0.0))
    started = clock.now
    for _ in range(200):
        clock.now += INTERVAL
        progress.add(clock.now, sample(steps=5.0, tokens=5.0, running=0.0))
        assert progress.unmoved_s(clock.now, clock.now - started) is None
    deferred = replace(
        sample(steps=5.0, tokens=5.0, running=0.0),
        waiting=1.0,
        waiting_by_reason={"capacity": 0.0, "deferred": 1.0},
    )
    progress.add(clock.now, deferred)  # waiting for its grammar: the engine cannot run it
    assert progress.unmoved_s(clock.now, 100.0) is None
    progress.add(clock.now, sample(steps=5.0, tokens=5.0, running=1.0))
    assert progress.unmoved_s(clock.now, 30.0) == 30.0  # no move since the first scrape


def test_slow_steps_are_measured_and_the_bound_is_a_multiple_of_the_slowest() -> None:
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    bounds = bounds_for(progress, clock)
    progress.add(clock.now, sample(steps=0.0, tokens=0.0))
    for chunk in range(1, 6):  # a long prefill: one 2.6 s step per chunk, scraped at 0.5 s
        for _ in range(5):
            clock.now += INTERVAL
            progress.add(clock.now, sample(steps=chunk - 1, tokens=0.0, kv=0.1 * chunk))
        clock.now += 0.1
        progress.add(clock.now, sample(steps=chunk, tokens=0.0, kv=0.1 * (chunk + 1)))
    assert progress.step_s is not None and abs(progress.step_s - 2.6) < 1e-9
    assert bounds.progress_bound_s("a") == StallConfig().progress_factor * progress.step_s


def test_an_idle_spell_is_not_measured_as_a_slow_step() -> None:
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    progress.add(clock.now, sample(steps=10.0, tokens=10.0, running=0.0))  # idle after work
    clock.now += 60.0
    progress.add(clock.now, sample(steps=11.0, tokens=11.0))  # one step of a new request
    assert progress.step_s is None
    clock.now += INTERVAL
    progress.add(clock.now, sample(steps=61.0, tokens=61.0))
    assert progress.step_s == INTERVAL / 50


def test_a_restarted_server_counts_as_progress_but_not_as_a_step() -> None:
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    progress.add(clock.now, sample(steps=500.0, tokens=500.0))
    clock.now += INTERVAL
    progress.add(clock.now, sample(steps=2.0, tokens=2.0))
    assert progress.advanced_at == clock.now
    assert progress.step_s is None


def test_kv_usage_moving_alone_is_progress() -> None:
    """vLLM counts a prefill chunk that produced no token in no counter; its KV use grows."""
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    progress.add(clock.now, sample(steps=1.0, tokens=1.0, kv=0.1))
    clock.now += INTERVAL
    progress.add(clock.now, sample(steps=1.0, tokens=1.0, kv=0.2))
    assert progress.advanced_at == clock.now


def test_nothing_is_known_before_the_first_scrape_or_without_progress_families() -> None:
    clock, progress = ManualClock(), EngineProgress(window_s=30.0)
    assert progress.unmoved_s(clock.now, 10.0) is None
    progress.add(clock.now, MetricsSample(running=1.0))  # an engine exporting no counter
    assert progress.unmoved_s(clock.now + 60.0, 60.0) is None
    unwatched = StallBounds(StallConfig(), 600.0, progress={}.get, clock=clock)
    assert unwatched.progress_left("a") is None and unwatched.progress_bound_s("a") is None
