"""One scrape of a data-parallel server reduced to exact values: two engines that differ in
every family (counts and counters summed, KV usage the fullest, KV capacity from either
label form), values that are not numbers left out, and the view fields of the result."""

from __future__ import annotations

import dataclasses
import math

from gateway.backends.scrape.derive import Quantile
from gateway.backends.scrape.engines import VLLM_0_32
from gateway.backends.scrape.parse import parse_narrow, wanted_names
from gateway.backends.scrape.sample import Histogram, MetricsSample, extract
from gateway.backends.scrape.signals import Observation, derive
from gateway.backends.scrape.view import view_fields
from policies.step_latency import StepLatency

TWO_ENGINES = """\
vllm:num_requests_running{engine="0"} 3
vllm:num_requests_running{engine="1"} 5
vllm:num_requests_waiting{engine="0"} 1
vllm:num_requests_waiting{engine="1"} NaN
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 1
vllm:num_requests_waiting_by_reason{engine="1",reason="capacity"} 2
vllm:num_requests_waiting_by_reason{engine="1",reason="deferred"} 4
vllm:kv_cache_usage_perc{engine="0"} 0.75
vllm:kv_cache_usage_perc{engine="1"} 0.5
vllm:cache_config_info{engine="0",kv_cache_size_tokens="4096",num_gpu_blocks="1",block_size="1"} 1
vllm:cache_config_info{engine="1",num_gpu_blocks="100",block_size="16"} 1
vllm:num_preemptions_total{engine="0"} 2
vllm:num_preemptions_total{engine="1"} 3
vllm:request_success_total{engine="0",finished_reason="stop"} 10
vllm:request_success_total{engine="0",finished_reason="length"} 1
vllm:request_success_total{engine="1",finished_reason="stop"} +Inf
vllm:request_queue_time_seconds_bucket{engine="0",le="0.5"} 2
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf"} 3
vllm:request_queue_time_seconds_bucket{engine="1",le="0.5"} 4
vllm:request_queue_time_seconds_bucket{engine="1",le="+Inf"} 7
vllm:request_queue_time_seconds_sum{engine="0"} 1.5
vllm:request_queue_time_seconds_sum{engine="1"} 2.5
vllm:request_queue_time_seconds_count{engine="0"} 3
vllm:request_queue_time_seconds_count{engine="1"} 7
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.5"} 2
vllm:request_prefill_time_seconds_sum{engine="0"} 1
vllm:request_prefill_time_seconds_count{engine="0"} 2
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1"} 2
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf"} 2
vllm:e2e_request_latency_seconds_count{engine="0"} 2
"""


def _sample(text: str) -> MetricsSample:
    return extract(parse_narrow(text, wanted_names(VLLM_0_32)), VLLM_0_32)


def test_engines_add_up_and_the_fullest_kv_cache_counts() -> None:
    s = _sample(TWO_ENGINES)
    assert (s.running, s.waiting, s.kv_cache_usage) == (8.0, 1.0, 0.75)
    assert s.waiting_by_reason == {"capacity": 3.0, "deferred": 4.0}
    assert s.kv_cache_tokens == 4096.0 + 1600.0
    assert s.counters == {"preemptions": 5.0, "request_success": 11.0}
    assert s.histograms == {
        "queue_time": Histogram((0.5, math.inf), (6.0, 10.0), 4.0, 10.0),
    }  # prefill has no +Inf bucket, e2e no sum: neither is a histogram
    assert s.families_found == 4 + 2 + 1


def test_kv_capacity_is_unknown_when_an_engine_states_none() -> None:
    text = (
        'vllm:cache_config_info{engine="0",kv_cache_size_tokens="4096"} 1\n'
        'vllm:cache_config_info{engine="1",num_gpu_blocks="None",block_size="16"} 1\n'
    )
    assert _sample(text).kv_cache_tokens is None
    assert (
        _sample('vllm:cache_config_info{engine="0",num_gpu_blocks="0"} 1\n').kv_cache_tokens is None
    )
    empty = _sample("")
    assert (empty.running, empty.kv_cache_usage, empty.kv_cache_tokens) == (None, None, None)
    assert (empty.waiting_by_reason, empty.families_found) == ({}, 0)


