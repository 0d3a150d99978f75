"""vLLM 0.32's ``/metrics`` for the emulator, fed by engine steps.

The families (names, types, help, labels, buckets, pre-created children) come from
``vllm_metrics_0.32.json`` (see ``emulator.metric_table``); this module only says which engine
event feeds which family. Durations are wall seconds: under ``--speed K`` the emulator is a
card K times faster, and it reports its durations as that card would (engine seconds / K),
the same clock as every other observation of it (TTFT seen by a client, the gateway's
meters); rates learnt from them, such as the prefill rate, then hold in wall time.
Families the engine does not model (multi-modal cache, KV transfer, FLOPs estimates,
sleep) are exposed with vLLM's idle values.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from emulator.engine import Engine, FinishedRequest, StepResult
from emulator.metric_table import FamilySpec, load_table
from emulator.profile import EngineConfig

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM sizes these token-count histograms with a 1-2-5 series up to max_model_len.
_SIZED_BY_MODEL_LEN = {
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_max_tokens",
    "vllm:request_prefill_kv_computed_tokens",
}


def one_two_five_buckets(limit: int) -> list[float]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``limit``."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > limit:
                return out
            out.append(float(value))
        exponent += 1


class EmulatorMetrics:
    """All vLLM families of one engine, in their own registry."""

    def __init__(
        self, model_name: str, config: EngineConfig, *, engine_index: str = "0", speed: float = 1.0
    ) -> None:
        self.registry = CollectorRegistry()
        self._wall = 1.0 / speed
        """Wall seconds per engine second."""
        self._identity = {"engine": engine_index, "model_name": model_name}
        self._config = config
        self._families: dict[str, Any] = {}
        self._max_tokens: dict[str, int] = {}
        for spec in load_table():
            self._families[spec["name"]] = self._declare(spec)
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        self._child("vllm:engine_sleep_state", sleep_state="awake").set(1)

    # -- declaration -------------------------------------------------------------------------
    def _declare(self, spec: FamilySpec) -> Any:
        name, labels = spec["name"], spec["labels"]
        kwargs: dict[str, Any] = {"labelnames": labels, "registry": self.registry}
        if spec["type"] == "counter":
            family: Any = Counter(name, spec["help"], **kwargs)
        elif spec["type"] == "histogram":
            buckets = spec["buckets"]
            if name in _SIZED_BY_MODEL_LEN:
                buckets = one_two_five_buckets(self._config.max_model_len)
            family = Histogram(name, spec["help"], buckets=buckets, **kwargs)
        else:
            family = Gauge(name, spec["help"], **kwargs)
        if spec["constant_labels"]:
            family.labels(**self._constant_labels(spec)).set(1)
            return family
        for child_labels in self._children(spec):
            family.labels(**child_labels)
        return family

    def _children(self, spec: FamilySpec) -> list[dict[str, str]]:
        base = {k: v for k, v in self._identity.items() if k in spec["labels"]}
        if not spec["label_values"]:
            return [base]
        ((label, values),) = spec["label_values"].items()
        return [{**base, label: value} for value in values]

    def _constant_labels(self, spec: FamilySpec) -> dict[str, str]:
        cfg = self._config
        own = {
            "block_size": str(cfg.block_size),
            "num_gpu_blocks": str(cfg.num_gpu_blocks),
            "kv_cache_size_tokens": str(cfg.kv_cache_size_tokens),
            "kv_cache_max_concurrency": str(cfg.kv_cache_size_tokens / cfg.max_model_len),
            "effective_attention_block_size": str(cfg.block_size),
            "enable_prefix_caching": str(cfg.enable_prefix_caching),
        }
        merged = {**spec["constant_labels"], **own, "engine": self._identity["engine"]}
        return {k: v for k, v in merged.items() if k in spec["labels"]}

    def _child(self, name: str, **extra: str) -> Any:
        return self._families[name].labels(**self._identity, **extra)

    # -- events ------------------------------------------------------------------------------
    def on_admitted(self, req_id: str, max_tokens: int) -> None:
        """A request entered the engine with this effective ``max_tokens``."""
        self._max_tokens[req_id] = max_tokens

    def on_aborted(self, req_id: str) -> None:
        """Client gone: vLLM counts aborted requests nowhere, so only forget it."""
        self._max_tokens.pop(req_id, None)

    def on_rejected(self, reason: str) -> None:
        family = self._families["vllm:admission_rejections"]
        family.labels(model_name=self._identity["model_name"], reason=reason).inc()

    def on_step(self, step: StepResult) -> None:
        if step.scheduled_tokens:
            self._child("vllm:iteration_tokens_total").observe(step.scheduled_tokens)
        if step.prefix_cache_queries:
            self._child("vllm:prefix_cache_queries").inc(step.prefix_cache_queries)
            self._child("vllm:prefix_cache_hits").inc(step.prefix_cache_hits)
            device = self._child("vllm:prompt_tokens_cached_by_source", source="device")
            device.inc(step.prefix_cache_hits)
        if step.new_prompt_tokens:
            self._child("vllm:prompt_tokens").inc(step.new_prompt_tokens)
            computed = step.new_prompt_tokens - step.new_cached_tokens
            self._child("vllm:prompt_tokens_by_source", source="local_compute").inc(computed)
            hit = self._child("vllm:prompt_tokens_by_source", source="local_cache_hit")
            hit.inc(step.new_cached_tokens)
        generated = sum(step.tokens_emitted.values())
        if generated:
            self._child("vllm:generation_tokens").inc(generated)
        if step.preempted:
            self._child("vllm:num_preemptions").inc(len(step.preempted))
        wall = self._wall
        for ttft in step.ttft_s.values():
            self._child("vllm:time_to_first_token_seconds").observe(ttft * wall)
        for itl in step.inter_token_latencies_s:
            self._child("vllm:inter_token_latency_seconds").observe(itl * wall)
        for finished in step.finished:
            self._on_finished(finished)

    def _on_finished(self, fin: FinishedRequest) -> None:
        self._child("vllm:request_success", finished_reason=fin.finish_reason).inc()
        max_tokens = self._max_tokens.pop(fin.req_id, fin.output_tokens)
        wall = self._wall
        observations = {
            "vllm:e2e_request_latency_seconds": fin.e2e_s * wall,
            "vllm:request_queue_time_seconds": fin.queue_time_s * wall,
            "vllm:request_prefill_time_seconds": fin.prefill_time_s * wall,
            "vllm:request_decode_time_seconds": fin.decode_time_s * wall,
            "vllm:request_inference_time_seconds": fin.inference_time_s * wall,
            "vllm:request_time_per_output_token_seconds": fin.time_per_output_token_s * wall,
            "vllm:request_prompt_tokens": fin.prompt_tokens,
            "vllm:request_generation_tokens": fin.output_tokens,
            "vllm:request_prefill_kv_computed_tokens": fin.prompt_tokens - fin.cached_tokens,
            "vllm:request_max_num_generation_tokens": max_tokens,
            "vllm:request_params_max_tokens": max_tokens,
            "vllm:request_params_n": 1,
            "vllm:request_num_preemptions": fin.num_preemptions,
        }
        for name, value in observations.items():
            self._child(name).observe(value)

    def sync(self, engine: Engine) -> None:
        """Copy the engine's gauges (call before rendering)."""
        self._child("vllm:num_requests_running").set(engine.num_running)
        self._child("vllm:num_requests_waiting").set(engine.num_waiting)
        self._child("vllm:num_requests_waiting_by_reason", reason="capacity").set(
            engine.num_waiting
        )
        self._child("vllm:kv_cache_usage_perc").set(engine.kv_cache_usage)

    def render(self) -> bytes:
        return generate_latest(self.registry)
