"""Derived signals → the ``BackendView`` field mapping the backend pool merges in.

Staleness contract: a backend whose newest successful scrape is older than ``max_age_s``
(or that was never scraped) gets ``stale=True``. Policies treat a stale backend as
saturated: it keeps its health, but receives no new work on the strength of old numbers.
"""

from __future__ import annotations

from gateway.backends.scrape.signals import DerivedSignals

VIEW_FIELDS = (
    "running",
    "waiting",
    "kv_cache_usage",
    "preemptions_per_s",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "queue_time_p50_s",
    "queue_time_p90_s",
    "ttft_p90_s",
    "e2e_p90_s",
    "engine_rejections_per_s",
    "capacity_estimate",
    "prefill_tokens_per_s",
    "running_peak",
    "itl_s",
    "itl_floor_s",
    "prefix_cache_hit_rate",
    "kv_cache_tokens",
    "kv_block_size",
    "signal_age_s",
    "stale",
)
"""Every key ``view_fields`` may return; each is a ``policies.backends.BackendView`` field."""


def view_fields(derived: DerivedSignals | None, now: float, max_age_s: float) -> dict[str, object]:
    """The mapping for one backend at ``now`` (clock seconds). Unknown signals are None."""
    if derived is None:
        return {"signal_age_s": None, "stale": True}
    age = max(0.0, now - derived.at)
    return {
        "running": derived.running,
        "waiting": derived.waiting,
        "kv_cache_usage": derived.kv_cache_usage,
        "preemptions_per_s": derived.rates.get("preemptions_per_s"),
        "prompt_tokens_per_s": derived.rates.get("prompt_tokens_per_s"),
        "generation_tokens_per_s": derived.rates.get("generation_tokens_per_s"),
        "queue_time_p50_s": _quantile(derived, "queue_time", 0.5),
        "queue_time_p90_s": _quantile(derived, "queue_time", 0.9),
        "ttft_p90_s": _quantile(derived, "ttft", 0.9),
        "e2e_p90_s": _quantile(derived, "e2e_latency", 0.9),
        "engine_rejections_per_s": derived.rates.get("engine_rejections_per_s"),
        "capacity_estimate": derived.capacity.value if derived.capacity else None,
        "prefill_tokens_per_s": derived.prefill_tokens_per_s,
        "running_peak": derived.running_peak,
        "itl_s": derived.itl_s,
        "itl_floor_s": derived.itl_floor_s,
        "prefix_cache_hit_rate": derived.prefix_cache_hit_rate,
        "kv_cache_tokens": derived.kv_cache_tokens,
        "kv_block_size": derived.kv_block_size,
        "signal_age_s": age,
        "stale": age > max_age_s,
    }


def _quantile(derived: DerivedSignals, family: str, q: float) -> float | None:
    estimate = derived.latency.get(family, {}).get(q)
    return estimate.value if estimate is not None else None