def test_view_fields_carry_each_signal_and_staleness_past_the_age_bound() -> None:
    old = MetricsSample(
        running=1.0,
        counters={
            "preemptions": 1.0,
            "prompt_tokens": 10.0,
            "generation_tokens": 5.0,
            "admission_rejections": 0.0,
            "prefix_cache_queries": 100.0,
            "prefix_cache_hits": 50.0,
        },
    )
    new = _sample(TWO_ENGINES)
    new = MetricsSample(
        new.running,
        new.waiting,
        new.waiting_by_reason,
        new.kv_cache_usage,
        new.kv_cache_tokens,
        {
            "preemptions": 5.0,
            "prompt_tokens": 30.0,
            "generation_tokens": 45.0,
            "admission_rejections": 2.0,
            "prefix_cache_queries": 300.0,
            "prefix_cache_hits": 210.0,
        },
        new.histograms,
        new.kv_block_size,
    )
    step = StepLatency()
    step.itl_s, step.floor_s = 0.004, 0.002
    derived = derive(Observation(10.0, old), Observation(12.0, new), 8, running_peak=9.0, step=step)
    fields = view_fields(derived, now=15.0, max_age_s=3.0)
    assert fields == {
        "kv_cache_tokens": 5696.0,
        "kv_block_size": 1,  # the smaller of the engines' block sizes
        "running": 8.0,
        "waiting": 1.0,
        "kv_cache_usage": 0.75,
        "preemptions_per_s": 2.0,
        "prompt_tokens_per_s": 10.0,
        "generation_tokens_per_s": 20.0,
        "engine_rejections_per_s": 1.0,
        "queue_time_p50_s": 0.5 * 5.0 / 6.0,
        "queue_time_p90_s": 0.5,
        "ttft_p90_s": None,
        "e2e_p90_s": None,
        "capacity_estimate": 8.0,
        "prefill_tokens_per_s": None,
        "running_peak": 9.0,
        "itl_s": 0.004,
        "itl_floor_s": 0.002,
        "prefix_cache_hit_rate": 0.8,
        "signal_age_s": 3.0,
        "stale": False,
    }
    assert view_fields(derived, now=15.5, max_age_s=3.0)["stale"] is True
    assert view_fields(derived, now=11.0, max_age_s=3.0)["signal_age_s"] == 0.0


def test_view_fields_read_the_ttft_and_e2e_p90() -> None:
    latency = {
        "ttft": {
            0.5: Quantile(0.5, 0.1, 0.0, 0.2, True, False),
            0.9: Quantile(0.9, 0.3, 0.2, 0.5, False, False),
        },
        "e2e_latency": {0.9: Quantile(0.9, 4.0, 2.0, 5.0, False, False)},
    }
    derived = derive(None, Observation(1.0, MetricsSample()), None)
    derived = dataclasses.replace(derived, latency=latency)
    fields = view_fields(derived, now=1.0, max_age_s=3.0)
    assert (fields["ttft_p90_s"], fields["e2e_p90_s"], fields["queue_time_p50_s"]) == (
        0.3,
        4.0,
        None,
    )


def test_the_block_size_is_the_engines_smallest_and_unknown_when_unset() -> None:
    text = (
        'vllm:cache_config_info{engine="0",num_gpu_blocks="10",block_size="32"} 1\n'
        'vllm:cache_config_info{engine="1",num_gpu_blocks="10",block_size="16"} 1\n'
    )
    assert _sample(text).kv_block_size == 16
    assert _sample('vllm:cache_config_info{engine="0",block_size="None"} 1\n').kv_block_size is None
    assert _sample("").kv_block_size is None
