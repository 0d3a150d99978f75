from __future__ import annotations

import math

import pytest

from gateway.backends.scrape.sample import Histogram, MetricsSample
from gateway.backends.scrape.signals import DerivedSignals, Observation, SignalWindow
from gateway.backends.scrape.view import VIEW_FIELDS, view_fields
from policies.backends import BackendView

INF = math.inf
BOUNDS = (0.3, 1.0, 10.0, INF)
PROMPT_BOUNDS = (10.0, 100.0, 1000.0, INF)


def _derived(max_num_seqs: int | None, *observations: Observation) -> DerivedSignals | None:
    """What a 10 s window derives from ``observations``, in order."""
    window = SignalWindow(window_s=10.0)
    for observation in observations:
        window.add(observation)
    return window.derive(max_num_seqs=max_num_seqs)


def sample(
    *,
    preemptions: float = 0.0,
    tokens: float = 0.0,
    queue: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0),
    prompts: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0),
    waiting: float = 0.0,
) -> MetricsSample:
    return MetricsSample(
        running=4.0,
        waiting=waiting,
        kv_cache_usage=0.5,
        kv_cache_tokens=10_000.0,
        counters={"preemptions": preemptions, "generation_tokens": tokens},
        histograms={
            "queue_time": Histogram(BOUNDS, queue, 0.0, queue[-1]),
            "prompt_tokens_per_request": Histogram(PROMPT_BOUNDS, prompts, 0.0, prompts[-1]),
        },
    )


def test_rates_are_deltas_over_the_window_span() -> None:
    derived = _derived(
        None,
        Observation(100.0, sample(preemptions=5.0, tokens=1000.0)),
        Observation(104.0, sample(preemptions=7.0, tokens=1800.0)),
    )
    assert derived is not None
    assert derived.window_s == 4.0
    assert derived.rates["preemptions_per_s"] == pytest.approx(0.5)
    assert derived.rates["generation_tokens_per_s"] == pytest.approx(200.0)


def test_old_scrapes_leave_the_window_so_rates_follow_recent_load() -> None:
    window = SignalWindow(window_s=5.0)
    for at, tokens in ((0.0, 0.0), (5.0, 5000.0), (10.0, 5100.0)):
        window.add(Observation(at, sample(tokens=tokens)))
    derived = window.derive(max_num_seqs=None)
    assert derived is not None
    assert derived.window_s == 5.0
    assert derived.rates["generation_tokens_per_s"] == pytest.approx(20.0)


def test_queue_quantiles_describe_the_window_not_the_lifetime() -> None:
    window = SignalWindow(window_s=10.0)
    # 100 fast requests before the window ...
    window.add(Observation(0.0, sample(queue=(100.0, 100.0, 100.0, 100.0))))
    # ... then 10 requests that queued 1-10 s
    window.add(Observation(10.0, sample(queue=(100.0, 100.0, 110.0, 110.0))))
    derived = window.derive(max_num_seqs=None)
    assert derived is not None
    p50 = derived.latency["queue_time"][0.5]
    assert (p50.lower, p50.upper) == (1.0, 10.0)


def test_single_scrape_has_gauges_but_no_rates_or_window_quantiles() -> None:
    derived = _derived(None, Observation(0.0, sample(queue=(5.0, 5.0, 5.0, 5.0), waiting=3.0)))
    assert derived is not None
    assert derived.waiting == 3.0
    assert derived.rates == {}
    assert "queue_time" not in derived.latency


def test_capacity_uses_window_p90_prompt_then_lifetime() -> None:
    window = SignalWindow(window_s=10.0)
    # lifetime: 10 prompts in (100, 1000]; window: no new prompt
    window.add(Observation(0.0, sample(prompts=(0.0, 0.0, 10.0, 10.0))))
    window.add(Observation(5.0, sample(prompts=(0.0, 0.0, 10.0, 10.0))))
    derived = window.derive(max_num_seqs=64)
    assert derived is not None and derived.capacity is not None
    assert derived.capacity_basis == "lifetime"
    assert derived.capacity.p90_prompt_tokens == pytest.approx(100.0 + 900.0 * 0.9)
    assert derived.capacity.value == pytest.approx(10_000.0 / 910.0)
    # 10 short prompts arrive: the window's p90 takes over
    window.add(Observation(8.0, sample(prompts=(10.0, 10.0, 20.0, 20.0))))
    derived = window.derive(max_num_seqs=64)
    assert derived is not None and derived.capacity is not None
    assert derived.capacity_basis == "window"
    assert derived.capacity.value == 64.0


def test_view_fields_are_backend_view_fields_and_build_one() -> None:
    window = SignalWindow(window_s=10.0)
    window.add(Observation(0.0, sample(queue=(1.0, 2.0, 2.0, 2.0))))
    window.add(Observation(1.0, sample(queue=(1.0, 4.0, 4.0, 4.0), waiting=2.0)))
    fields = view_fields(window.derive(None), now=1.5, max_age_s=1.0)
    assert set(fields) == set(VIEW_FIELDS)
    view = BackendView(name="b", models=frozenset({"m"}), **fields)  # type: ignore[arg-type]
    assert view.waiting == 2.0
    assert view.signal_age_s == pytest.approx(0.5)
    assert view.stale is False
    assert view.queue_time_p90_s is not None and 0.3 <= view.queue_time_p90_s <= 1.0


def test_old_signal_is_stale_and_never_scraped_is_stale() -> None:
    window = SignalWindow(window_s=10.0)
    window.add(Observation(0.0, sample()))
    assert view_fields(window.derive(None), now=3.5, max_age_s=3.0)["stale"] is True
    assert view_fields(window.derive(None), now=2.5, max_age_s=3.0)["stale"] is False
    assert view_fields(None, now=0.0, max_age_s=3.0) == {"signal_age_s": None, "stale": True}


def cache_sample(queries: float, hits: float) -> MetricsSample:
    return MetricsSample(counters={"prefix_cache_queries": queries, "prefix_cache_hits": hits})


def _hit_rate(first: tuple[float, float], second: tuple[float, float]) -> float | None:
    """The hit rate of a window of two scrapes 5 s apart, each (queries, hits) so far."""
    derived = _derived(
        None, Observation(0.0, cache_sample(*first)), Observation(5.0, cache_sample(*second))
    )
    assert derived is not None
    return derived.prefix_cache_hit_rate


def test_prefix_cache_hit_rate_is_the_windows_hits_over_its_queries() -> None:
    assert _hit_rate((1000.0, 100.0), (3000.0, 1700.0)) == pytest.approx(0.8)


def test_prefix_cache_hit_rate_falls_back_to_the_lifetime_when_the_window_is_idle() -> None:
    assert _hit_rate((1000.0, 250.0), (1000.0, 250.0)) == pytest.approx(0.25)
    nothing = SignalWindow(window_s=10.0)
    nothing.add(Observation(0.0, cache_sample(0.0, 0.0)))
    assert nothing.derive(max_num_seqs=None).prefix_cache_hit_rate is None  # type: ignore[union-attr]
    unexported = SignalWindow(window_s=10.0)
    unexported.add(Observation(0.0, MetricsSample()))
    assert unexported.derive(max_num_seqs=None).prefix_cache_hit_rate is None  # type: ignore[union-attr]
