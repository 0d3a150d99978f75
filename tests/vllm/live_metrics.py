"""Numbers read from a live vLLM /metrics with the reference parser (``prometheus_client``),
independently of the gateway's own narrow parser, so tests can check the gateway's derived
signals against the server's own figures."""

from __future__ import annotations

import math

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def _samples(base_url: str, name: str) -> list[Sample]:
    text = httpx.get(f"{base_url}/metrics", timeout=30.0).text
    families = text_string_to_metric_families(text)
    return [s for fam in families for s in fam.samples if s.name == name]


def kv_cache_tokens(base_url: str) -> float:
    """KV-cache tokens of the server, summed over engines, from ``vllm:cache_config_info``:
    ``kv_cache_size_tokens``, else ``num_gpu_blocks x block_size``."""
    total = 0.0
    samples = _samples(base_url, "vllm:cache_config_info")
    assert samples, "no vllm:cache_config_info on the live server"
    for sample in samples:
        size = sample.labels.get("kv_cache_size_tokens", "None")
        if size not in ("", "None"):
            total += float(size)
        else:
            total += float(sample.labels["num_gpu_blocks"]) * float(sample.labels["block_size"])
    return total


def bucket_counts(base_url: str, histogram: str) -> list[tuple[float, float]]:
    """``(upper bound, cumulative count)`` of a histogram, summed over label sets, by bound."""
    summed: dict[float, float] = {}
    for sample in _samples(base_url, f"{histogram}_bucket"):
        bound = float(sample.labels["le"])
        summed[bound] = summed.get(bound, 0.0) + sample.value
    return sorted(summed.items())


def occupied_range(buckets: list[tuple[float, float]]) -> tuple[float, float]:
    """``[lower, upper]`` spanning every bucket that holds an observation."""
    lower, upper, previous_bound, previous_count = math.inf, -math.inf, 0.0, 0.0
    for bound, count in buckets:
        if count > previous_count:
            lower, upper = min(lower, previous_bound), max(upper, bound)
        previous_bound, previous_count = bound, count
    return lower, upper


def bucket_holding(buckets: list[tuple[float, float]], value: float) -> tuple[float, float]:
    """The ``(lower, upper]`` bucket of ``buckets`` that ``value`` falls in."""
    lower = 0.0
    for bound, _ in buckets:
        if value <= bound:
            return lower, bound
        lower = bound
    return lower, math.inf
