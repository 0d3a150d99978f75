from __future__ import annotations

import pytest

from gateway.backends.scrape.engines import ENGINES, SGLANG, VLLM_0_32
from gateway.backends.scrape.parse import parse_narrow, parse_reference, wanted_names
from gateway.backends.scrape.sample import extract

WANTED = wanted_names(VLLM_0_32)


@pytest.mark.parametrize("dump", ["under_load", "preemption"])
def test_narrow_parser_agrees_with_prometheus_client(
    dump: str, request: pytest.FixtureRequest
) -> None:
    text = request.getfixturevalue(dump)
    narrow = extract(parse_narrow(text, WANTED), VLLM_0_32)
    reference = extract(parse_reference(text, WANTED), VLLM_0_32)
    assert narrow == reference
    assert narrow.families_found == 4 + 8 + 9


def test_gauges_of_the_under_load_dump(under_load: str) -> None:
    sample = extract(parse_narrow(under_load, WANTED), VLLM_0_32)
    # values read by hand from tests/fixtures/vllm-0.32-metrics-under-load.txt
    assert sample.running == 8.0
    assert sample.waiting == 12.0
    assert sample.waiting_by_reason == {"capacity": 12.0, "deferred": 0.0}
    assert sample.kv_cache_usage == pytest.approx(0.00782013685239491)
    assert sample.kv_cache_tokens == 131072.0
    assert sample.counters["prompt_tokens"] == 198.0
    assert sample.counters["generation_tokens"] == 1681.0
    assert sample.counters["steps"] == 396.0  # the count of vllm:iteration_tokens_total
    assert sample.counters["request_success"] == 14.0  # 14 "length", others 0
    assert sample.counters["prefix_cache_queries"] == 198.0
    assert sample.counters["prefix_cache_hits"] == 0.0
    queue = sample.histograms["queue_time"]
    assert (queue.count, queue.bounds[0], queue.cumulative[0]) == (14.0, 0.3, 14.0)


def test_preemptions_and_kv_geometry_of_the_preemption_dump(preemption: str) -> None:
    sample = extract(parse_narrow(preemption, WANTED), VLLM_0_32)
    assert sample.counters["preemptions"] == 11.0
    assert sample.kv_cache_tokens == 16 * 128  # num_gpu_blocks="16", block_size="128"
    assert sample.running == 0.0


def test_missing_family_is_tolerated(under_load: str) -> None:
    trimmed = "\n".join(
        line for line in under_load.splitlines() if "request_queue_time" not in line
    )
    sample = extract(parse_narrow(trimmed, WANTED), VLLM_0_32)
    assert "queue_time" not in sample.histograms
    assert sample.running == 8.0


def test_kv_tokens_from_blocks_when_size_label_absent() -> None:
    text = (
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="100",'
        'kv_cache_size_tokens="None"} 1\n'
    )
    sample = extract(parse_narrow(text, WANTED), VLLM_0_32)
    assert sample.kv_cache_tokens == 1600.0


@pytest.mark.parametrize(
    "body",
    [
        "",
        "\x00\x01garbage{{{ \n}}} not metrics",
        'vllm:num_requests_running{engine="0" 8\n',  # unterminated labels
        "vllm:num_requests_running notanumber\n",
        "<html><body>502 Bad Gateway</body></html>",
    ],
)
def test_garbage_yields_nothing_and_never_raises(body: str) -> None:
    assert extract(parse_narrow(body, WANTED), VLLM_0_32).families_found == 0
    assert extract(parse_reference(body, WANTED), VLLM_0_32).families_found == 0


def test_escaped_label_values_are_unescaped() -> None:
    text = 'vllm:num_requests_waiting_by_reason{reason="a\\"b,c=\\"d"} 3\n'
    sample = extract(parse_narrow(text, WANTED), VLLM_0_32)
    assert sample.waiting_by_reason == {'a"b,c="d': 3.0}


def test_data_parallel_engines_are_summed_and_kv_takes_the_fullest() -> None:
    text = (
        'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 4\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.2\nvllm:kv_cache_usage_perc{engine="1"} 0.7\n'
    )
    sample = extract(parse_narrow(text, WANTED), VLLM_0_32)
    assert (sample.running, sample.kv_cache_usage) == (7.0, 0.7)


def test_other_engine_tables_read_their_own_names() -> None:
    text = "sglang:num_running_reqs 5\nsglang:num_queue_reqs 2\nvllm:num_requests_running 9\n"
    sample = extract(parse_narrow(text, wanted_names(SGLANG)), SGLANG)
    assert (sample.running, sample.waiting) == (5.0, 2.0)
    assert set(ENGINES) >= {"vllm-0.32", "sglang"}
