"""Metric names are data: one table per inference engine.

Each ``EngineMetrics`` names the Prometheus families (without the ``_bucket``/``_sum``/
``_count`` suffixes for histograms; counters with their ``_total``) that drive decisions.
A family set to None, or missing from a scrape, is tolerated: the signal it feeds is None.
Add an engine by adding a table here; nothing else names a metric.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """Family names for one engine version. None = the engine does not export it."""

    engine: str
    running: str | None = None
    """Gauge, requests in the running batch."""
    waiting: str | None = None
    """Gauge, requests waiting to be scheduled."""
    waiting_by_reason: str | None = None
    """Gauge with a ``reason`` label (vLLM: capacity, deferred)."""
    kv_cache_usage: str | None = None
    """Gauge, fraction of the KV cache in use, 0..1."""
    cache_config_info: str | None = None
    """Info gauge whose labels carry ``num_gpu_blocks``, ``block_size``,
    ``kv_cache_size_tokens``."""
    preemptions: str | None = None
    prompt_tokens: str | None = None
    generation_tokens: str | None = None
    steps: str | None = None
    """Counter of engine steps (vLLM: the count of its tokens-per-step histogram; steps
    that produced no output, such as a prefill chunk's, are not counted)."""
    request_success: str | None = None
    """Counter with a ``finished_reason`` label."""
    prefix_cache_queries: str | None = None
    """Counter of prompt tokens looked up in the prefix cache."""
    prefix_cache_hits: str | None = None
    """Counter of those found cached (their ratio is the engine's hit rate)."""
    admission_rejections: str | None = None
    """Counter with a ``reason`` label: the engine's own 503s."""
    queue_time: str | None = None
    prefill_time: str | None = None
    decode_time: str | None = None
    inference_time: str | None = None
    e2e_latency: str | None = None
    ttft: str | None = None
    prompt_tokens_per_request: str | None = None
    """Histogram of prompt length per request: p90 feeds the capacity estimate."""
    generation_tokens_per_request: str | None = None
    """Histogram of output length per request: shown beside the capacity estimate."""
    inter_token_latency: str | None = None
    """Histogram of the time between a request's consecutive output tokens (one engine
    step each): how much the batch slows every sequence's decode."""

    def counters(self) -> tuple[str, ...]:
        return _present(
            self.preemptions,
            self.prompt_tokens,
            self.generation_tokens,
            self.steps,
            self.request_success,
            self.admission_rejections,
            self.prefix_cache_queries,
            self.prefix_cache_hits,
        )

    def gauges(self) -> tuple[str, ...]:
        return _present(
            self.running,
            self.waiting,
            self.waiting_by_reason,
            self.kv_cache_usage,
            self.cache_config_info,
        )

    def histograms(self) -> tuple[str, ...]:
        return _present(
            self.queue_time,
            self.prefill_time,
            self.decode_time,
            self.inference_time,
            self.e2e_latency,
            self.ttft,
            self.prompt_tokens_per_request,
            self.generation_tokens_per_request,
            self.inter_token_latency,
        )


def _present(*names: str | None) -> tuple[str, ...]:
    return tuple(n for n in names if n is not None)


VLLM_0_32 = EngineMetrics(
    engine="vllm-0.32",
    running="vllm:num_requests_running",
    waiting="vllm:num_requests_waiting",
    waiting_by_reason="vllm:num_requests_waiting_by_reason",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    cache_config_info="vllm:cache_config_info",
    preemptions="vllm:num_preemptions_total",
    prompt_tokens="vllm:prompt_tokens_total",
    generation_tokens="vllm:generation_tokens_total",
    steps="vllm:iteration_tokens_total_count",
    request_success="vllm:request_success_total",
    admission_rejections="vllm:admission_rejections_total",
    prefix_cache_queries="vllm:prefix_cache_queries_total",
    prefix_cache_hits="vllm:prefix_cache_hits_total",
    queue_time="vllm:request_queue_time_seconds",
    prefill_time="vllm:request_prefill_time_seconds",
    decode_time="vllm:request_decode_time_seconds",
    inference_time="vllm:request_inference_time_seconds",
    e2e_latency="vllm:e2e_request_latency_seconds",
    ttft="vllm:time_to_first_token_seconds",
    prompt_tokens_per_request="vllm:request_prompt_tokens",
    generation_tokens_per_request="vllm:request_generation_tokens",
    inter_token_latency="vllm:inter_token_latency_seconds",
)

SGLANG = EngineMetrics(
    # From SGLang's "Production Metrics" documentation page; not yet checked against a
    # live server here. No phase histograms or KV geometry: those signals stay None.
    engine="sglang",
    running="sglang:num_running_reqs",
    waiting="sglang:num_queue_reqs",
    kv_cache_usage="sglang:token_usage",
    prompt_tokens="sglang:prompt_tokens_total",
    generation_tokens="sglang:generation_tokens_total",
    e2e_latency="sglang:e2e_request_latency_seconds",
    ttft="sglang:time_to_first_token_seconds",
)

ENGINES: dict[str, EngineMetrics] = {e.engine: e for e in (VLLM_0_32, SGLANG)}
"""Engine tables by name (the ``engine`` field of a scrape target)."""
