"""A backend's derived signals to the exact amount: the window's baseline at its edge, the
running peak, rates of counters present in both scrapes only, the engine's prefill rate,
the capacity basis in each case, and every gauge passed through."""

from __future__ import annotations

import math

from gateway.backends.scrape.derive import Quantile
from gateway.backends.scrape.sample import Histogram, MetricsSample
from gateway.backends.scrape.signals import Observation, SignalWindow, derive

INF = math.inf
PROMPTS = (10.0, 100.0, 1000.0, INF)


def _hist(bounds: tuple[float, ...], cumulative: tuple[float, ...], total: float) -> Histogram:
    return Histogram(bounds, cumulative, total, cumulative[-1])


def _sample(
    running: float | None = 4.0,
    counters: dict[str, float] | None = None,
    histograms: dict[str, Histogram] | None = None,
) -> MetricsSample:
    return MetricsSample(
        running=running,
        waiting=2.0,
        waiting_by_reason={"capacity": 2.0},
        kv_cache_usage=0.25,
        kv_cache_tokens=9000.0,
        counters=counters or {},
        histograms=histograms or {},
    )


def test_the_baseline_is_the_newest_scrape_at_or_before_the_window_edge() -> None:
    window = SignalWindow(window_s=5.0)
    assert window.derive(None) is None and window.newest is None
    for at, tokens in ((0.0, 0.0), (2.0, 100.0), (5.0, 400.0)):
        window.add(Observation(at, _sample(counters={"generation_tokens": tokens})))
    derived = window.derive(None)  # 0.0 is exactly at the edge of 5.0 - 5 s: the baseline
    assert derived is not None and derived.window_s == 5.0
    assert derived.rates == {"generation_tokens_per_s": 80.0}
    window.add(Observation(7.0, _sample(counters={"generation_tokens": 500.0})))
    derived = window.derive(None)  # edge at 2.0: the scrape at 2.0 is the baseline
    assert derived is not None and (derived.window_s, derived.rates) == (
        5.0,
        {"generation_tokens_per_s": 80.0},
    )
    assert window.newest is not None and window.newest.at == 7.0


def test_the_running_peak_is_the_highest_of_every_scrape() -> None:
    window = SignalWindow(window_s=1.0)
    for at, running in ((0.0, 3.0), (5.0, None), (10.0, 7.0), (20.0, 7.0), (30.0, 2.0)):
        window.add(Observation(at, _sample(running=running)))
    derived = window.derive(None)
    assert derived is not None and (derived.running, derived.running_peak) == (2.0, 7.0)
    quiet = SignalWindow(window_s=1.0)
    quiet.add(Observation(0.0, _sample(running=None)))
    assert quiet.running_peak is None


def test_rates_only_of_counters_in_both_scrapes_and_none_without_a_span() -> None:
    old = Observation(10.0, _sample(counters={"preemptions": 4.0, "prompt_tokens": 50.0}))
    new = Observation(
        14.0, _sample(counters={"preemptions": 2.0, "prompt_tokens": 250.0, "request_success": 9.0})
    )
    derived = derive(old, new, None)
    assert derived.rates == {"preemptions_per_s": 0.5, "prompt_tokens_per_s": 50.0}  # reset: 2
    assert derive(new, new, None).rates == {}
    assert derive(None, new, None).rates == {}


def test_gauges_pass_through_and_a_lone_scrape_covers_the_server_lifetime() -> None:
    derived = derive(None, Observation(3.0, _sample()), 16, running_peak=9.0)
    assert (derived.at, derived.window_s, derived.since_start) == (3.0, 0.0, True)
    assert (derived.running, derived.waiting, derived.kv_cache_usage) == (4.0, 2.0, 0.25)
    assert derived.waiting_by_reason == {"capacity": 2.0} and derived.running_peak == 9.0
    assert derived.capacity is not None and derived.capacity.value == 16.0
    assert derived.capacity_basis == "max_num_seqs"
    bare = derive(None, Observation(3.0, _sample()), None)
    assert bare.capacity_basis == "none" and bare.capacity is not None
    assert bare.capacity.value is None


def test_prefill_rate_is_prompt_tokens_over_prefill_seconds_in_the_window() -> None:
    prefill = _hist((1.0, INF), (4.0, 4.0), 2.0)
    prompts = _hist(PROMPTS, (0.0, 4.0, 4.0, 4.0), 300.0)
    derived = derive(
        None,
        Observation(
            0.0,
            _sample(
                histograms={
                    "prefill_time": prefill,
                    "prompt_tokens_per_request": prompts,
                }
            ),
        ),
        None,
    )
    assert derived.prefill_tokens_per_s == 150.0
    no_time = _hist((1.0, INF), (4.0, 4.0), 0.0)
    no_prompts = _hist(PROMPTS, (0.0, 0.0, 0.0, 0.0), 0.0)
    for hists in (
        {"prefill_time": no_time, "prompt_tokens_per_request": prompts},
        {"prefill_time": prefill, "prompt_tokens_per_request": no_prompts},
        {"prefill_time": prefill},
        {"prompt_tokens_per_request": prompts},
    ):
        lone = derive(None, Observation(0.0, _sample(histograms=hists)), None)
        assert lone.prefill_tokens_per_s is None


def test_capacity_from_the_windows_prompts_with_outputs_beside_them() -> None:
    def hists(n: float) -> dict[str, Histogram]:
        return {
            "prompt_tokens_per_request": _hist(PROMPTS, (0.0, n, n, n), 55.0 * n),
            "generation_tokens_per_request": _hist(PROMPTS, (0.0, 0.0, n, n), 500.0 * n),
        }

    derived = derive(
        Observation(0.0, _sample(histograms=hists(10.0))),
        Observation(5.0, _sample(histograms=hists(30.0))),
        128,
    )
    cap = derived.capacity
    assert cap is not None and derived.capacity_basis == "window"
    assert cap.p90_prompt_tokens == 10.0 + 90.0 * 0.9  # 20 new prompts, all in (10, 100]
    assert cap.p90_output_tokens == 100.0 + 900.0 * 0.9
    assert cap.value == 9000.0 / 91.0
    assert derived.latency == {}


def test_latency_quantiles_of_each_field_that_saw_requests() -> None:
    ttft = _hist((0.1, 1.0, INF), (0.0, 10.0, 10.0), 3.0)
    derived = derive(None, Observation(0.0, _sample(histograms={"ttft": ttft})), None)
    assert set(derived.latency) == {"ttft"}
    assert derived.latency["ttft"][0.5] == Quantile(0.5, 0.55, 0.1, 1.0, False, False)
    assert set(derived.latency["ttft"]) == {0.5, 0.9, 0.99}


def test_rates_over_a_window_shorter_than_a_second() -> None:
    old = Observation(10.0, _sample(counters={"prompt_tokens": 50.0}))
    new = Observation(10.5, _sample(counters={"prompt_tokens": 80.0}))
    assert derive(old, new, None).rates == {"prompt_tokens_per_s": 60.0}
